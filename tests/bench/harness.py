"""Small timing harness for `make bench`: best-of-N rates and ratios to a baseline.

Machines are shared and noisy, so every figure is the best of several rounds, and every
target is a ratio to a baseline measured in the same run, never an absolute time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    rate: float  # operations per second
    baseline: float  # baseline operations per second
    target_ratio: float | None  # cost ratio (baseline rate / rate) must stay at or below

    @property
    def cost_ratio(self) -> float:
        """How many times the baseline's time per operation this costs."""
        return self.baseline / self.rate

    @property
    def met(self) -> bool | None:
        return None if self.target_ratio is None else self.cost_ratio <= self.target_ratio


def rate(fn: Callable[[int], None], n: int, rounds: int = 7) -> float:
    """Best operations per second of ``fn(n)`` (which does n operations) over ``rounds``."""
    fn(max(1, n // 10))  # warm caches and lazy imports
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - start)
    return n / best


def interleaved(
    subject: Callable[[int], None], baseline: Callable[[int], None], n: int, rounds: int = 9
) -> tuple[float, float]:
    """Best rates of subject and baseline, measured in alternation so drift hits both."""
    subject(max(1, n // 10))
    baseline(max(1, n // 10))
    best_s = best_b = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        subject(n)
        t1 = time.perf_counter()
        baseline(n)
        t2 = time.perf_counter()
        best_s = min(best_s, t1 - t0)
        best_b = min(best_b, t2 - t1)
    return n / best_s, n / best_b


def report(results: list[Result], title: str) -> bool:
    """Print a table of results; True when every target is met."""
    print(f"\n== {title}")
    print(f"{'case':<34} {'ops/s':>12} {'baseline/s':>12} {'cost x':>8} {'target':>8}  ok")
    ok = True
    for r in results:
        target = "-" if r.target_ratio is None else f"<={r.target_ratio:g}"
        flag = {None: "", True: "yes", False: "NO"}[r.met]
        ok = ok and r.met is not False
        print(
            f"{r.name:<34} {r.rate:>12,.0f} {r.baseline:>12,.0f} "
            f"{r.cost_ratio:>8.2f} {target:>8}  {flag}"
        )
    return ok
