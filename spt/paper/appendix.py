"""The settings the paper gives in prose or in small tables of its appendix.

* C.1.2 - PathX-256 with S4: :func:`pathx256_s4_row`.
* C.1.4 - data scales (Fig. 3): the fractions, the fixed pretraining steps, and the learning rates
  and batch sizes of S4 on Text and Image: :data:`FIG3_FRACTIONS`, :data:`FIG3_PRETRAIN_STEPS`,
  :func:`data_scale_row`, :data:`DATA_SCALE_SCRATCH_LRS`.
* C.1.5 - Pythia 70M finetuned (Table 5's "Pythia" row): :data:`PYTHIA_ROWS`,
  :data:`PYTHIA_OPTIM`.
* App. D, Table 8 - the compute-tied epoch budgets: :data:`TABLE8_BUDGET_EPOCHS`.
"""
from __future__ import annotations

from ..config import replace
from .rows import DAY, PAPER_OPTIM, PaperRow
from .table5 import ssm_row


# ---- C.1.2: "For the PathX-256 task we use the same configuration as PathX, changing the pooling
# method again from Mean to Max. For pretraining we use learning rate 1e-3, batch size 8 and batch
# size 64 for fine tuning with the same learning rate, the trained from scratch model's learning
# rate is 1e-4 with batch size 16." The paper ran this scratch model itself: PathX's finetuning
# settings, not the final S4 paper's runs.
def pathx256_s4_row() -> PaperRow:
    """S4 on PathX-256 (65,536 tokens, max pooling), C.1.2."""
    p = ssm_row("pathx", "s4")
    return replace(p, model=replace(p.model, max_len=256 * 256, pooling="max"),
                   pretrain=replace(p.pretrain, lr=1e-3, batch_size=8),
                   finetune=replace(p.finetune, lr=1e-3, batch_size=64),
                   scratch=replace(p.finetune, lr=1e-4, batch_size=16), scratch_note="",
                   scratch_pooling=None,
                   source="Amos, Berant & Gupta (ICLR 2024), C.1.2", row=("s4", "pathx256"))


# ---- C.1.4: data scales. "We pretrain all models for 40K (Text) / 10K (Image) pretraining steps";
# fractions of Fig. 3; Text: "batch size 8 and learning rate 5e-4 for pretraining, 16, 5e-4 for
# finetuning", from scratch "batch size 16 and learning rates 1e-3, 5e-4" (the best on validation);
# Image: "batch size 50 for all experiments, learning rate 1e-2 for pretraining" and "2e-3 for
# finetuning and training from scratch".
FIG3_FRACTIONS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0)
FIG3_PRETRAIN_STEPS = {"text": 40_000, "image": 10_000}
# task: (PT lr, PT batch, FT lr, FT batch, scratch lr (the first of DATA_SCALE_SCRATCH_LRS), batch)
_DATA_SCALES = {"text": (5e-4, 8, 5e-4, 16, 1e-3, 16), "image": (1e-2, 50, 2e-3, 50, 2e-3, 50)}
DATA_SCALE_SCRATCH_LRS = {"text": (1e-3, 5e-4), "image": (2e-3,)}


def data_scale_row(task: str, no_epoch_cap: int) -> PaperRow:
    """C.1.4's S4 row on `task` ("text" or "image"): Table 5's S4 model and schedules at C.1.4's
    learning rates and batch sizes; pretraining for the fixed steps, finetuning and scratch with
    epochs = `no_epoch_cap` (bounded by the cosine's steps: "until convergence")."""
    p = ssm_row(task, "s4")
    pt_lr, pt_bsz, ft_lr, ft_bsz, s_lr, s_bsz = _DATA_SCALES[task]
    return replace(
        p, pretrain=replace(p.pretrain, lr=pt_lr, batch_size=pt_bsz, epochs=no_epoch_cap,
                            max_steps=FIG3_PRETRAIN_STEPS[task]),
        finetune=replace(p.finetune, lr=ft_lr, batch_size=ft_bsz, epochs=no_epoch_cap),
        scratch=replace(p.finetune, lr=s_lr, batch_size=s_bsz, epochs=no_epoch_cap),
        scratch_note="", source="Amos, Berant & Gupta (ICLR 2024), C.1.4")


# ---- C.1.5 and Table 5's "Pythia" row: (FT-LR, FT-BSZ); no pretraining on the task. PathX is not
# reported. Schedules, pooling and heads from the authors' configs/experiment/lra/llm/
# pyth-lra-<task>.yaml: a constant lr after warmup (ListOps: transformers' cosine over 2,000 steps
# after 200 warmup steps, periodic past its end, as their runs had it for 200 epochs); mean pooling
# on ListOps, Retrieval and Image, the last position on Text and Pathfinder; one Linear after
# pooling (the retrieval MLP on Retrieval); Image as pixel tokens (their `tokenize: true`), as
# Pathfinder. Micro-batches are spt's memory choice for one 80 GB GPU (bf16 autocast), not the
# paper's.
PYTHIA_ROWS = {
    "listops": dict(lr=5e-5, batch_size=64, micro_batch=32, warmup=200, schedule="cosine",
                    schedule_steps=2000, pooling="mean", head="linear"),
    "text": dict(lr=5e-4, batch_size=16, micro_batch=8, warmup=5000, pooling="last",
                 head="linear"),
    "retrieval": dict(lr=1e-4, batch_size=256, micro_batch=8, warmup=2500, pooling="mean",
                      head="mlp"),
    "image": dict(lr=7e-5, batch_size=64, options=(("tokens", True),), warmup=2000,
                  pooling="mean", head="linear"),
    "pathfinder": dict(lr=1e-4, batch_size=1024, options=(("tokens", True),), micro_batch=64,
                       warmup=2500, pooling="last", head="linear"),
}
# C.1: "Pythia experiments ... were trained for a maximum of 2 days on 4 GPUs"; C.1.5: "without any
# regularization"; the authors' AdamW betas, no clipping.
PYTHIA_OPTIM = dict(PAPER_OPTIM, max_time=2 * DAY)

# ---- App. D, Table 8: "Training budget is set to 30 epochs for Text and 150 epochs for Image".
TABLE8_BUDGET_EPOCHS = {"image": 150, "text": 30}
