"""The paper's studies: one :class:`Study` per notebook under notebooks/ (each module's STUDY),
with presets (`smoke`, `laptop`, `paper`), a `run(preset, out_dir, ...)` that writes one result
file per cell (skipping finished ones), a `table(ds)` of our numbers beside the paper's and
`deviations(preset)`: where the preset departs from the paper, and why.

    from spt.studies.data_scales import STUDY as study
    ds = study.run("smoke", "results")      # xarray Dataset over the study's grid
    study.table(ds)

`spt study list | run | batch` (spt.studies.cli) runs the notebooks with papermill;
`spt study check` (:func:`check`) dry-runs every cell of a preset at its real shapes and estimates
its cost; `spt study plan` (:func:`plan`) sizes every stage before anything trains.
"""
from .arms import Arm, TaskRef, run_arm
from .cells import Cell, load_study, run_cells
from .check import check
from .plan import plan
from .registry import QUICKSTART, STUDIES, study
from .study import Study

__all__ = ["Arm", "Cell", "QUICKSTART", "STUDIES", "Study", "TaskRef", "check", "load_study",
           "plan", "run_arm", "run_cells", "study"]
