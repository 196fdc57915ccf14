"""The range probe's figure (study 14): accuracy against the span a capped model can relate.

    from spt.studies import priors_and_range as m14
    fig_range_curve(m14.range_curve(ds), m14.chance(ds))   # one panel per task: the probe's test
        # accuracy over spans, every seed as a dot, the mean as a line, the uncapped probe and
        # chance as horizontal lines
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from matplotlib.figure import Figure

from ..analysis.range_probe import UNCAPPED


def fig_range_curve(curve, chance: Mapping[str, float]) -> Figure:
    """curve: the probe's test accuracy (%) over (task, span, seed), span UNCAPPED for the uncapped
    probe (study 14's ``range_curve(ds)``); chance: {task: chance accuracy (%)}, a dotted line.
    The x axis is symlog, so span 0 (no context) shows."""
    tasks = [str(t) for t in curve.task.values]
    fig = Figure(figsize=(4.2 * len(tasks), 3.4), layout="constrained")
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks):
        c = curve.sel(task=task).dropna("span", how="all")
        spans = [int(k) for k in c.span.values if int(k) != UNCAPPED]
        capped = c.sel(span=spans)
        for s in capped.seed.values:
            ax.plot(spans, capped.sel(seed=s).values, "o", color="0.6", ms=3)
        ax.plot(spans, capped.mean("seed").values, "-o", color="C0", label="capped probe (mean)")
        if UNCAPPED in c.span.values:
            ax.axhline(float(c.sel(span=UNCAPPED).mean("seed")), color="C1", ls="--",
                       label="uncapped")
        ax.axhline(chance[task], color="0.3", ls=":", label="chance")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xticks(spans, [str(k) for k in spans])
        ax.set(title=task, xlabel="span (the longest distance it can relate)",
               ylabel="test accuracy (%)")
        ax.set_ylim(0, max(100.0, float(np.nanmax(c.values)) + 2))
    axes[0].legend(fontsize=8)
    return fig
