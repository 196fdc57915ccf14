"""The paper's studies: one module per notebook under notebooks/, each with `smoke` and `paper`
presets, a `run(preset, out_dir, ...)` that writes one result file per cell (skipping finished
ones), and a `table(ds)` that prints our numbers beside the paper's.

    from spt.studies import data_scales
    ds = data_scales.run("smoke", "results")      # xarray Dataset over the study's grid
    data_scales.table(ds)

`spt study list | run | batch` (spt.studies.cli) runs the notebooks with papermill;
`spt study check` (:func:`check`) dry-runs every cell of a preset at its real shapes and estimates
its cost; `spt study plan` (:func:`plan`) sizes every stage before anything trains.
"""
from . import (
               compute_tied,
               data_scales,
               explicit_priors,
               kernel_decay,
               lra_transformers,
               modalities,
               model_scales,
               quickstart,
               text_corpus,
               transformers_vs_s4,
)
from .arms import Arm, TaskRef, run_arm
from .cells import Cell, load_study, run_cells
from .check import check
from .plan import plan

# The paper's study modules by the name of their notebook (notebooks/<name>.ipynb). The quickstart
# (study 00, :mod:`spt.studies.quickstart`) runs through the same runner but has no paper preset.
STUDIES = {m.STUDY: m for m in (lra_transformers, transformers_vs_s4, explicit_priors, data_scales,
                                text_corpus, kernel_decay, modalities, compute_tied, model_scales)}

__all__ = ["Arm", "Cell", "STUDIES", "TaskRef", "check", "load_study", "plan", "quickstart", "run_arm",
           "run_cells"]
