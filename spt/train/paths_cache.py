"""Where measured implementation paths are kept: one small JSON file per measurement, keyed by the
device, the library versions and what was measured (:mod:`spt.train.paths`).

    <cache>/<sha256 of the key>.json   = {"key": {...}, "choice": "manual", "trials": [...], ...}

The folder is ``$SPT_PATHS_CACHE``, else ``$XDG_CACHE_HOME/spt/paths`` (``~/.cache/spt/paths``).
Every file is written whole (a temporary file renamed over it), so the concurrent writers a study's
parallel cells and a SLURM array on a shared home are leave a readable cache: two processes that
measure the same key both write a complete file, and the last rename wins. A file that cannot be
read (cut short by hand, another format) is measured again and replaced, never fatal.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Optional

import torch

from .. import __version__
from ..atomic import atomic_write

# the libraries whose kernels a path may call: their versions are part of every key
LIBRARIES = ("triton", "flash-attn", "mamba-ssm", "fla-core")


def cache_dir() -> Path:
    env = os.environ.get("SPT_PATHS_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "spt" / "paths"


@lru_cache(maxsize=None)
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def device_key(device: torch.device) -> dict:
    """What a measurement on `device` depends on besides the model: the device (a GPU's name and
    compute capability; a CPU's model and this process's thread count), spt, torch and the
    libraries' versions."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        name = torch.cuda.get_device_name(index)
        where = {"device": f"cuda: {name}", "capability": list(torch.cuda.get_device_capability(index))}
    else:
        where = {"device": f"{device.type}: {_cpu_model()}", "threads": torch.get_num_threads()}
    return {**where, "spt": __version__, "torch": str(torch.__version__),
            **{lib: _version(lib) for lib in LIBRARIES}}


def entry_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
    return cache_dir() / f"{digest[:24]}.json"


def read(key: dict) -> Optional[dict]:
    """The stored measurement of `key`, or None (none stored, or a file that does not read back as
    one for this key)."""
    path = entry_path(key)
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != json.loads(json.dumps(key, default=str)):
        return None
    return entry


def write(key: dict, entry: dict) -> Optional[Path]:
    """Store `entry` for `key` atomically; None when the folder cannot be written (a read-only
    home: the choice still applies to this run, it is only not kept)."""
    data = json.dumps({**entry, "key": key}, sort_keys=True, default=str, indent=1)
    try:
        return atomic_write(entry_path(key), lambda tmp: tmp.write_text(data))
    except OSError:
        return None
