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


def load_results(folder, pattern: str = "*.nc") -> xr.Dataset:
    """Combine every result file under `folder` along their shared dims (outer join)."""
    files = sorted(Path(folder).rglob(pattern))
    if not files:
        raise FileNotFoundError(f"no result files matching {pattern!r} under {folder}")
    parts = [read_result(f) for f in files]
    return xr.combine_by_coords(parts, join="outer", combine_attrs="drop_conflicts")
