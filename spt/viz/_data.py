"""Load result Datasets for figures and explorers, check their layout, reduce extra dims.

Study results are xarray Datasets over dims drawn from ``task, model, init, ssm_init, fraction,
spt_share, seed`` (and ``epoch`` for curves) with metric variables ``test_accuracy`` (or
``test_r2``), ``val_accuracy``, ``steps``. Figures ask for the dims they plot; any other dim is
averaged over (after an optional ``select``), so a figure works on a bigger grid than it shows.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import xarray as xr

from ..results import load_results, read_result

INIT_COLORS = {"scratch": "#8c8c8c", "spt": "#1f77b4", "masked": "#1f77b4", "causal": "#ff7f0e"}
INIT_LABELS = {"scratch": "from scratch", "spt": "SPT", "masked": "SPT (masked)",
               "causal": "SPT (causal)"}


def as_dataset(src, what: str = "results") -> xr.Dataset:
    """A Dataset from a Dataset, a .nc file, or a folder of .nc files (combined).

    what : names the argument in error messages (e.g. "fig3_data_scales(results)").
    """
    if isinstance(src, xr.Dataset):
        return src
    if isinstance(src, (str, Path)):
        p = Path(src)
        if p.is_dir():
            return load_results(p)
        if p.exists():
            return read_result(p)
        raise FileNotFoundError(f"{what}: no result file or folder at {p}")
    raise TypeError(f"{what}: expected an xarray Dataset, a .nc path or a folder of .nc files; "
                    f"got {type(src).__name__}")


def metric_of(ds: xr.Dataset, metric: Optional[str], what: str, prefix: str = "test") -> str:
    """The metric variable to plot: `metric`, else <prefix>_accuracy or <prefix>_r2."""
    if metric is not None:
        if metric not in ds.data_vars:
            raise ValueError(f"{what}: no variable {metric!r} in the results; it has "
                             f"{sorted(ds.data_vars)}")
        return metric
    for m in (f"{prefix}_accuracy", f"{prefix}_r2"):
        if m in ds.data_vars:
            return m
    raise ValueError(f"{what}: the results have neither {prefix}_accuracy nor {prefix}_r2 "
                     f"(variables: {sorted(ds.data_vars)}); pass metric=...")


def require_dims(obj, dims: Iterable[str], what: str) -> None:
    """Raise a ValueError naming each dim of `dims` that `obj` lacks."""
    missing = [d for d in dims if d not in obj.dims]
    if missing:
        raise ValueError(f"{what}: the results lack dim(s) {missing} (they have {list(obj.dims)}); "
                         f"this figure plots over {list(dims)}")


def with_default_dims(ds: xr.Dataset, **defaults) -> xr.Dataset:
    """Add size-1 dims that are absent (e.g. task=ds.attrs['task'], model='model')."""
    for dim, value in defaults.items():
        if dim not in ds.dims:
            ds = ds.expand_dims({dim: [value]})
    return ds


def reduce_to(da: xr.DataArray, keep: Iterable[str], select: Optional[dict] = None) -> xr.DataArray:
    """Select `select` ({dim: value}), then average (NaN-aware) over every dim not in `keep`."""
    if select:
        da = da.sel({k: v for k, v in select.items() if k in da.dims})
    keep = list(keep)
    extra = [d for d in da.dims if d not in keep]
    return da.mean(extra, skipna=True) if extra else da


def pct(da: xr.DataArray, metric: str) -> xr.DataArray:
    """Accuracy as a percentage; R^2 unchanged."""
    return da * 100 if metric.endswith("accuracy") else da


def metric_label(metric: str) -> str:
    base = metric.replace("_", " ")
    return f"{base} (%)" if metric.endswith("accuracy") else base


def values(ds: xr.Dataset, dim: str) -> list:
    """Coordinate values of `dim` as plain Python objects (str / int / float)."""
    return [v.item() if isinstance(v, np.generic) else v for v in ds[dim].values]
