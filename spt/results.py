"""Result files: one xarray Dataset per run, written as netCDF (h5netcdf engine), combined on load.

Conventions: dims name what was varied (``init``, ``seed``, ``task``, ``fraction`` ...), data
variables hold metrics, and the run's configuration is a JSON string in ``attrs["config"]`` (netCDF
attributes must be flat). Files are written atomically (temp file + rename) and never overwritten
unless asked.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import xarray as xr

ENGINE = "h5netcdf"


def write_result(ds: xr.Dataset, path, *, config: dict | None = None,
                 overwrite: bool = False) -> Path:
    """Write `ds` to `path` (.nc) atomically; `config` (a JSON-able dict) goes to attrs["config"]."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True or choose another path")
    ds = ds.copy()
    if config is not None:
        ds.attrs["config"] = json.dumps(config, sort_keys=True, default=str)
    for k, v in list(ds.attrs.items()):
        if isinstance(v, (dict, list, tuple)) or v is None:
            ds.attrs[k] = json.dumps(v, default=str)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        ds.to_netcdf(tmp, engine=ENGINE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_result(path) -> xr.Dataset:
    """Load one result file fully into memory (the file is closed afterwards)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no result file at {path}")
    with xr.open_dataset(path, engine=ENGINE) as ds:
        return ds.load()


def run_config(ds: xr.Dataset) -> dict:
    """The configuration a result file was written with (attrs["config"] parsed)."""
    return json.loads(ds.attrs.get("config", "{}"))


def combine_results(parts, dims=None) -> xr.Dataset:
    """Combine result Datasets along their grid dims (outer join).

    dims : the dims that tell runs apart (e.g. task, init, seed). Default: the "coords" each study
           file stores in its config, if any. Every other dim (epoch, lag ...) is first aligned to
           the union of its values, NaN-padded, so runs of different lengths combine cleanly.
    """
    parts = list(parts)
    if dims is None:
        dims = set()
        for p in parts:
            dims |= set(run_config(p).get("coords", {}))
    if dims:
        parts = list(xr.align(*parts, join="outer", exclude=set(dims)))
    ds = xr.combine_by_coords(parts, join="outer", compat="no_conflicts", coords="different",
                              combine_attrs="drop_conflicts")
    ds.attrs.pop("config", None)
    return ds


def load_results(folder, pattern: str = "*.nc") -> xr.Dataset:
    """Combine every result file under `folder` (recursively) along their grid dims."""
    files = sorted(Path(folder).rglob(pattern))
    if not files:
        raise FileNotFoundError(f"no result files matching {pattern!r} under {folder}")
    return combine_results(read_result(f) for f in files)


load = load_results
