"""`make docs` in the suite: the site builds offline with warnings as errors, and every page of
the navigation is in it."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.docs.examples import ROOT


def _pages(nav: list) -> list[str]:
    found = []
    for entry in nav:
        value = entry if isinstance(entry, str) else next(iter(entry.values()))
        found += _pages(value) if isinstance(value, list) else [value]
    return found


def test_the_site_builds_with_every_page_of_its_navigation(built_site: Path):
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.Loader)

    for page in _pages(config["nav"]):
        built = built_site / page.removesuffix(".md").removesuffix("index") / "index.html"
        assert built.is_file(), page


def test_the_diagrams_are_left_for_the_browser_to_draw(built_site: Path):
    page = (built_site / "concepts" / "occurrence-life" / "index.html").read_text()

    assert page.count('class="mermaid"') == 2
    assert "stateDiagram-v2" in page
