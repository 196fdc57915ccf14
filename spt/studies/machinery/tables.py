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


def gain_rows(ds: xr.Dataset, comparisons, *, metric: Optional[str] = None,
              columns_dim: str = "task", scale: Optional[float] = None):
    """Rows "gain: <label>" of the paired gain over seeds (:func:`spt.results.paired_gain`): per
    `columns_dim` value, "+18.3 [+10.1, +26.5], 6/6 ahead" (mean, 95% t interval, seeds ahead).

    comparisons : [(label, treated selection, control selection), ...], e.g.
                  ("SPT - scratch", {"init": "spt"}, {"init": "scratch"}).
    """
    import pandas as pd

    from ...results import format_gain, paired_gain

    metric = _metric(ds, metric)
    scale = scale if scale is not None else (100.0 if "accuracy" in metric else 1.0)
    cols = [str(v) for v in ds[columns_dim].values] if columns_dim in ds.dims else ["all"]
    out = {}
    for label, treated, control in comparisons:
        g = paired_gain(ds[metric].sel(treated) * scale, ds[metric].sel(control) * scale)
        extra = [d for d in g["gain"].dims if d != columns_dim]
        if extra:
            raise ValueError(f"gain row {label!r}: dims {extra} left after selecting; select a "
                             f"value for each")
        out[f"gain: {label} (95% CI, seeds ahead)"] = {
            c: format_gain(g.sel({columns_dim: c}) if columns_dim in g.dims else g,
                           digits=1 if "accuracy" in metric else 3)
            for c in cols}
    return pd.DataFrame.from_dict(out, orient="index")


def with_gains(table, gains):
    """`table` (numbers) with the `gains` rows (text) under it, in its columns."""
    import pandas as pd
    gains = gains.reindex(columns=table.columns).astype(object)
    return pd.concat([table.astype(object), gains.where(gains.notna(), "")])


def spt_gains(ds: xr.Dataset, pairs, *, compare_dim: str = "init", columns_dim: str = "task",
              metric: Optional[str] = None):
    """gain_rows for each (label, treated, control) value pair of `compare_dim`, once per
    combination of the metric's other grid dims (model, ssm_init ...; seeds pair the runs)."""
    import itertools

    metric = _metric(ds, metric)
    groups = [d for d in ds[metric].dims if d not in (compare_dim, columns_dim, "seed")]
    have = {str(v) for v in ds[compare_dim].values}
    comps = []
    for values in itertools.product(*[[str(v) if not isinstance(v, float) else v
                                       for v in ds[d].values] for d in groups]):
        sel = dict(zip(groups, values))
        prefix = " ".join(f"{v}" for v in values)
        for label, a, b in pairs:
            if a in have and b in have:
                comps.append((f"{prefix}: {label}" if prefix else label,
                              {**sel, compare_dim: a}, {**sel, compare_dim: b}))
    return gain_rows(ds, comps, metric=metric, columns_dim=columns_dim)


def mean_rows(ds: xr.Dataset, rows: dict, columns: dict, metric: str = "test_accuracy",
              scale: float = 100.0) -> dict:
    """{row label: {column label: mean over seeds of metric * scale}} where each row and column
    label maps to a selection ({dim: value}) and a cell is their joint selection."""
    mean = ds[metric].mean("seed") * scale
    return {r: {c: float(mean.sel({**rsel, **csel})) for c, csel in columns.items()}
            for r, rsel in rows.items()}
