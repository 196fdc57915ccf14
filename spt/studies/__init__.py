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

Layout, one floor each (tests/test_structure.py keeps the arrows pointing down):
- ``spt/studies/machinery/``: what every study is made of (study, job, arms, stages, cells and
  their workers and claims, fidelity, departures, tables, the laptop and smoke sizes, ...); it
  imports no study;
- ``spt/studies/<study>.py``: one module per notebook, its presets and table; it imports the
  machinery and ``spt.paper``, never another study;
- :mod:`spt.studies.registry`: every study by name;
- ``spt/studies/commands/``: what takes a study by name (the notebook runner and batches, SLURM,
  parameters, plan, check, tune); it finds studies in the registry;
- on top: :mod:`spt.studies.cli` (with :mod:`spt.studies.cli_parsers`),
  :mod:`spt.studies.laptop_results` and this package.
"""
from .commands.check import check
from .commands.parameters import check_namespace
from .commands.plan import plan
from .machinery.arms import Arm, TaskRef, run_arm
from .machinery.cells import Cell, load_study, run_cells
from .machinery.study import Study
from .registry import QUICKSTART, STUDIES, study

__all__ = ["Arm", "Cell", "QUICKSTART", "STUDIES", "Study", "TaskRef", "check", "check_namespace",
           "load_study", "plan", "run_arm", "run_cells", "study"]
