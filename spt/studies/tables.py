"""Study tables: our mean results beside the paper's numbers (spt.paper), one row pair per arm."""
from __future__ import annotations

from typing import Optional

import numpy as np
import xarray as xr


def _metric(ds: xr.Dataset, metric: Optional[str]) -> str:
    if metric:
        return metric
    for m in ("test_accuracy", "test_r2"):
        if m in ds:
            return m
    raise KeyError(f"no test_accuracy / test_r2 in the results (variables: {list(ds.data_vars)})")


def compare_table(ds: xr.Dataset, rows, paper: dict, *, metric: Optional[str] = None,
                  columns_dim: str = "task", scale: Optional[float] = None):
    """A DataFrame: for each (label, selection, paper_row) in `rows`, our mean over seeds of
    `metric` at `selection` per `columns_dim` value, and the paper's row under it.

    rows  : [(label, {dim: value, ...}, paper row name or None), ...]
    scale : multiply ours (default: 100 for accuracies, 1 for R²). Columns: the union of our
            tasks and the paper's; "n seeds" gives how many seeds our mean is over.
    """
    import pandas as pd

    metric = _metric(ds, metric)
    scale = scale if scale is not None else (100.0 if "accuracy" in metric else 1.0)
    ours_cols = [str(v) for v in ds[columns_dim].values]
    paper_cols = sorted({c for _, _, p in rows if p for c in paper.get(p, {})} - set(ours_cols))
    cols = ours_cols + paper_cols
    out = {}
    for label, sel, prow in rows:
        da = ds[metric].sel(sel) if sel else ds[metric]
        extra = [d for d in da.dims if d not in (columns_dim, "seed")]
        if extra:
            raise ValueError(f"table row {label!r}: dims {extra} left after selecting {sel}; "
                             f"select a value for each")
        mean = (da.mean("seed") if "seed" in da.dims else da) * scale
        n = int(da.notnull().sum("seed").max()) if "seed" in da.dims else 1
        out[f"{label} (ours, {n} seed{'s' if n != 1 else ''})"] = {
            c: float(mean.sel({columns_dim: c})) if c in ours_cols else np.nan for c in cols}
        if prow:
            vals = paper.get(prow, {})
            out[f"{label} (paper)"] = {c: (np.nan if vals.get(c) is None else vals[c])
                                       for c in cols}
    return pd.DataFrame.from_dict(out, orient="index").round(2)


def with_your_models(ds: xr.Dataset, rows, own: str):
    """`rows` for a Dataset that may hold your models beside the preset's own (a "model" dim, from
    ``models=``): the rows without a model select `own`, and each other model gets one row per
    init after them, with no paper row (the paper did not run it)."""
    if "model" not in ds.dims:
        return rows
    out = [(label, sel if "model" in sel else {"model": own, **sel}, prow)
           for label, sel, prow in rows]
    named = {sel["model"] for _, sel, _ in out}
    for m in [str(v) for v in ds.model.values if str(v) not in named]:
        out += [(f"{m} ({i})", {"model": m, "init": str(i)}, None) for i in ds.init.values]
    return out
