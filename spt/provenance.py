"""Which code made a file: spt's version and git commit, torch, the device, the host and the date.

Every result file (:func:`spt.results.write_result`, ``attrs["provenance"]``), every checkpoint
(:func:`spt.train.checkpoint.atomic_save`, key ``"provenance"``) and every hub folder (its
config.json's ``"provenance"`` and model card: :mod:`spt.models.hub_mixin`; an exported checkpoint's
own under ``"training"``) records :func:`current_provenance`.
It is information about a file, never part of what a result *is*: a study cell is known by its
configuration alone, so a cell made by another spt version is still that cell.

The commit is read from the git checkout spt is imported from (``-dirty`` when tracked files have
uncommitted changes); an installed wheel carries the commit it was built from in ``spt/COMMIT``
(written by the build: hatch_build.py); otherwise it is None.
"""
from __future__ import annotations

import datetime
import functools
import platform
import socket
import subprocess
import sys
from pathlib import Path

from . import __version__

PACKAGE = Path(__file__).resolve().parent
COMMIT_FILE = PACKAGE / "COMMIT"  # written into a built wheel only


def checkout() -> Path | None:
    """The git checkout spt is imported from (editable install, PYTHONPATH), or None."""
    root = PACKAGE.parent
    return root if (root / ".git").exists() and (root / "pyproject.toml").is_file() else None


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):  # no git, not a repository, a hung filesystem
        return None
    return out.stdout.strip()


def git_commit(root) -> str | None:
    """HEAD of the git checkout at `root` (40 hex digits), with "-dirty" when tracked files differ
    from it; None when git cannot tell."""
    head = _git(Path(root), "rev-parse", "HEAD")
    if not head:
        return None
    dirty = _git(Path(root), "status", "--porcelain", "--untracked-files=no")
    return head + ("-dirty" if dirty else "")


@functools.lru_cache(maxsize=1)
def commit() -> str | None:
    """The commit of the spt code running here: its checkout's HEAD, else the commit its wheel was
    built from, else None. Read once per process."""
    root = checkout()
    if root is not None:
        return git_commit(root)
    if COMMIT_FILE.is_file():
        return COMMIT_FILE.read_text().strip() or None
    return None


def version_line() -> str:
    """What `spt --version` prints: "spt 0.1.0 (commit 1a2b3c4d5e6f, checkout /path)"."""
    c = commit()
    where = f"checkout {checkout()}" if checkout() else f"installed in {PACKAGE}"
    return f"spt {__version__} (commit {c[:12] + c[40:] if c else 'unknown'}, {where})"


def device() -> str:
    """The accelerator this process has used: "cuda: <GPU name>" once CUDA is initialised, else
    "cpu" (a CPU run on a GPU node says cpu; nothing here starts CUDA)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return f"cuda: {torch.cuda.get_device_name(torch.cuda.current_device())}"
    return "cpu"


@functools.lru_cache(maxsize=1)
def _fixed() -> dict:
    import torch

    # str(): a TorchVersion object in a checkpoint would not load with weights_only=True
    return {"spt": __version__, "commit": commit(), "torch": str(torch.__version__),
            "python": sys.version.split()[0], "platform": platform.platform(),
            "host": socket.gethostname()}


def current_provenance(paths: dict | None = None) -> dict:
    """{spt, commit, torch, python, platform, host, device, threads, date} of this process now
    (date: UTC, ISO 8601 to the second); with `paths`, also the implementation paths each stage
    of the result ran ({stage: {kind: path, "step": path}}, :mod:`spt.train.paths`)."""
    import torch

    out = {**_fixed(), "device": device(), "threads": torch.get_num_threads(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    return out if paths is None else {**out, "paths": paths}


def describe_paths(paths: dict) -> str:
    """{stage: {kind: path}} as one line: "pretrain: fft_conv manual, step eager; finetune: ..."."""
    order = ["pretrain", "finetune", "scratch"]  # as a run goes (stored files sort their keys)
    stages = sorted(paths, key=lambda s: (order.index(s) if s in order else len(order), s))
    return "; ".join(f"{stage}: " + ", ".join(f"{k} {v}" for k, v in paths[stage].items())
                     for stage in stages)


def same_code(a: dict, b: dict) -> bool:
    """Whether two provenance records name the same spt code: the same version, and the same
    commit where both know theirs."""
    if a.get("spt") != b.get("spt"):
        return False
    return not (a.get("commit") and b.get("commit")) or a["commit"] == b["commit"]


def describe(p: dict) -> str:
    """One provenance record as "spt 0.1.0 (commit 1a2b3c4d5e6f)"; "an spt without provenance"
    for a file written before spt recorded it."""
    if not p.get("spt"):
        return "an spt older than provenance records"
    c = p.get("commit")
    return f"spt {p['spt']}" + (f" (commit {c[:12] + c[40:]})" if c else "")
