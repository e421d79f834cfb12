"""Run every benchmark module (`python -m tests.bench [name-filter ...]`).

Each `bench_*.py` module exposes `main()`, which prints its own figures. A filter argument
keeps only the modules whose name contains it.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import tests.bench as package


def main(argv: list[str]) -> int:
    names = sorted(
        m.name for m in pkgutil.iter_modules(package.__path__) if m.name.startswith("bench_")
    )
    chosen = [n for n in names if not argv or any(f in n for f in argv)]
    if not chosen:
        print(f"no benchmark matches {argv}; have: {', '.join(names)}", file=sys.stderr)
        return 2
    for name in chosen:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"tests.bench.{name}").main()
        print(f"   ({time.perf_counter() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
