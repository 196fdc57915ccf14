"""The explorer notebook in a real JupyterLab + headless Chromium: it runs, its widgets render, and
moving the layer slider redraws the kernel plot (pixel diff of the figure canvas).

    SPT_BROWSER_TESTS=1 pytest -m browser tests/browser -s
Screenshots go to $SPT_BROWSER_ARTIFACTS (default: the pytest tmp dir); the path is printed.
"""
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = Path(os.environ.get("SPT_CHROMIUM", "/usr/bin/chromium"))
ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "11_explorers.ipynb"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(url: str, proc, log: Path, what: str) -> None:
    """Poll `url` until the server `proc` answers (60 s at most); its log if it exits first."""
    for _ in range(120):
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited: {log.read_text()}") from None
            time.sleep(0.5)
    raise RuntimeError(f"{what} did not start in 60 s")


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 (random port and token) serving a temp copy of the notebook."""
    work = tmp_path / "lab"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no "get notified about Jupyter news?" toast over the figure
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "MPLBACKEND": "module://ipympl.backend_nbagg"}
    log = open(tmp_path / "jupyter.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={work}", f"--LabApp.workspaces_dir={tmp_path / 'ws'}",
         f"--LabApp.user_settings_dir={tmp_path / 'settings'}",
         "--ServerApp.port_retries=0"] + (["--allow-root"] if os.geteuid() == 0 else []),
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(f"{url}/api/status?token={token}", proc, tmp_path / "jupyter.log",
                           "jupyter lab")
        yield url, token
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _pixels(path: Path) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.int16)


def test_explorer_notebook_in_headless_chromium(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    url, token = lab
    shots = Path(os.environ.get("SPT_BROWSER_ARTIFACTS", tmp_path / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    print(f"\nbrowser test screenshots: {shots}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{url}/lab/tree/{NOTEBOOK.name}?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            page.wait_for_timeout(3000)  # let the kernel start; Run All queues until it is ready
            page.click(".lm-MenuBar-item:has-text('Run')")
            page.click(".lm-Menu-item:has-text('Run All Cells')")
            # three ipympl figures: the widgets rendered, the kernel drew them
            page.wait_for_function(
                "document.querySelectorAll('.jupyter-matplotlib-figure').length >= 3",
                timeout=180_000)
            page.wait_for_function(
                "![...document.querySelectorAll('.jp-InputPrompt')].some(e => e.textContent.includes('*'))",
                timeout=180_000)
            page.wait_for_timeout(2000)
            figure = page.locator(".jupyter-matplotlib-canvas-div").first
            figure.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "page_before.png"), full_page=False)
            figure.screenshot(path=str(shots / "kernels_before.png"))
            slider = page.locator(".widget-slider:has-text('layer')").first
            handle = slider.locator(".noUi-handle").first
            track = slider.locator(".noUi-base, .noUi-target").first.bounding_box()
            h = handle.bounding_box()
            page.mouse.move(h["x"] + h["width"] / 2, h["y"] + h["height"] / 2)
            page.mouse.down()
            page.mouse.move(track["x"] + track["width"] - 1, h["y"] + h["height"] / 2, steps=10)
            page.mouse.up()
            value = slider.locator(".widget-readout").first
            page.wait_for_function("e => e.textContent.trim() !== '0'", arg=value.element_handle(),
                                   timeout=30_000)
            layer = value.inner_text().strip()
            page.wait_for_timeout(3000)  # the kernel redraws, ipympl sends the new image
            figure.screenshot(path=str(shots / "kernels_after.png"))
            page.screenshot(path=str(shots / "page_after.png"), full_page=False)
            text = page.inner_text("body")
        finally:
            browser.close()
    assert "Error displaying widget" not in text, "a widget failed to render in JupyterLab"
    assert "Traceback" not in text, "a notebook cell raised"
    before, after = _pixels(shots / "kernels_before.png"), _pixels(shots / "kernels_after.png")
    assert before.shape == after.shape
    changed = (np.abs(before - after).sum(-1) > 30).mean()
    print(f"slider moved to layer {layer}; "
          f"{changed:.1%} of the figure's pixels changed")
    assert changed > 0.005, f"moving the layer slider did not change the plot ({changed:.3%} pixels)"
