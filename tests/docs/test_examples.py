"""Every code block of the README and the docs runs as the page says (tests/docs/examples.py):
shell commands against a real `cronledger dev`, channel documents through the API, Python as
written. The tally (run, skipped with each reason, failed) is printed at the end of the run."""

from __future__ import annotations

import pytest

from tests.docs.conftest import TALLY
from tests.docs.examples import blocks, pages, run_all


@pytest.mark.slow
def test_every_runnable_example_in_the_readme_and_the_docs_runs(
    record_property: pytest.RecordProperty,
):
    tally = run_all()
    record_property(TALLY, tally.summary())

    assert tally.run >= 20
    assert not tally.failed, tally.summary()


def test_every_block_the_test_does_not_run_says_why():
    for page in pages():
        for block in blocks(page):
            if block.mark == "skip":
                assert block.why, f"{block.where}: a skipped example names its reason"
