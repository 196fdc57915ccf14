"""The arms of a paper row: self-pretraining then finetuning, and training from scratch.

    spt_arm(transformer_row("text", "rotary_masked"))   # Table 4 row -> SPT arm
    scratch_arm(ssm_row("text", "s4"))                  # the final S4 from scratch

Both arms of a row train the same model: one architecture, two initialisations.
"""
from __future__ import annotations

from .arms import Arm


def spt_arm(preset) -> Arm:
    """SPT arm of a paper row (spt.paper.PaperRow)."""
    return Arm(model=preset.model, objective=preset.objective, pretrain=preset.pretrain,
               train=preset.finetune, row=preset.row)


TRANSFORMER_SCRATCH_NOTE = ("Table 4 gives no from-scratch settings: the masked row's model and "
                            "finetuning settings, trained until validation stops improving")


def scratch_arm(preset) -> Arm:
    """From-scratch arm of a row, on the row's model: its own scratch settings (SSM rows: Table 5's,
    or the final S4 paper's for HiPPO S4) or the finetuning settings (Transformer rows: the paper
    gives no separate ones)."""
    if preset.scratch is not None:
        return Arm(model=preset.model, train=preset.scratch, note=preset.scratch_note,
                   pooling=preset.scratch_pooling, row=preset.row)
    return Arm(model=preset.model, train=preset.finetune, note=TRANSFORMER_SCRATCH_NOTE,
               row=preset.row)
