"""Run every benchmark module (`python -m tests.bench [name-filter ...]`).

Each `bench_*.py` module exposes `main()`, which prints its own figures, and runs in a process
of its own (`python -m tests.bench.<module>`), so no benchmark inherits another's state: its
clients, its containers, its threads. A filter argument keeps only the modules whose name
contains it; the run fails if one of them does.
"""

from __future__ import annotations

import pkgutil
import subprocess
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
    failed = []
    for name in chosen:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        if subprocess.run([sys.executable, "-m", f"tests.bench.{name}"], check=False).returncode:
            failed.append(name)
        print(f"   ({time.perf_counter() - started:.1f} s)", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
