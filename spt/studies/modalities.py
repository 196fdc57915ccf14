"""Study 07 — Table 3: additional modalities. Speech Commands (causal and bidirectional models),
sCIFAR (RGB pixel sequences) and BIDMC (HR / RR / SpO2 regression, R²), Transformers and S4,
trained from scratch vs. with SPT (paper section 3.7, C.1.6, C.3, Tables 4 and 6).

Grid: task x model x init x seed; task in {"speech_causal", "speech_bi", "scifar", "bidmc_hr",
"bidmc_rr", "bidmc_spo2"}, model in {"transformer", "s4"}, init in {"scratch", "spt"}. Results carry
test_accuracy for the classification tasks and test_r2 for BIDMC (NaN elsewhere).

S4 sizes are not printed in this paper (it follows Gu et al. 2022a): the S4 of each modality is the
authors' config's (sc/s4-sc.yaml, cifar/s4-cifar.yaml, bidmc/s4-bidmc.yaml: depth, width, state
size, norm, pre-norm, n_ssm, dropout). Learning rates and batch sizes are Table 6's; pooling, weight
decay and schedules the authors' configs' (and their -lm pretraining configs).
"""
from __future__ import annotations

import xarray as xr

from ..config import (
    PAPER_OPTIM,
    PAPER_PATIENCE,
    ObjectiveConfig,
    TrainConfig,
    pretrain_select,
    replace,
    transformer_preset,
)
from ..paper import TABLE3
from ..ssm_config import SSMConfig
from .arms import Arm, TaskRef
from .job import Entry, GridPreset
from .paper_arms import scratch_arm, spt_arm
from .smoke import smoke_arm, smoke_data_root, smoke_digits
from .study import Study, need_root
from .tables import compare_table, spt_gains, with_gains

NAME = "07_additional_modalities"
TASKS = ("speech_causal", "speech_bi", "scifar", "bidmc_hr", "bidmc_rr", "bidmc_spo2")
# task -> (loader name, options, seq_len, causal, pooling, mask ratio, Table 6 S4+SPT (FT lr, FT bsz,
#          PT lr, PT bsz), Table 6 S4 scratch (lr, bsz))
# Pooling from the authors' configs: pipeline sc (max), cifar/s4-cifar.yaml and bidmc/s4-bidmc.yaml
# (decoder mode pool).
_ROWS = {
    "speech_causal": ("speech", (), 16000, True, "max", 0.25, (5e-4, 16, 1e-3, 32), (1e-3, 16)),
    "speech_bi": ("speech", (), 16000, False, "max", 0.25, (5e-3, 16, 1e-3, 32), (5e-4, 16)),
    "scifar": ("scifar", (), 1024, False, "mean", 0.5, (5e-4, 64, 1e-3, 32), (5e-4, 256)),
    "bidmc_hr": ("bidmc", (("target", "HR"),), 4000, False, "mean", 0.25, (1e-3, 64, 1e-3, 64),
                 (1e-3, 32)),
    "bidmc_rr": ("bidmc", (("target", "RR"),), 4000, False, "mean", 0.25, (1e-3, 64, 1e-3, 64),
                 (1e-2, 32)),
    "bidmc_spo2": ("bidmc", (("target", "SpO2"),), 4000, False, "mean", 0.25,
                   (1e-3, 64, 1e-3, 64), (1e-2, 32)),
}
# The S4 of each modality, as the authors' finetuning configs give it (sc/s4-sc.yaml,
# cifar/s4-cifar.yaml, bidmc/s4-bidmc.yaml, which follow Gu et al.'s released configs): 6 layers,
# GLU, bidirectional unless causal, SSM lr 1e-3 for dt, A and B (configs/model/layer/s4.yaml's
# default; BIDMC's layer.lr 0.001), dt in [1e-3, 0.1]. Norm and pre-norm where a config leaves them
# out: configs/model/base.yaml (layer, pre-norm). sc/s4-sc-lm.yaml pretrains with LayerNorm where
# s4-sc.yaml has batch norm: one model serves both stages here, the finetuning config's.
_S4_MODEL = {
    "speech": dict(d_model=128, d_state=64, n_ssm=64, norm="batch", prenorm=True, dropout=0.0),
    "scifar": dict(d_model=512, d_state=64, n_ssm=2, norm="layer", prenorm=False, dropout=0.1,
                   tie_dropout=True),
    "bidmc": dict(d_model=128, d_state=256, n_ssm=2, norm="layer", prenorm=True, dropout=0.0),
}
# Table 4 rows of the Transformers (sCIFAR uses the Image setup, C.1.6)
_TRANSFORMER_ROW = {"speech_causal": ("speech", "rotary_causal"),
                    "speech_bi": ("speech", "rotary_masked"), "scifar": ("image", "rotary_masked"),
                    "bidmc_hr": ("bidmc_hr", "rotary_masked"),
                    "bidmc_rr": ("bidmc_rr", "rotary_masked"),
                    "bidmc_spo2": ("bidmc_spo2", "rotary_masked")}
# The authors' S4 schedules (sc/s4-sc[-lm].yaml, cifar/s4-cifar[-lm].yaml, bidmc/s4-bidmc[-lm].yaml):
# finetuning and scratch: a cosine of 200K steps after the default 1,000 warmup steps (SC, sCIFAR),
# or the lr halved at epochs 100, 200, ... (BIDMC); pretraining: the same cosine (SC), or a constant
# lr after 2,000 (sCIFAR) / 500 (BIDMC) warmup steps. Weight decay 0.05 everywhere.
_COSINE = dict(schedule="cosine", warmup_steps=1000, max_steps=200_000)
_MULTISTEP = dict(schedule="multistep", warmup_steps=0, lr_milestones=(100, 200, 300, 400, 500),
                  lr_gamma=0.5)
_S4_SUPERVISED = {"speech": _COSINE, "scifar": _COSINE, "bidmc": _MULTISTEP}
_S4_PRETRAIN = {"speech": _COSINE, "scifar": dict(schedule="constant", warmup_steps=2000),
                "bidmc": dict(schedule="constant", warmup_steps=500)}
S4_WD = 0.05
SCIFAR_TRANSFORMER_PT_WARMUP = 2000  # cifar/transformer-cifar-lm.yaml (num_warmup_steps 2000)


def s4_arms(task: str) -> dict:
    (loader, _, L, causal, pooling, ratio, (ft_lr, ft_bsz, pt_lr, pt_bsz),
     (s_lr, s_bsz)) = _ROWS[task]
    model = SSMConfig(kind="s4", n_layers=6, causal=causal, pooling=pooling, max_len=L,
                      head="linear", glu=True, lr=1e-3, dt_min=1e-3, dt_max=0.1,
                      **_S4_MODEL[loader])
    objective = ObjectiveConfig(kind="causal" if causal else "masked", mask_ratio=ratio, loss="l1")
    ft_opt = dict(PAPER_OPTIM, weight_decay=S4_WD, epochs=200, patience=PAPER_PATIENCE,
                  **_S4_SUPERVISED[loader])
    row = ("s4", task)
    spt = Arm(model=model, objective=objective, row=row, note=S4_NOTE,
              pretrain=TrainConfig(lr=pt_lr, batch_size=pt_bsz, weight_decay=S4_WD, epochs=200,
                                   select=pretrain_select("l1"), **_S4_PRETRAIN[loader],
                                   **PAPER_OPTIM),
              train=TrainConfig(lr=ft_lr, batch_size=ft_bsz, **ft_opt))
    note = S4_NOTE + ("; Table 6 prints four numbers in this from-scratch cell: the first two are "
                      "read as its (lr, batch size)" if task in _FOUR_NUMBERS else "")
    scratch = Arm(model=model, train=TrainConfig(lr=s_lr, batch_size=s_bsz, **ft_opt), note=note,
                  row=row)
    return {"spt": spt, "scratch": scratch}


S4_NOTE = ("S4 sizes are not printed in the paper (it follows Gu et al. 2022): the authors' "
           "sc/s4-sc.yaml, cifar/s4-cifar.yaml and bidmc/s4-bidmc.yaml")
# Table 6's S4 (from scratch) cells that print "lr,bsz,lr,bsz" like the SPT rows
_FOUR_NUMBERS = ("speech_causal", "speech_bi", "scifar")


def paper_arms(task: str) -> dict:
    """{(model, init): Arm} for `task`."""
    t = transformer_preset(*_TRANSFORMER_ROW[task])
    L = _ROWS[task][2]
    t = replace(t, model=replace(t.model, max_len=L), row=(t.row[0], task))
    if task == "scifar":  # the Image setup (C.1.6) with cifar/transformer-cifar-lm.yaml's warmup
        t = replace(t, pretrain=replace(t.pretrain, warmup_steps=SCIFAR_TRANSFORMER_PT_WARMUP))
    s4 = s4_arms(task)
    return {("transformer", "scratch"): scratch_arm(t), ("transformer", "spt"): spt_arm(t),
            ("s4", "scratch"): s4["scratch"], ("s4", "spt"): s4["spt"]}


def paper(data_root=None) -> GridPreset:
    root = need_root(data_root, NAME)
    entries = tuple(Entry((("task", t), ("model", m), ("init", i)),
                          TaskRef(_ROWS[t][0], root=root, options=_ROWS[t][1]), arm)
                    for t in TASKS for (m, i), arm in paper_arms(t).items())
    return GridPreset("paper", entries, note="Tables 4 and 6; Speech Commands, CIFAR-10, BIDMC")


def smoke(data_root=None) -> GridPreset:
    root = str(smoke_data_root())
    digits = smoke_digits()
    stand_ins = (("digits_causal", "speech_causal", digits, 64),
                 ("digits_bi", "speech_bi", digits, 64),
                 ("synthetic_hr", "bidmc_hr", TaskRef("bidmc", root=root, options=(("target", "HR"),)),
                  128))
    entries = tuple(Entry((("task", name), ("model", m), ("init", i)), ref, smoke_arm(arm, L))
                    for name, row, ref, L in stand_ins for (m, i), arm in paper_arms(row).items())
    return GridPreset("smoke", entries, note="CPU smoke run: no speech / CIFAR / BIDMC data offline, "
                      "so digits 8x8 stand in for the causal and bidirectional classification "
                      "rows and a synthetic regression in BIDMC's .ts format for BIDMC HR; 2-layer "
                      "models, 3 epochs. It checks the pipeline, not the paper's numbers.")


PRESETS = {"smoke": smoke, "paper": paper}



def table(ds: xr.Dataset):
    """Mean test accuracy (%) and R² per task, beside Table 3, then SPT's gain over scratch per
    model, paired by seed: mean, 95% interval, seeds ahead."""
    rows = [("S4", {"model": "s4", "init": "scratch"}, "S4"),
            ("Transformers", {"model": "transformer", "init": "scratch"}, "Transformers"),
            ("S4 + SPT", {"model": "s4", "init": "spt"}, "S4 + SPT"),
            ("Transformers + SPT", {"model": "transformer", "init": "spt"}, "Transformers + SPT")]
    parts = []
    pairs = [("SPT - scratch", "spt", "scratch")]
    if "test_accuracy" in ds:
        parts.append(with_gains(compare_table(ds, rows, TABLE3, metric="test_accuracy"),
                                spt_gains(ds, pairs, metric="test_accuracy")))
    if "test_r2" in ds:
        parts.append(with_gains(compare_table(ds, rows, {}, metric="test_r2"),
                                spt_gains(ds, pairs, metric="test_r2")).add_suffix(" (R²)"))
    import pandas as pd
    table = pd.concat(parts, axis=1)
    blank = lambda v: v in ("", "-") or (isinstance(v, float) and v != v)  # noqa: E731
    return table.drop(columns=[c for c in table.columns if all(map(blank, table[c]))])


STUDY = Study(NAME, "Table 3: Speech Commands, sCIFAR and BIDMC, Transformers and S4, scratch vs. SPT",
              ("task", "model", "init", "seed"), PRESETS, table, takes_models=True)
