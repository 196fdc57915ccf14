"""State-space model configs (S4, S4D, DLR) and the paper's SSM rows as named presets.

* :class:`SSMConfig` - a stack of S4 / S4D / DLR blocks.
* :class:`SSMPreset` - one SSM row of Amos, Berant & Gupta (ICLR 2024), Table 5 / Table 7 (with the
  from-scratch settings); :func:`ssm_preset` looks one up in :data:`SSM_PRESETS`.

This module builds on :mod:`spt.config` (the objective and training configs, the shared checks);
:mod:`spt.config` does not import it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

from .config import (
    PAPER_OPTIM,
    PAPER_PATIENCE,
    Head,
    ObjectiveConfig,
    Pooling,
    TrainConfig,
    _check_choice,
    _check_positive,
    _lookup,
    pretrain_select,
    replace,
)

SSMKind = Literal["s4", "s4d", "dlr"]
SSMNorm = Literal["layer", "batch"]
# Initialisations each kind accepts; the first is its structured default. Every kind also takes
# the two random ones, RANDOM_INITS (see SSMConfig.init).
RANDOM_INITS = ("random", "random_ssm")
SSM_INITS: dict[str, tuple[str, ...]] = {
    "s4": ("legs",) + RANDOM_INITS,                 # HiPPO-LegS in DPLR form (Gu et al. 2022)
    "s4d": ("legs", "lin", "inv") + RANDOM_INITS,   # S4D-LegS / S4D-Lin / S4D-Inv
    "dlr": ("omega",) + RANDOM_INITS,               # Gupta et al. 2022's default
}
_SSM_DEFAULTS = {  # kind: (SSM-parameter lr, dt_min) as their authors set them
    "s4": (1e-3, 1e-3), "s4d": (1e-3, 1e-3), "dlr": (1e-4, 1e-4),
}


@dataclass(frozen=True)
class SSMConfig:
    """A stack of state-space blocks (S4, S4D or DLR): norm -> SSM conv -> GELU -> linear/GLU.

    kind      : "s4" (DPLR, bilinear, Cauchy kernel), "s4d" (diagonal, ZOH), "dlr" (diagonal linear
                RNN, eq. 3 of the paper: B = 1, learned C).
    d_model   : width H (number of independent SSM channels); n_layers: depth.
    d_state   : state size N. S4 / S4D store N/2 conjugate pairs (N must be even); DLR keeps N
                complex states (its authors use N = 1024).
    causal    : unidirectional convolution (and a recurrent step mode); otherwise each channel has a
                forward and a backward kernel.
    pooling   : finetuning head pooling ("mean" | "max" | "last").
    head      : finetuning head after pooling: "mlp" (Linear(d, d) -> GELU -> Linear(d, n_out)) or
                "linear" (one Linear(d, n_out), the authors' S4 / DLR decoder).
    max_len   : longest sequence. S4 learns C-tilde for this kernel length and computes its kernel at
                this length (then truncates), so its kernel does not depend on the batch length.
    init      : None -> the kind's structured default (see SSM_INITS). Two random ones:
                "random" - the paper's rule (App. C.1.3, Table 7 / Fig. 2 "Rand Init", and the
                  authors' code): EVERY parameter tensor of the whole model - input encoder, norms,
                  D, dt, the state-space parameters, output linears, head - ~ N(0, random_std^2),
                  each stored real entry (log dt, log(-Re Lambda), real and imaginary parts, ...;
                  see spt.models.init). SSMEncoder resets its own parameters; the full model is
                  reset where it is built (spt.models.init.apply_init_, called by
                  classifier_model / pretraining_model), before a checkpoint's backbone is loaded,
                  so finetuning gets a head ~ N(0, random_std^2) too. With std 0.1, S4's
                  dt ~ 1 and Re Lambda ~ -1: the initial kernels have no long memory.
                "random_ssm" - an ablation (the paper's main-text wording, Sec. 4: "the state space
                  parameters are initialized from a normal distribution"): only the state-space
                  parameters (S4: Lambda, P, B, C-tilde; S4D: Lambda, B, C; DLR: Lambda, C) ~
                  N(0, random_std^2); dt keeps its log-uniform init, the linears, norms, D,
                  encoder and head their usual ones. Asks "does the SSM prior alone matter".
    random_std: standard deviation of both random inits (the paper: 0.1).
    norm      : "layer" or "batch" (batch statistics over real, non-padded positions).
    prenorm   : normalise inside the residual branch (pre-norm) or after the residual (post-norm).
    glu       : output projection Linear(H, 2H) + GLU (S4) instead of Linear(H, H) (DLR's code).
    lr        : learning rate of the state-space parameters, with no weight decay (None -> the
                authors' value: 1e-3 for S4 / S4D, 1e-4 for DLR). For DLR it covers Lambda and C.
    dt_min, dt_max : range of the log-uniform step size dt (DLR: range of the damping of Lambda).
    positions : always "none" (not a field): the convolution kernel already knows where each input
                is, so the backbone adds no position encoding.
    """

    positions: ClassVar[str] = "none"

    kind: SSMKind = "s4"
    d_model: int = 64
    n_layers: int = 4
    d_state: int = 64
    dropout: float = 0.0
    causal: bool = False
    pooling: Pooling = "mean"
    max_len: int = 1024
    init: Optional[str] = None
    norm: SSMNorm = "layer"
    prenorm: bool = True
    glu: bool = True
    lr: Optional[float] = None
    dt_min: Optional[float] = None
    dt_max: float = 0.1
    random_std: float = 0.1
    head: Head = "mlp"

    def __post_init__(self):
        c = "SSMConfig"
        _check_choice(c, "kind", self.kind, SSMKind.__args__)
        for name in ("d_model", "n_layers", "d_state", "max_len", "dt_max", "random_std"):
            _check_positive(c, name, getattr(self, name))
        if self.kind in ("s4", "s4d") and self.d_state % 2:
            raise ValueError(f"{c}.d_state must be even for {self.kind} (conjugate pairs), "
                             f"got {self.d_state}")
        _check_choice(c, "pooling", self.pooling, Pooling.__args__)
        _check_choice(c, "head", self.head, Head.__args__)
        _check_choice(c, "norm", self.norm, SSMNorm.__args__)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"{c}.dropout must be in [0, 1)")
        lr, dt_min = _SSM_DEFAULTS[self.kind]
        if self.init is None:
            object.__setattr__(self, "init", SSM_INITS[self.kind][0])
        if self.lr is None:
            object.__setattr__(self, "lr", lr)
        if self.dt_min is None:
            object.__setattr__(self, "dt_min", dt_min)
        _check_choice(c, f"init (for kind={self.kind!r})", self.init, SSM_INITS[self.kind])
        _check_positive(c, "lr", self.lr)
        _check_positive(c, "dt_min", self.dt_min)
        if self.dt_min > self.dt_max:
            raise ValueError(f"{c}: dt_min={self.dt_min} > dt_max={self.dt_max}")

    @property
    def structured_init(self) -> str:
        """The kind's structured (HiPPO-style) initialisation: the baseline of the kernel analysis."""
        return SSM_INITS[self.kind][0]

    @property
    def is_random_init(self) -> bool:
        """True for either random initialisation ("random" or "random_ssm")."""
        return self.init in RANDOM_INITS



@dataclass(frozen=True)
class SSMPreset:
    """One SSM row of the paper: model, SPT objective, pretrain / finetune settings (Table 5) and the
    from-scratch training settings (Table 5 rows without SPT; for HiPPO S4, Gu et al. 2022).

    row, scratch_row : (model key, task key) of the SPT stages and of the scratch run in
                   spt/studies/paper_settings.tsv (HiPPO S4 from scratch is the row "s4_v1").
    scratch_model  : the from-scratch model when it differs from `model` (Gu et al.'s S4 is
                   unidirectional and pools as its configs say); None = `model`.
    scratch_options : loader options of the from-scratch run's task (Gu et al. read Text at 2,048
                   characters).
    """

    model: SSMConfig
    objective: ObjectiveConfig
    pretrain: TrainConfig
    finetune: TrainConfig
    scratch: TrainConfig
    source: str
    scratch_note: str = ""  # where the from-scratch settings depart from this paper, and why
    row: tuple = ()
    scratch_row: tuple = ()
    scratch_model: Optional[SSMConfig] = None
    scratch_options: tuple = ()


# Sizes of the S4 models. C.1.2 points at Gu et al. (2022a), App. D.2, Table 11; the values below are
# the configs that reproduce that paper in the public S4 code (state-spaces/s4,
# configs/experiment/lra/old/s4-lra-*.yaml, "V1 = ICLR 2022"): depth, width, prenorm, dropout,
# weight decay. N = 64 everywhere, dt in [1e-3, 0.1] (PathX: [1e-4, 0.1]), SSM lr 1e-3. Those
# configs use BatchNorm except Image (Table 11: LayerNorm). Pooling: mean, but Pathfinder "last"
# (the authors' s4-lra-pathfinder.yaml) and PathX max (C.1.3).
# task: (layers, width, prenorm, dropout, wd, norm, max_len, pooling, mask ratio, PT loss, dt_min)
_S4_SIZES = {
    "listops": (6, 128, False, 0.0, 0.01, "batch", 2048, "mean", 0.1, "ce", 1e-3),
    "text": (4, 128, True, 0.0, 0.0, "batch", 4096, "mean", 0.15, "ce", 1e-3),
    "retrieval": (6, 256, True, 0.0, 0.0, "batch", 4096, "mean", 0.15, "ce", 1e-3),
    "image": (6, 512, False, 0.2, 0.01, "layer", 1024, "mean", 0.5, "l1", 1e-3),
    "pathfinder": (6, 256, True, 0.1, 0.0, "batch", 1024, "last", 0.5, "ce", 1e-3),
    "pathx": (6, 256, True, 0.0, 0.0, "batch", 16384, "max", 0.5, "ce", 1e-4),
}
# The authors' decoders: one Linear after pooling, but the retrieval decoder (an MLP on
# [u, v, u*v, u-v]) on Retrieval, for S4, DLR and Gu et al.'s S4 alike.
_SSM_HEAD = {"retrieval": "mlp"}

# Gu et al. 2022a's from-scratch S4 (Table 2 and Table 7 "S4", cited there): the V1 configs of
# state-spaces/s4 (configs/experiment/lra/old/s4-lra-*.yaml with their pipelines): unidirectional
# S4 (the layer default bidirectional: false), ReduceLROnPlateau on validation accuracy (factor
# 0.2, no warmup) and no early stopping or time budget.
# task: (lr, batch size, epochs, plateau patience, pooling, loader options)
_S4_V1 = {
    "listops": (1e-2, 50, 50, 5, "mean", ()),
    "text": (1e-2, 50, 40, 10, "last", (("seq_len", 2048),)),
    "retrieval": (2e-3, 64, 25, 20, "mean", ()),
    "image": (4e-3, 50, 100, 10, "mean", ()),
    "pathfinder": (4e-3, 100, 200, 10, "last", ()),
    "pathx": (5e-4, 32, 100, 40, "mean", ()),
}

# Table 5, "(FT-LR, FT-BSZ, PT-LR, PT-BSZ)"; rows without SPT give (LR, BSZ) of the from-scratch run.
# Two cells print three numbers ("S4 + Rand Init + SPT", Text: "1e-3,16,32"; "DLR + Rand Init + SPT",
# Image: "1e-3,64,32"); we read them as (FT-LR, FT-BSZ, PT-BSZ) with PT-LR = FT-LR (an assumption).
_TABLE5 = {
    ("s4", "spt"): {"listops": (1e-3, 16, 1e-3, 128), "text": (5e-4, 16, 5e-4, 8),
                    "retrieval": (5e-4, 256, 5e-4, 8), "image": (1e-3, 512, 1e-3, 32),
                    "pathfinder": (1e-3, 64, 1e-3, 8), "pathx": (1e-3, 64, 1e-3, 8)},
    ("s4_random", "spt"): {"listops": (1e-3, 16, 1e-3, 32), "text": (1e-3, 16, 1e-3, 32),
                           "image": (5e-4, 64, 1e-3, 32), "pathx": (5e-4, 16, 1e-3, 4)},
    ("s4_random", "scratch"): {"listops": (5e-4, 16), "text": (1e-3, 16), "image": (1e-4, 128),
                               "pathx": (5e-4, 16)},
    ("dlr_random", "spt"): {"listops": (5e-4, 64, 5e-4, 32), "text": (5e-4, 16, 5e-4, 8),
                            "image": (1e-3, 64, 1e-3, 32), "pathx": (5e-4, 16, 5e-4, 8)},
    ("dlr_random", "scratch"): {"listops": (1e-4, 16), "text": (1e-3, 16), "image": (1e-3, 16),
                                "pathx": (5e-4, 64)},
    ("dlr", "spt"): {"listops": (5e-4, 16, 1e-3, 128), "text": (1e-3, 16, 5e-4, 8),
                     "image": (1e-3, 64, 1e-3, 32), "pathx": (5e-4, 64, 5e-4, 8)},
    ("dlr", "scratch"): {"listops": (5e-4, 16), "text": (5e-4, 16), "image": (5e-4, 64),
                         "pathx": (5e-4, 64)},
}


# The authors' schedules (IdoAmos/not-from-scratch configs/experiment/lra/{s4,dlr}-lra-*.yaml):
# task: (finetuning schedule, its warmup steps, its step cap or None, pretraining warmup steps).
# Pretraining is always a linear warmup then a constant lr. Their cosines run over a fixed number of
# steps (num_training_steps: Text 50K, Image 200K, PathX 500K; DLR PathX 250K): the run's step cap
# (max_steps, with the paper's 200 epochs), so the cosine spans the run and reaches 0 at its end.
_S4_SCHEDULE = {"listops": ("constant", 2000, None, 2000),
                "text": ("cosine", 5000, 50_000, 1000),
                "retrieval": ("constant", 2500, None, 2500),
                "image": ("cosine", 1000, 200_000, 1000),
                "pathfinder": ("constant", 2500, None, 2500),
                "pathx": ("cosine", 10_000, 500_000, 5000)}
_DLR_SCHEDULE = {"listops": ("constant", 2000, None, 2000),
                 "text": ("constant", 2000, None, 1000),
                 "image": ("constant", 1000, None, 1000),
                 "pathx": ("cosine", 5000, 250_000, 5000)}


def ssm_finetune_schedule(task: str, kind: str = "s4") -> dict:
    """TrainConfig fields of the authors' finetuning schedule for an S4 / DLR run on `task`."""
    schedule, warmup, steps, _ = (_DLR_SCHEDULE if kind == "dlr" else _S4_SCHEDULE)[task]
    return dict(schedule=schedule, warmup_steps=warmup, max_steps=steps)


def _v1_scratch(task: str, model: SSMConfig) -> tuple:
    """(TrainConfig, model, loader options) of Gu et al.'s from-scratch S4 on `task`."""
    wd = _S4_SIZES[task][4]
    lr, bsz, epochs, plateau, pooling, options = _S4_V1[task]
    train = TrainConfig(lr=lr, batch_size=bsz, weight_decay=wd, epochs=epochs, schedule="plateau",
                        plateau_patience=plateau, plateau_factor=0.2,
                        **dict(PAPER_OPTIM, max_time=None))
    return train, replace(model, causal=True, pooling=pooling), options


def _ssm_row(task: str, variant: str) -> SSMPreset:
    (layers, width, prenorm, dropout, wd, norm, max_len, pooling, ratio, loss,
     dt_min) = _S4_SIZES[task]
    kind = "dlr" if variant.startswith("dlr") else "s4"
    init = "random" if variant.endswith("random") else None
    head = _SSM_HEAD.get(task, "linear")
    if kind == "dlr":  # C.1.3: DLR's own layer defaults (N = 1024), LayerNorm, S4's sizes and wd;
        # the authors' dlr-lra-*.yaml: GLU output, dropout 0
        model = SSMConfig(kind="dlr", d_model=width, n_layers=layers, d_state=1024,
                          dropout=0.0, pooling=pooling, max_len=max_len, init=init,
                          norm="layer", prenorm=prenorm, glu=True, head=head)
    else:
        model = SSMConfig(kind="s4", d_model=width, n_layers=layers, d_state=64, dropout=dropout,
                          pooling=pooling, max_len=max_len, init=init, norm=norm, prenorm=prenorm,
                          dt_min=dt_min, head=head)
    ft_lr, ft_bsz, pt_lr, pt_bsz = _TABLE5[(variant, "spt")][task]
    pt_warm = (_DLR_SCHEDULE if kind == "dlr" else _S4_SCHEDULE)[task][3]
    ft_opt = dict(ssm_finetune_schedule(task, kind), **PAPER_OPTIM)
    extra = {}
    if variant == "s4":
        scratch_cfg, scratch_model, options = _v1_scratch(task, model)
        extra = dict(scratch_row=("s4_v1", task), scratch_model=scratch_model,
                     scratch_options=options)
        note = ("S4 from scratch: Gu et al. 2022's settings (state-spaces/s4 LRA configs, V1: "
                "unidirectional, ReduceLROnPlateau, their epochs), which this paper cites rather "
                "than prints")
        source = ("Amos, Berant & Gupta (ICLR 2024), Table 5 (S4 + SPT); from-scratch and sizes: "
                  "Gu et al. 2022 via state-spaces/s4 configs/experiment/lra/old")
    else:
        s_lr, s_bsz = _TABLE5[(variant, "scratch")][task]
        scratch_cfg = TrainConfig(lr=s_lr, batch_size=s_bsz, weight_decay=wd, epochs=200,
                                  patience=PAPER_PATIENCE, **ft_opt)
        extra = dict(scratch_row=(variant, task))
        note = ""
        source = "Amos, Berant & Gupta (ICLR 2024), Table 5 and C.1.3; sizes as S4 (C.1.2)"
    return SSMPreset(
        model=model,
        objective=ObjectiveConfig(kind="masked", mask_ratio=ratio, loss=loss),
        pretrain=TrainConfig(lr=pt_lr, batch_size=pt_bsz, weight_decay=wd, epochs=200,
                             schedule="constant", warmup_steps=pt_warm,
                             select=pretrain_select(loss), **PAPER_OPTIM),
        finetune=TrainConfig(lr=ft_lr, batch_size=ft_bsz, weight_decay=wd, epochs=200,
                             patience=PAPER_PATIENCE, **ft_opt),
        scratch=scratch_cfg, source=source, scratch_note=note, row=(variant, task), **extra)


# Keys (task, variant): variant "s4" (HiPPO S4, all six LRA tasks), "s4_random", "dlr",
# "dlr_random" (Table 7: ListOps, Text, Image, PathX). All bidirectional with masked SPT.
SSM_PRESETS: dict[tuple[str, str], SSMPreset] = {
    (task, variant): _ssm_row(task, variant)
    for variant in ("s4", "s4_random", "dlr", "dlr_random")
    for task in _TABLE5[(variant, "spt")]
}


def ssm_preset(task: str, variant: str = "s4") -> SSMPreset:
    """The S4 / DLR row for (task, variant); a clear error lists the rows that exist."""
    return _lookup(SSM_PRESETS, task, variant, "SSM")
