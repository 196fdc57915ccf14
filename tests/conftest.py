"""Test settings: offline, headless; without a GPU Triton kernels run in its interpreter
(float32 only), on a GPU they compile.

TRITON_INTERPRET must be set before triton is imported anywhere, so it is set here at import
(importing torch does not import triton): 1 on a machine without CUDA, 0 with it, unless the
environment already says. The CPU tests of the Triton kernels skip where nothing interprets them.
"""
import os
from pathlib import Path

if "TRITON_INTERPRET" not in os.environ:
    import torch as _torch
    os.environ["TRITON_INTERPRET"] = "0" if _torch.cuda.is_available() else "1"
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


def _child_pid(parent: int, marker: bytes) -> int:
    """The pid of a child process of `parent` whose command line contains `marker` (Linux /proc)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and marker in cmd:
            return int(stat.parent.name)
    raise AssertionError(f"no process with {marker!r} in its command line under pid {parent}")


@pytest.fixture
def child_pid():
    """child_pid(parent, marker): the pid of the child of `parent` whose command line holds
    `marker` (a Jupyter kernel: b"ipykernel"; a submitit task: b"submitit.core._submit")."""
    return _child_pid
