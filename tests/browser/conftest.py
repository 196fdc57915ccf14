"""Opt-in real-browser tests: marked `browser`, skipped unless asked for AND possible.

Ask with `--browser` (when tests/conftest.py defines it) or SPT_BROWSER_TESTS=1; they also need
Debian's /usr/bin/chromium and Python playwright. The skip reason says which is missing.
"""
import importlib.util
import os
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("SPT_CHROMIUM", "/usr/bin/chromium"))


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium (opt-in: "
                                       "--browser or SPT_BROWSER_TESTS=1)")


def browser_skip_reason(config) -> str | None:
    try:
        asked = bool(config.getoption("--browser"))
    except ValueError:  # the option is not defined
        asked = False
    asked = asked or os.environ.get("SPT_BROWSER_TESTS", "") not in ("", "0")
    if not asked:
        return "real-browser test: opt in with SPT_BROWSER_TESTS=1 (or --browser)"
    if not CHROMIUM.exists():
        return f"real-browser test: no Chromium at {CHROMIUM} (apt-get install chromium, or set SPT_CHROMIUM)"
    if importlib.util.find_spec("playwright") is None:
        return "real-browser test: Python playwright is not installed (pip install playwright)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = browser_skip_reason(config)
    if reason is None:
        return
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
