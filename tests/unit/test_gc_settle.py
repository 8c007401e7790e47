"""A started service settles the garbage collector: what start-up made is frozen, and
generation 0 is collected every GC_GENERATION0 allocations instead of 700."""

from __future__ import annotations

import json
import subprocess
import sys

from zbus.runtime.service import GC_GENERATION0


def test_settling_freezes_start_up_objects_and_raises_the_threshold() -> None:
    # A process of its own: the test runner's collector stays as it is.
    code = (
        "import gc, json; from zbus.runtime.service import settle_garbage_collector; "
        "before = gc.get_threshold(); settle_garbage_collector(); "
        "print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    before, after, frozen = json.loads(out.stdout)
    assert after == [GC_GENERATION0, before[1], before[2]]
    assert frozen > 10_000  # the modules zbus.runtime.service loads, at least
