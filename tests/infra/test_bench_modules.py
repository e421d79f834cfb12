"""Every benchmark `make bench` runs still imports: a bench is code no other test runs, so a
rename in the product would otherwise break it unseen until the next measurement."""

import importlib
import pkgutil

import pytest

import tests.bench


@pytest.mark.parametrize(
    "name",
    sorted(m.name for m in pkgutil.iter_modules(tests.bench.__path__) if m.name != "__main__"),
)
def test_a_bench_module_imports(name: str) -> None:
    module = importlib.import_module(f"tests.bench.{name}")
    assert module.__name__ == f"tests.bench.{name}"
