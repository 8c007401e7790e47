"""Import cost: ``import zbus`` vs ``import zmq, msgpack``, the two libraries it promises.

Each figure is the import time ``python -X importtime`` reports for the statement's
top-level modules, in a fresh interpreter, best of several processes; the two statements
run in alternation so that drift hits both. Every process shares one bytecode cache
(``PYTHONPYCACHEPREFIX``), filled by a first run, so neither side pays for compiling:
an installed zbus has its bytecode, whatever the environment says about writing it.
Target: ``import zbus`` at most 2x ``import zmq, msgpack``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

ROUNDS = 11
TARGET = 2.0
SUBJECT = "import zbus"
BASELINE = "import zmq, msgpack"


def _env(pycache: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=pycache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    return env


def _startup(env: dict[str, str]) -> frozenset[str]:
    """The top-level modules the interpreter imports before running any statement."""
    return frozenset(_top_level(_run("pass", env)))


def _run(statement: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stderr


def _top_level(trace: str) -> dict[str, int]:
    """Cumulative microseconds of each top-level import in an ``-X importtime`` trace."""
    found = {}
    for line in trace.splitlines():
        if not line.startswith("import time:"):
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        if name.startswith(" ") and not name.startswith("  ") and cumulative.strip().isdigit():
            found[name.strip()] = int(cumulative)
    return found


def _seconds(statement: str, env: dict[str, str], startup: frozenset[str]) -> float:
    top = _top_level(_run(statement, env))
    return sum(us for name, us in top.items() if name not in startup) / 1e6


def _modules(statement: str, env: dict[str, str]) -> int:
    """How many modules the statement adds to ``sys.modules``."""
    code = f"import sys\nbefore = len(sys.modules)\n{statement}\nprint(len(sys.modules) - before)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def measure(rounds: int = ROUNDS) -> tuple[float, float, int, int]:
    """(best seconds of SUBJECT, of BASELINE, modules each adds), same run, alternated."""
    with tempfile.TemporaryDirectory(prefix="zbus-bench-pyc-") as pycache:
        env = _env(pycache)
        startup = _startup(env)
        best_s = best_b = float("inf")
        _seconds(SUBJECT, env, startup)  # fill the bytecode cache
        _seconds(BASELINE, env, startup)
        for _ in range(rounds):
            best_s = min(best_s, _seconds(SUBJECT, env, startup))
            best_b = min(best_b, _seconds(BASELINE, env, startup))
        return best_s, best_b, _modules(SUBJECT, env), _modules(BASELINE, env)


def main() -> bool:
    subject, baseline, mods_s, mods_b = measure()
    ratio = subject / baseline
    ok = ratio <= TARGET
    print(f"\n== import cost: `{SUBJECT}` vs `{BASELINE}` (-X importtime, best of {ROUNDS})")
    print(f"{'statement':<24} {'ms':>8} {'modules':>8}")
    print(f"{SUBJECT:<24} {subject * 1e3:>8.1f} {mods_s:>8}")
    print(f"{BASELINE:<24} {baseline * 1e3:>8.1f} {mods_b:>8}")
    print(f"cost x {ratio:.2f}, target <={TARGET:g}  {'yes' if ok else 'NO'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
