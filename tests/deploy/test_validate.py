"""`make validate`'s checks, run by `make test` as well: one test per check."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import validate


@pytest.mark.parametrize("name", list(validate.CHECKS))
def test_check(name: str) -> None:
    assert validate.CHECKS[name]()


def test_a_failing_tool_fails_its_check() -> None:
    with pytest.raises(validate.CheckFailed, match="exited 1"):
        validate.run("false")


def test_hadolint_finds_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN cd /tmp && apt-get install curl\n")
    with pytest.raises(validate.CheckFailed, match="DL"):
        validate.run(validate.tool("hadolint"), str(bad))
