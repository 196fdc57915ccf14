"""Test settings: CPU-only, offline, headless; Triton kernels run in its interpreter (float32 only).

TRITON_INTERPRET must be set before triton is imported anywhere, so it is set here at import.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "agg")
os.environ.setdefault("TQDM_DISABLE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))


def pytest_addoption(parser):
    parser.addoption("--browser", action="store_true",
                     help="run the real-browser tests (needs /usr/bin/chromium + playwright)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
