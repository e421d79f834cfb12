"""The cost table of the docs' "Profiles and cost" page (`COST_PAGE`), recomputed from the
synthesized templates: what each profile makes (instances, proxies, endpoints per AZ, NAT
gateways, secrets, keys, alarm metrics), times the list prices below. A test compares the page's
table with this module's output, so a change to what a profile deploys cannot leave the table
behind.

`python -m cronledger_infra.cost` prints the table; `--write` puts it in the page between its
markers; `--check` exits non-zero when the page's differs. Prices are AWS's us-east-1
on-demand list prices (Aurora Standard storage, arm64 Lambda), `HOURS` a month; usage is a
small installation's: a few hourly jobs, about 1 GB of ledger, what `make bench` measures of
`reconcile` + `claim`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOURS = 730
#: The page that holds the table, from the project's root.
COST_PAGE = Path("docs/how-to/cost.md")
#: The page's typography: an empty cell, and "times".
NONE = "\N{EN DASH}"
TIMES = "\N{MULTIPLICATION SIGN}"
PROFILE_ORDER = ("lean", "lean-nat", "standard", "ha")
BEGIN = "<!-- cost table: infra/cronledger_infra/cost.py --write -->"
END = "<!-- end of cost table -->"

ACU_HOUR = 0.12
MIN_ACU = 0.5
STORAGE_GB_MONTH = 0.10
IO_MILLION = 0.20
PROXY_ACU_HOUR = 0.015
PROXY_MIN_ACU = 8
ENDPOINT_AZ_HOUR = 0.01
NAT_HOUR = 0.045
SECRET_MONTH = 0.40
KMS_KEY_MONTH = 1.00
LAMBDA_GB_SECOND = 0.0000133334
LAMBDA_MILLION_REQUESTS = 0.20
ALARM_METRIC_MONTH = 0.10
CUSTOM_METRIC_MONTH = 0.30
DASHBOARD_MONTH = 3.00
LOGS_GB = 0.50

# a small installation's usage
STORAGE_GB = 1
IO_MILLIONS = 5
LAMBDA_GB_SECONDS = 11_300
LAMBDA_REQUESTS = 88_000
CUSTOM_METRICS = 18
LOG_GB = 0.2


@dataclass(frozen=True)
class Made:
    """What one template makes that is billed by the month."""

    instances: int
    proxies: int
    endpoint_azs: tuple[int, ...]
    nat_gateways: int
    secrets: int
    kms_keys: int
    alarm_metrics: int
    dashboards: int


def made(template: Mapping[str, Any]) -> Made:
    resources = list(template["Resources"].values())

    def of(kind: str) -> list[dict[str, Any]]:
        return [r.get("Properties", {}) for r in resources if r["Type"] == kind]

    alarm_metrics = sum(
        len([q for q in a["Metrics"] if "MetricStat" in q]) if "Metrics" in a else 1
        for a in of("AWS::CloudWatch::Alarm")
    )
    return Made(
        instances=len(of("AWS::RDS::DBInstance")),
        proxies=len(of("AWS::RDS::DBProxy")),
        endpoint_azs=tuple(
            len(e["SubnetIds"])
            for e in of("AWS::EC2::VPCEndpoint")
            if e.get("VpcEndpointType") == "Interface"
        ),
        nat_gateways=len(of("AWS::EC2::NatGateway")),
        secrets=len(of("AWS::SecretsManager::Secret")),
        kms_keys=len(of("AWS::KMS::Key")),
        alarm_metrics=alarm_metrics,
        dashboards=len(of("AWS::CloudWatch::Dashboard")),
    )


def _money(amount: float) -> str:
    return f"${amount:,.2f}"


@dataclass(frozen=True)
class Line:
    item: str
    price: str
    #: (amount, the cell's text) of a profile's template
    cost: Callable[[Made], tuple[float, str]]


def _plain(amount: float) -> tuple[float, str]:
    return amount, (_money(amount) if amount else NONE)


def _endpoints(m: Made) -> tuple[float, str]:
    amount = sum(m.endpoint_azs) * ENDPOINT_AZ_HOUR * HOURS
    if not m.endpoint_azs:
        return 0.0, NONE
    azs = set(m.endpoint_azs)
    shape = f"{len(m.endpoint_azs)} {TIMES} {azs.pop()} AZ" if len(azs) == 1 else "several"
    return amount, f"{shape}: {_money(amount)}"


def _nat(m: Made) -> tuple[float, str]:
    amount = m.nat_gateways * NAT_HOUR * HOURS
    return amount, (f"{m.nat_gateways}: {_money(amount)}" if m.nat_gateways else NONE)


LINES = (
    Line(
        "Aurora Serverless v2 writer",
        f"${ACU_HOUR} per ACU-hour, {MIN_ACU} ACU minimum",
        lambda m: _plain(min(m.instances, 1) * ACU_HOUR * MIN_ACU * HOURS),
    ),
    Line(
        "Aurora reader (second AZ)",
        "the same, scaled with the writer",
        lambda m: _plain(max(m.instances - 1, 0) * ACU_HOUR * MIN_ACU * HOURS),
    ),
    Line(
        "Aurora storage and I/O",
        f"${STORAGE_GB_MONTH:.2f} per GB-month; ${IO_MILLION:.2f} per million I/O: "
        f"{STORAGE_GB} GB, {IO_MILLIONS} million I/O",
        lambda m: _plain(STORAGE_GB * STORAGE_GB_MONTH + IO_MILLIONS * IO_MILLION),
    ),
    Line(
        "RDS Proxy",
        f"${PROXY_ACU_HOUR} per ACU-hour, {PROXY_MIN_ACU} ACU minimum for Serverless v2",
        lambda m: _plain(m.proxies * PROXY_ACU_HOUR * PROXY_MIN_ACU * HOURS),
    ),
    Line(
        "interface endpoints",
        f"${ENDPOINT_AZ_HOUR} per endpoint per AZ-hour "
        f"({_money(ENDPOINT_AZ_HOUR * HOURS)} a month), plus $0.01 per GB",
        _endpoints,
    ),
    Line(
        "NAT gateways",
        f"${NAT_HOUR} an hour ({_money(NAT_HOUR * HOURS)} a month), plus $0.045 per GB",
        _nat,
    ),
    Line(
        "Secrets Manager",
        f"${SECRET_MONTH:.2f} per secret-month",
        lambda m: _plain(m.secrets * SECRET_MONTH),
    ),
    Line(
        "KMS",
        f"${KMS_KEY_MONTH:.2f} per customer managed key-month (the alarm topics' key)",
        lambda m: _plain(m.kms_keys * KMS_KEY_MONTH),
    ),
    Line(
        "Lambda",
        f"${LAMBDA_GB_SECOND:.10f} per GB-second (arm64), ${LAMBDA_MILLION_REQUESTS:.2f} per "
        f"million requests: {LAMBDA_GB_SECONDS:,} GB-s and {LAMBDA_REQUESTS:,} ticks a month",
        lambda m: _plain(
            LAMBDA_GB_SECONDS * LAMBDA_GB_SECOND + LAMBDA_REQUESTS / 1e6 * LAMBDA_MILLION_REQUESTS
        ),
    ),
    Line(
        "CloudWatch",
        f"${ALARM_METRIC_MONTH:.2f} per alarm metric; about {CUSTOM_METRICS} custom metrics {TIMES} "
        f"${CUSTOM_METRIC_MONTH:.2f}; ${DASHBOARD_MONTH:.0f} a dashboard (free within an "
        f"account's first three); logs ${LOGS_GB:.2f} per GB, about {LOG_GB} GB",
        lambda m: _plain(
            m.alarm_metrics * ALARM_METRIC_MONTH
            + CUSTOM_METRICS * CUSTOM_METRIC_MONTH
            + m.dashboards * DASHBOARD_MONTH
            + LOG_GB * LOGS_GB
        ),
    ),
    Line(
        "API Gateway, SQS, EventBridge, X-Ray",
        "$1 per million API requests; the DLQ, the rules, $1 per million events on the bus, "
        "traces within the free 100,000 (the alert topic's own key, with `alert_email`, is $1 "
        "a month more)",
        lambda m: (0.0, "$0.00"),
    ),
)


def render(templates: Mapping[str, Mapping[str, Any]]) -> str:
    """The cost table, one column per profile, in `PROFILE_ORDER`."""
    profiles = [p for p in PROFILE_ORDER if p in templates]
    made_by = {p: made(templates[p]) for p in profiles}
    header = ["item", "price", *(f"`{p}`" for p in profiles)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    totals = dict.fromkeys(profiles, 0.0)
    for line in LINES:
        cells = []
        for p in profiles:
            amount, text = line.cost(made_by[p])
            totals[p] += round(amount, 2)
            cells.append(text)
        lines.append("| " + " | ".join([line.item, line.price, *cells]) + " |")
    lines.append(
        "| **total** | | " + " | ".join(f"**{_money(totals[p])}**" for p in profiles) + " |"
    )
    return "\n".join(lines)


def in_page(page: str) -> str:
    """The table between the page's markers."""
    start = page.index(BEGIN) + len(BEGIN)
    return page[start : page.index(END, start)].strip("\n")


def synthesize_profiles() -> dict[str, dict[str, Any]]:
    """Each profile's template, synthesized offline (the code asset's shape, not its build)."""
    from cronledger_infra.application import build_app
    from cronledger_infra.bundling import source_only_code
    from cronledger_infra.props import DEFAULT_NAME
    from cronledger_infra.stack import PROJECT_ROOT

    templates = {}
    for profile in PROFILE_ORDER:
        outdir = Path(tempfile.mkdtemp(prefix=f"cost-{profile}-"))
        app = build_app(
            {"cronledger:profile": profile, "cronledger:alarm_email": "cost@example.com"},
            outdir=str(outdir),
            code=source_only_code(PROJECT_ROOT),
        )
        app.synth()
        templates[profile] = json.loads((outdir / f"{DEFAULT_NAME}.template.json").read_text())
    return templates


def main(argv: list[str] | None = None) -> int:
    from cronledger_infra.stack import PROJECT_ROOT

    parser = argparse.ArgumentParser(description=f"Recompute the cost table of {COST_PAGE}.")
    parser.add_argument("--write", action="store_true", help="put it in the page")
    parser.add_argument("--check", action="store_true", help="fail if the page's differs")
    args = parser.parse_args(argv)
    table = render(synthesize_profiles())
    path = PROJECT_ROOT / COST_PAGE
    page = path.read_text()
    if args.write:
        path.write_text(page.replace(in_page(page), table))
    elif args.check and in_page(page) != table:
        print(f"{COST_PAGE}'s cost table is stale: run python -m cronledger_infra.cost --write")
        return 1
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
