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
if "SPT_PATHS_CACHE" not in os.environ:  # measured implementation paths: never the user's cache
    import tempfile
    os.environ["SPT_PATHS_CACHE"] = tempfile.mkdtemp(prefix="spt-paths-")

import pytest  # noqa: E402
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs the suite in one pytest-xdist worker per core: one torch thread each (and
    # for the processes a test starts), so that two workers do not fight over two cores
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(min(2, torch.get_num_threads()))


def pytest_configure(config):
    # pytest 9.2 drops the group suffix pytest-xdist 3.8 gives a test's id, and loadgroup then runs
    # grouped tests side by side (pytest-dev/pytest-xdist#1386)
    if config.getoption("dist", "no") == "loadgroup" and pytest.version_tuple[:2] >= (9, 2):
        import xdist
        if tuple(int(x) for x in xdist.__version__.split(".")[:3]) <= (3, 8, 0):
            raise pytest.UsageError(
                f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__} ignores "
                f"--dist loadgroup (pytest-dev/pytest-xdist#1386): the serial tests would run side "
                f"by side; install pyproject.toml's dev extra (pytest<9.2)")


def pytest_addoption(parser):
    parser.addoption("--browser", action="store_true",
                     help="run the real-browser tests (needs /usr/bin/chromium + playwright)")


def pytest_itemcollected(item):
    # the tests that use the machine beyond one core (they start processes or workers of their
    # own, send signals, open ports or time themselves) form one xdist group: one worker runs them
    # one after another, never two at once (``--dist loadgroup``, what `make test` passes). Marked
    # as each test is collected: pytest-xdist reads the groups in its collection_modifyitems.
    if item.get_closest_marker("serial") is not None:
        item.add_marker(pytest.mark.xdist_group("serial"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if getattr(config.option, "loadgroup", False):  # an xdist worker of --dist loadgroup:
        # did the group take?
        ungrouped = [i.nodeid for i in items if i.get_closest_marker("xdist_group") is not None
                     and "@" not in i.nodeid.rsplit("]", 1)[-1]]
        if ungrouped:  # stops the run (pytest-xdist shows it as an internal error)
            raise pytest.UsageError(f"pytest-xdist did not group {ungrouped[0]}: the serial "
                                    f"tests would run side by side")
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
