"""The paper's studies: one module per notebook under notebooks/, each with `smoke` and `paper`
presets, a `run(preset, out_dir, ...)` that writes one result file per cell (skipping finished
ones), and a `table(ds)` that prints our numbers beside the paper's.

    from spt.studies import data_scales
    ds = data_scales.run("smoke", "results")      # xarray Dataset over the study's grid
    data_scales.table(ds)

`spt study list | run | batch` (spt.studies.cli) runs the notebooks with papermill.
"""
from .arms import Arm, TaskRef, run_arm
from .cells import Cell, load_study, run_cells

__all__ = ["Arm", "Cell", "TaskRef", "load_study", "run_arm", "run_cells"]
