"""Headless Chromium for the dashboard's tests: Debian's ``chromium``, driven by
Playwright (never a downloaded browser), and where the screenshots go."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Chromium's flags for a shared, busy test machine without a display or a sandbox.
ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-proxy-server",
    "--disable-background-networking",
)
VIEWPORT = {"width": 1280, "height": 800}


def chromium() -> str:
    """The path of Debian's chromium; the test fails with how to get it otherwise."""
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(
            "the dashboard tests need headless Chromium: install the Debian package "
            "`chromium` (apt-get install chromium)"
        )
    return path


def screenshot_dir() -> Path:
    """Where the dashboard's screenshots go: ``ZBUS_SCREENSHOTS`` (relative to the
    checkout, e.g. docs/images to regenerate the docs' pictures), else the gitignored
    ``.artifacts/dashboard``."""
    where = Path(os.environ.get("ZBUS_SCREENSHOTS", ".artifacts/dashboard"))
    where = where if where.is_absolute() else ROOT / where
    where.mkdir(parents=True, exist_ok=True)
    return where
