"""One row of the paper, and what every row shares (App. C.1).

A :class:`PaperRow` is one printed row of the paper's hyper-parameter tables (Table 4, 5, 6, or a
setting the appendix states in prose): the model, the self-pretraining objective and the three
training stages. ``pretrain`` then ``finetune`` is the SPT arm; ``scratch`` is the from-scratch
run (None where the paper gives no separate one: the Transformer rows train the finetuning
settings from random init). Both arms train the same ``model``.

    row = ssm_row("text", "s4")          # spt.paper.table5
    row.model, row.pretrain.lr, row.scratch.batch_size
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import ObjectiveConfig, TrainConfig

# What the paper leaves to "our repository" (App. C.1), from the authors' released configs
# (github IdoAmos/not-from-scratch, configs/optimizer/adamw.yaml, configs/trainer/default.yaml,
# train.py, configs/experiment/**): AdamW betas (0.9, 0.999) decaying every parameter without an
# optimiser hint (biases and norms too), no gradient clipping. The budget is the paper's: 200
# epochs or 24 h per stage, whichever comes first; 5 days for the Transformers on PathX and
# Speech Commands and 2 days for Pythia (C.1: "on 4 GPUs").
PAPER_BETAS = (0.9, 0.999)
DAY = 24 * 3600
PAPER_OPTIM = dict(betas=PAPER_BETAS, grad_clip=None, max_time=DAY, wd_groups="all")
# A finetuning or from-scratch run stops after this many epochs without a better validation score,
# counted once its warmup has ended: a GPU saver the paper does not use (its runs train 200 epochs
# or 24 h); spt.studies.machinery.departures states it.
PAPER_PATIENCE = 10


def pretrain_select(loss: str) -> str:
    """App. C.1: the pretraining checkpoint with the highest validation accuracy (CE) / R2 (L1)."""
    return "accuracy" if loss == "ce" else "r2"


@dataclass(frozen=True)
class PaperRow:
    """One row of the paper.

    model      : the architecture (TransformerConfig, SSMConfig), the same for every stage.
    objective  : the SPT objective (masked or causal; its loss and mask ratio).
    pretrain, finetune : the SPT arm's two stages.
    scratch    : the from-scratch run's settings; None: the paper gives none, train `finetune`.
    source     : where the row's numbers are printed.
    scratch_note : where the from-scratch settings come from when the paper does not print them.
    scratch_pooling : the from-scratch run's pooling where it differs from the model's (the cited
                 S4 PathX run pools by mean where the paper's own PathX runs pool by max).
    row        : (model key, task key) of the row in spt/paper/settings.tsv, the reference that
                 spt.studies.machinery.fidelity checks every stage against.
    """

    model: object
    objective: ObjectiveConfig
    pretrain: TrainConfig
    finetune: TrainConfig
    source: str
    scratch: Optional[TrainConfig] = None
    scratch_note: str = ""
    scratch_pooling: Optional[str] = None
    row: tuple = ()


def lookup(table: dict, task: str, variant: str, what: str) -> PaperRow:
    """table[(task, variant)], or a KeyError that lists the rows that exist."""
    try:
        return table[(task, variant)]
    except KeyError:
        rows = ", ".join(f"{t}/{v}" for t, v in table)
        raise KeyError(f"no {what} row for task={task!r}, variant={variant!r}; "
                       f"{what} rows are: {rows}") from None
