"""Where spt's paper presets depart from the paper on purpose, and why.

Each :class:`Departure` names a field of :data:`spt.studies.fidelity.FIELDS`, the rows it covers
(study, model, task, stage; "*" = any, or a comma-separated list), OUR value, and the reason. A
preset value that differs from spt/studies/paper_settings.tsv is stated only when a departure here
covers it with exactly that value: change the preset and the departure no longer applies, so the
fidelity test fails until the change is either undone or stated.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import PAPER_PATIENCE as PATIENCE
from .values import same


@dataclass(frozen=True)
class Departure:
    field: str
    ours: object
    reason: str
    study: str = "*"
    model: str = "*"
    task: str = "*"
    stage: str = "*"

    def covers(self, study: str, model: str, task: str, stage: str, field: str, ours) -> bool:
        keys = ((self.study, study), (self.model, model), (self.task, task), (self.stage, stage))
        return (field == self.field and all(k == "*" or v in k.split(",") for k, v in keys)
                and same(ours, self.ours))


GPU_SAVER = ("a GPU saver: a supervised run stops after 10 epochs without a better validation "
             "score, counted only once its warmup has ended; the paper trains 200 epochs or 24 h "
             "and the authors' code has no early stopping, keeping the best validation checkpoint "
             "as spt does")

TEXT_VALIDATION = ("IMDb has no validation split: the authors (and Gu et al.) validate on the "
                   "test set, so the checkpoint reported on test is chosen on test; spt holds out "
                   "a fixed 10% of the training reviews and keeps the test set for the test")
BIDMC_VALIDATION = ("spt keeps the official BIDMC32 TEST file as the test set and validates on "
                    "1/7 of TRAIN (S4's 'original' split); the authors pool TRAIN and TEST and "
                    "reshuffle them 70/15/15, so R2 values are not comparable example for example")
FRACTIONS = ("C.1.4 finetunes and trains from scratch 'until convergence': the authors' cosine "
             "(50K steps on Text, 200K on Image) and its warmup at every fraction, so the run is "
             "bounded by those steps, not 200 epochs (200 epochs of the 112 Text examples of "
             "fraction 0.005 are 1,400 steps, ending before the 5,000-step warmup)")

DEPARTURES: tuple = (
    Departure("patience", PATIENCE, GPU_SAVER, stage="finetune,scratch"),
    Departure("validation", "train10%", TEXT_VALIDATION, task="text"),
    Departure("validation", "train1/7", BIDMC_VALIDATION, task="bidmc_hr,bidmc_rr,bidmc_spo2"),
    Departure("epochs", None, FRACTIONS, study="04", stage="finetune,scratch"),
)


def reason_for(study: str, model: str, task: str, stage: str, field: str, ours) -> str:
    """The reason of the first departure that covers this difference ("" when none does)."""
    for d in DEPARTURES:
        if d.covers(study, model, task, stage, field, ours):
            return d.reason
    return ""
