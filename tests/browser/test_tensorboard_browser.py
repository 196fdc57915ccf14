"""A study's live curves in a real TensorBoard + headless Chromium: every run of the study is listed
by its cell and stage, and the scalar cards draw the loss and validation curves.

    SPT_BROWSER_TESTS=1 pytest -m browser tests/browser/test_tensorboard_browser.py -s
Screenshots go to $SPT_BROWSER_ARTIFACTS (default: the pytest tmp dir); the path is printed.
"""
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from test_explorers_browser import ARGS, CHROMIUM, _free_port, wait_until_serving

pytestmark = pytest.mark.browser
STUDY = "03_explicit_priors"


@pytest.fixture
def board(tmp_path):
    """A smoke run of one study (ListOps cells), and TensorBoard on 127.0.0.1 over its folder."""
    pytest.importorskip("tensorboard")
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "spt.cli", "study", "run", STUDY, "-p", "tasks",
                    "[listops]", "--out", str(out), "--quiet"], check=True, timeout=900)
    port = _free_port()
    log = open(tmp_path / "tensorboard.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir",
                             str(out / STUDY), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(f"{url}/data/runs", proc, tmp_path / "tensorboard.log", "tensorboard")
        yield url, out
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def test_tensorboard_shows_every_cell_of_a_smoke_study(board, tmp_path):
    from playwright.sync_api import sync_playwright

    url, out = board
    runs = urllib.request.urlopen(f"{url}/data/runs").read().decode()
    cells = sorted(p.parent.name for p in (out / STUDY / "runs").glob("*/*/events.out.*"))
    assert len(cells) >= 8 and all(c in runs for c in cells)
    shots = Path(os.environ.get("SPT_BROWSER_ARTIFACTS", tmp_path / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    print(f"\nbrowser test screenshots: {shots}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            page.goto(f"{url}/#timeseries", wait_until="networkidle")
            page.get_by_text("step/loss").first.wait_for(timeout=60_000)
            page.get_by_role("combobox", name="Filter tags (regex)").fill("loss|accuracy")
            for tag in ("step/loss", "train/loss", "val/loss", "val/accuracy"):
                page.get_by_text(tag, exact=True).first.wait_for(timeout=30_000)
            page.keyboard.press("Escape")  # close the tag suggestions over the first cards
            page.wait_for_timeout(3000)  # the charts draw after their data arrive
            page.screenshot(path=str(shots / "tensorboard.png"))
            assert page.locator("canvas, svg").count() > 4  # the cards' charts
        finally:
            browser.close()
