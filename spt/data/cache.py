"""A versioned on-disk cache of the arrays the task readers decode from the official files.

Readers parse the official files once and store the decoded arrays next to the data, in
``<data dir>/.spt_cache/<name>/``: one ``.npy`` (or raw ``.bin`` for ragged token streams) per array
plus ``meta.json`` holding the reader's format ``version`` and a fingerprint (relative path, size,
mtime) of the source files (for very many files, such as PathX's images, one digest of those). A
cache whose version or fingerprint differs is rebuilt. A cache is built in a temporary folder and
renamed into place (:func:`spt.atomic.atomic_dir`), so an interrupted build is never read back.
Arrays are memory-mapped on load, so a 10 GB PathX-256 cache costs no RAM until items are read;
:mod:`spt.data.datasets` serves them as Datasets.

A data folder this process cannot write to (a shared, read-only copy of the release) keeps its
caches in one folder outside it, ``$SPT_CACHE_DIR/<folder name>-<hash of its absolute path>/``
(default ``~/.cache/spt/...``, :func:`outside_cache_dir`), reused by every later load; a warning
says where, once per process.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from ..atomic import atomic_dir
from .errors import DataError

CACHE_DIRNAME = ".spt_cache"


def stat_digest(paths: Iterable[Path], root: Path) -> dict:
    """{"files": n, "sha256": hex} over (relative path, size, mtime_ns) of each of `paths`.

    What a cache was built from when the files are too many to list in meta.json (PathX's 600K+
    images): reading the stat of each is cheap where hashing its bytes is not, and a file that is
    replaced, truncated or rewritten changes its size or mtime. A missing file counts with size
    and mtime -1, so the cache is rebuilt and the build reports the file.
    """
    digest, n = hashlib.sha256(), 0
    prefix = os.path.join(str(root), "")
    for path in sorted(map(str, paths)):  # strings, not Paths: ~3x faster over 600K files
        try:
            st = os.stat(path)
            size, mtime = st.st_size, st.st_mtime_ns
        except FileNotFoundError:
            size = mtime = -1
        rel = path[len(prefix):] if path.startswith(prefix) else path
        digest.update(f"{rel}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
        n += 1
    return {"files": n, "sha256": digest.hexdigest()}


def fingerprint(paths: Iterable[Path], root: Path) -> list:
    """[[relative path, size, mtime_ns], ...] of `paths` (sorted): what a cache was built from."""
    out = []
    for p in sorted(Path(p) for p in paths):
        st = p.stat()
        out.append([str(p.relative_to(root)) if p.is_relative_to(root) else str(p),
                    st.st_size, st.st_mtime_ns])
    return out


class CacheWriter:
    """Handed to a cache's build function: creates the arrays of one cache entry.

    array(name, shape, dtype) -> a writable np.memmap to fill in place (for large fixed shapes).
    put(name, array)          -> store a finished array.
    ragged(name, dtype)       -> an appender: .append(1-D array) per sequence (flat + offsets).
    """

    def __init__(self, folder: Path):
        self.folder = folder
        self.layout: dict = {}
        self._open: list = []

    def array(self, name: str, shape: Sequence[int], dtype) -> np.ndarray:
        arr = np.lib.format.open_memmap(self.folder / f"{name}.npy", mode="w+", dtype=dtype,
                                        shape=tuple(shape))
        self.layout[name] = {"kind": "npy"}
        self._open.append(arr)
        return arr

    def put(self, name: str, array) -> None:
        np.save(self.folder / f"{name}.npy", np.asarray(array), allow_pickle=False)
        self.layout[name] = {"kind": "npy"}

    def ragged(self, name: str, dtype) -> "_RaggedAppender":
        app = _RaggedAppender(self.folder, name, np.dtype(dtype))
        self._open.append(app)
        return app

    def close(self) -> None:
        for obj in self._open:
            if isinstance(obj, _RaggedAppender):
                obj.close()
                self.layout[obj.name] = {"kind": "ragged", "dtype": obj.dtype.str,
                                         "length": int(obj.offsets[-1])}
            else:
                obj.flush()
        self._open = []


class _RaggedAppender:
    def __init__(self, folder: Path, name: str, dtype: np.dtype):
        self.name, self.dtype, self.folder = name, dtype, folder
        self.file = open(folder / f"{name}.bin", "wb")
        self.offsets = [0]

    def append(self, seq) -> None:
        arr = np.asarray(seq, dtype=self.dtype)
        self.file.write(arr.tobytes())
        self.offsets.append(self.offsets[-1] + arr.shape[0])

    def close(self) -> None:
        self.file.close()
        np.save(self.folder / f"{self.name}.offsets.npy", np.asarray(self.offsets, np.int64))


def _load_entry(folder: Path, meta: dict) -> dict:
    arrays = {}
    for name, info in meta["layout"].items():
        if info["kind"] == "npy":
            arrays[name] = np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
        else:
            n, dtype = info["length"], np.dtype(info["dtype"])
            flat = (np.memmap(folder / f"{name}.bin", dtype=dtype, mode="r", shape=(n,))
                    if n else np.zeros(0, dtype))
            arrays[name] = flat
            arrays[f"{name}.offsets"] = np.load(folder / f"{name}.offsets.npy", allow_pickle=False)
    return arrays


def cache_home() -> Path:
    """Where the caches of read-only data folders go: ``$SPT_CACHE_DIR`` if set, else
    ``$XDG_CACHE_HOME/spt``, else ``~/.cache/spt``."""
    if os.environ.get("SPT_CACHE_DIR"):
        return Path(os.environ["SPT_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "spt"


def outside_cache_dir(data_dir: Path) -> Path:
    """The cache folder of a data folder that is not writable: ``cache_home()/<name>-<hash>``, the
    hash of the folder's absolute path, so every load of that folder finds the same place."""
    resolved = Path(data_dir).resolve()
    key = hashlib.sha256(str(resolved).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return cache_home() / f"{resolved.name}-{key}"


def _writable(folder: Path) -> bool:
    """Whether this process may create entries in `folder` (or, if absent, create it)."""
    folder = Path(folder)
    return os.access(folder if folder.exists() else folder.parent, os.W_OK | os.X_OK)


_ANNOUNCED: set = set()  # outside cache folders already named in this process


def _cache_dir(data_dir: Path) -> Path:
    """The folder to build caches of `data_dir` in: its own ``.spt_cache`` if writable, else
    :func:`outside_cache_dir` (said once per process). Raises DataError if neither is."""
    inside = data_dir / CACHE_DIRNAME
    if _writable(inside):
        try:
            inside.mkdir(exist_ok=True)
            return inside
        except OSError:
            pass
    outside = outside_cache_dir(data_dir)
    try:
        outside.mkdir(parents=True, exist_ok=True)
        problem = None if _writable(outside) else "permission denied"
    except OSError as e:
        problem = e.strerror or str(e)
    if problem:
        raise DataError(f"cannot cache the arrays decoded from {data_dir}: it is not writable and "
                        f"neither is {outside} ({problem}); set SPT_CACHE_DIR to a writable "
                        f"folder")
    if outside not in _ANNOUNCED:
        _ANNOUNCED.add(outside)
        warnings.warn(f"{data_dir} is not writable: caching its decoded arrays in {outside} "
                      f"(set SPT_CACHE_DIR to choose the place)", stacklevel=3)
    return outside


def _fresh_meta(entry: Path, version: int, fp: list, bulk: Optional[dict]) -> Optional[dict]:
    """The meta.json of the cache entry `entry` if it was built by `version` from these sources."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    ok = (isinstance(meta, dict) and meta.get("version") == version
          and meta.get("fingerprint") == fp and meta.get("many_sources") == bulk)
    return meta if ok else None


def cached_arrays(data_dir: Path, name: str, version: int, sources: Iterable[Path],
                  build: Callable[[CacheWriter], Optional[dict]],
                  many_sources: Optional[Iterable[Path]] = None) -> tuple[dict, dict]:
    """Arrays decoded by `build`, cached in ``data_dir/.spt_cache/name``; rebuilt when stale.

    data_dir : the folder holding the source files (the cache goes inside it).
    name     : entry name; include every reader option that changes the arrays (e.g. seq_len).
    version  : the reader's format version; bump it when the decoding changes.
    sources  : the files the arrays are decoded from (their size / mtime decide staleness).
    build    : fills a :class:`CacheWriter`; returns a JSON-able dict of extra facts (stats, notes).
    many_sources : more source files, too many to list one by one (e.g. every image of PathX):
               summarised by :func:`stat_digest`, which decides staleness as well.
    returns  : (arrays: name -> np.ndarray (memory-mapped, read-only), extra dict). A ragged array
               ``x`` comes as ``arrays["x"]`` (flat) and ``arrays["x.offsets"]`` (N+1,).
    A data folder that is not writable keeps its cache in :func:`outside_cache_dir` (one folder
    per data folder, reused by every load; a fresh cache inside the data folder wins).
    """
    data_dir = Path(data_dir)
    fp = fingerprint(sources, data_dir)
    bulk = None if many_sources is None else stat_digest(many_sources, data_dir)
    inside = data_dir / CACHE_DIRNAME / name
    meta = _fresh_meta(inside, version, fp, bulk)
    if meta is not None:
        return _load_entry(inside, meta), meta.get("extra") or {}
    final = _cache_dir(data_dir) / name
    meta = _fresh_meta(final, version, fp, bulk) if final != inside else None
    if meta is not None:
        return _load_entry(final, meta), meta.get("extra") or {}

    meta = {}

    def fill(folder: Path) -> None:
        writer = CacheWriter(folder)
        extra = build(writer) or {}
        writer.close()
        meta.update(version=version, fingerprint=fp, many_sources=bulk, layout=writer.layout,
                    extra=extra)
        (folder / "meta.json").write_text(json.dumps(meta))

    folder = atomic_dir(final, fill)
    return _load_entry(folder, meta), meta["extra"]
