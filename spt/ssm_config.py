"""State-space model configs: :class:`SSMConfig`, a stack of S4 / S4D / DLR blocks.

The paper's S4 and DLR rows built from it live in :mod:`spt.paper` (``spt.paper.table5``).

This module builds on :mod:`spt.config` (the objective and training configs, the shared checks);
:mod:`spt.config` does not import it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal, Optional, Union

from .config_base import ConvBlockConfig, _check_choice, _check_positive

SSMKind = Literal["s4", "s4d", "dlr"]
SSMTaskInit = Literal["spectrum"]
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


@dataclass(frozen=True, kw_only=True)
class SSMConfig(ConvBlockConfig):
    """A stack of state-space blocks (S4, S4D or DLR): norm -> SSM conv -> GELU -> linear/GLU.

    kind      : "s4" (DPLR, bilinear, Cauchy kernel), "s4d" (diagonal, ZOH), "dlr" (diagonal linear
                RNN, eq. 3 of the paper: B = 1, learned C).
    d_model   : width H (number of independent SSM channels); n_layers: depth.
    d_state   : state size N. S4 / S4D store N/2 conjugate pairs (N must be even); DLR keeps N
                complex states (its authors use N = 1024).
    causal    : unidirectional convolution (and a recurrent step mode); otherwise each channel has a
                forward and a backward kernel.
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
    glu       : output projection Linear(H, 2H) + GLU (S4) instead of Linear(H, H) (DLR's code).
    lr        : learning rate of the state-space parameters, with no weight decay (None -> the
                authors' value: 1e-3 for S4 / S4D, 1e-4 for DLR). For DLR it covers Lambda and C.
    dt_lr     : learning rate of S4 / S4D's step size dt, with no weight decay: None -> `lr`; "run"
                -> the run's own lr (the final S4's LRA configs: ``lr: {dt: null, A: .., B: ..}``).
    n_ssm     : S4 only: trainable copies of (Lambda, P, B) shared by the H channels (channel h uses
                copy h mod n_ssm; C and dt stay per channel), as the S4 code's n_ssm; None -> H
                (every channel its own). Must divide d_model.
    reach     : None for kernels over the whole sequence; w zeroes every kernel lag past w, so each
                layer relates inputs at most w positions apart (the range probe's truncated
                kernel, spt.analysis.range_probe; n layers: 2 n w when bidirectional, n w causal).
                Such a layer has no recurrent step mode.
    task_init : None, or "spectrum": before training, the FIRST block's state-space parameters (log dt,
                log(-Re Lambda), Im Lambda) are fitted so that its kernel's power spectrum has the
                shape of the power spectrum of its inputs on the training examples; the other blocks
                keep their init. Our reading of Chen & Chen 2025's task-dependent initialisation
                (arXiv 2509.20789; its estimator, loss and optimiser are not known to us, every
                choice is ours: spt.models.task_init). Done by spt.train.runs.pretrain and
                train_from_scratch when they build the model (finetune loads pretrained weights).
                Kinds "s4" and "s4d" only.
    tie_dropout : draw each dropout mask once per example and channel, shared along the sequence
                (the S4 code's tie_dropout), instead of per position.
    dt_min, dt_max : range of the log-uniform step size dt (DLR: range of the damping of Lambda).
    The other fields (dropout, pooling, head, norm, prenorm) are every S4-style block's
    (:class:`~spt.config_base.ConvBlockConfig`).
    """

    family: ClassVar[str] = "ssm"

    kind: SSMKind = "s4"
    d_state: int = 64
    init: Optional[str] = None
    lr: Optional[float] = None
    dt_min: Optional[float] = None
    dt_max: float = 0.1
    random_std: float = 0.1
    dt_lr: Union[float, Literal["run"], None] = None
    n_ssm: Optional[int] = None
    tie_dropout: bool = False
    reach: Optional[int] = None
    task_init: Optional[SSMTaskInit] = None

    def check(self):
        c = "SSMConfig"
        _check_choice(c, "kind", self.kind, SSMKind.__args__)
        for name in ("d_state", "dt_max", "random_std"):
            _check_positive(c, name, getattr(self, name))
        if self.kind in ("s4", "s4d") and self.d_state % 2:
            raise ValueError(f"{c}.d_state must be even for {self.kind} (conjugate pairs), "
                             f"got {self.d_state}")
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
        if self.dt_lr is not None and self.dt_lr != "run" and (
                isinstance(self.dt_lr, (str, bool)) or not self.dt_lr > 0):
            raise ValueError(f"{c}.dt_lr must be a learning rate > 0, \"run\" (the run's lr) or "
                             f"None (the same as lr), got {self.dt_lr!r}")
        if self.reach is not None:
            _check_positive(c, "reach", self.reach, allow_zero=True)
        if self.task_init is not None:
            _check_choice(c, "task_init", self.task_init, (None,) + SSMTaskInit.__args__)
            if not self.takes_task_init:
                raise ValueError(f"{c}.task_init={self.task_init!r} fits the first layer's S4 / S4D "
                                 f"state-space parameters: it needs kind 's4' or 's4d', got "
                                 f"kind={self.kind!r} (leave task_init=None)")
        if self.n_ssm is not None:
            if self.kind != "s4":
                raise ValueError(f"{c}.n_ssm is an S4 option (kind='s4'); kind={self.kind!r} "
                                 f"keeps one state-space model per channel: leave n_ssm=None")
            _check_positive(c, "n_ssm", self.n_ssm)
            if self.d_model % self.n_ssm:
                raise ValueError(f"{c}.n_ssm={self.n_ssm} must divide d_model={self.d_model}")

    @property
    def takes_task_init(self) -> bool:
        """Whether task_init can fit this kind's first layer (S4 and S4D: their dt and spectrum)."""
        return self.kind in ("s4", "s4d")

    @property
    def dt_rate(self):
        """The learning rate dt trains at (dt_lr, or lr when None; "run": the run's), or None for
        DLR, which has no step size."""
        return None if self.kind == "dlr" else (self.lr if self.dt_lr is None else self.dt_lr)

    @property
    def ssm_copies(self) -> Optional[int]:
        """How many (Lambda, P, B) copies an S4 stack learns (n_ssm, or one per channel); None for
        S4D and DLR, which have no such option."""
        return (self.n_ssm or self.d_model) if self.kind == "s4" else None

    @property
    def smoke_shape(self) -> dict:
        """The sizes a smoke run builds it at (DLR keeps 16 modes; S4 / S4D take 8)."""
        return dict(d_model=16, n_layers=2, d_state=16 if self.kind == "dlr" else 8)

    def counting_form(self):
        """The same parameters without the HiPPO set-up (seconds at d > 1K): for counting them."""
        return dataclasses.replace(self, init="random_ssm")

    @property
    def structured_init(self) -> str:
        """The kind's structured (HiPPO-style) initialisation: the baseline of the kernel analysis."""
        return SSM_INITS[self.kind][0]

    @property
    def is_random_init(self) -> bool:
        """True for either random initialisation ("random" or "random_ssm")."""
        return self.init in RANDOM_INITS
