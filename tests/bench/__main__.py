"""`make bench`: run every benchmark module and print its figures.

Usage: ``python -m tests.bench [name ...]`` (names: the modules below, without bench_).
Exit status 1 when a benchmark missed its target, so a regression is visible.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import tests.bench


def main(argv: list[str]) -> int:
    names = sorted(
        m.name.removeprefix("bench_")
        for m in pkgutil.iter_modules(tests.bench.__path__)
        if m.name.startswith("bench_")
    )
    chosen = argv or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names)}")
        return 2
    ok = True
    for name in chosen:
        module = importlib.import_module(f"tests.bench.bench_{name}")
        ok = module.main() and ok
    print("\nall targets met" if ok else "\nsome targets missed (see NO above)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
