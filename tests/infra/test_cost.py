"""The docs' cost table (docs/how-to/cost.md) is what `cronledger_infra.cost` computes from the templates each
profile synthesizes, so it cannot drift from what a profile deploys."""

from __future__ import annotations

import pytest

from cronledger_infra import cost
from cronledger_infra.stack import PROJECT_ROOT
from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.xdist_group(name="infra")


@pytest.fixture(scope="module")
def templates(
    lean: Synthesized, lean_nat: Synthesized, synthesized: Synthesized, ha: Synthesized
) -> dict[str, dict]:
    return {s.profile: s.template for s in (lean, lean_nat, synthesized, ha)}


def test_the_docs_cost_table_is_the_one_the_templates_yield(templates: dict[str, dict]):
    page = (PROJECT_ROOT / cost.COST_PAGE).read_text()

    assert cost.in_page(page) == cost.render(templates)


def test_the_table_counts_what_each_profile_makes(templates: dict[str, dict]):
    made = {profile: cost.made(template) for profile, template in templates.items()}

    assert (made["lean"].proxies, made["lean"].nat_gateways, made["lean"].endpoint_azs) == (
        0,
        0,
        (1, 1, 1),
    )
    assert (made["lean-nat"].nat_gateways, made["lean-nat"].endpoint_azs) == (1, ())
    assert (made["standard"].proxies, made["standard"].endpoint_azs) == (1, (2, 2))
    assert (made["ha"].instances, made["ha"].nat_gateways) == (2, 2)
    assert made["standard"].alarm_metrics > len(
        [r for r in templates["standard"]["Resources"].values() if r["Type"].endswith("Alarm")]
    )  # a metric-math alarm is billed per metric it reads


def test_each_profile_costs_more_than_the_one_before_it(templates: dict[str, dict]):
    totals = cost.render(templates).splitlines()[-1]
    amounts = [float(cell.strip(" *$").replace(",", "")) for cell in totals.split("|")[3:-1]]

    assert amounts == sorted(amounts) and len(set(amounts)) == 4
