"""Frozen configuration dataclasses: the schema of every run.

Every run of ``spt`` is described by three objects:

* :class:`TransformerConfig` - the architecture (width, depth, positions, causal or not, pooling);
  a state-space model takes an :class:`~spt.ssm_config.SSMConfig` instead.
* :class:`ObjectiveConfig`   - the self-pretraining objective (masked or causal denoising, loss).
* :class:`TrainConfig`       - optimisation (lr, batch size, schedule, epochs, early stopping).

The paper's settings built from these (Table 4's Transformer rows and the rest) live in
:mod:`spt.paper`. All configs are plain frozen dataclasses: change a field with :func:`replace`.

The modules depend one way: :mod:`spt.ssm_config` (SSMConfig) imports this one,
and :mod:`spt.model_config` (how checkpoints store either model config) imports both.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Optional, Union

from .compat import LATER_TRAIN_FIELDS  # noqa: F401  (public here: the TrainConfig fields files may lack)
from .config_base import (  # noqa: F401  (Head, Pooling, ModelConfigBase: public here too)
    Head,
    ModelConfigBase,
    Pooling,
    _check_choice,
    _check_positive,
    check_fields,
    check_finite,
    execution_fields,
    rule,
)

Positions = Literal["sinusoidal", "learned", "rotary", "alibi", "none"]
ObjectiveKind = Literal["masked", "causal"]
LossKind = Literal["ce", "l1"]
Schedule = Literal["cosine", "constant", "rsqrt", "plateau", "multistep"]
WdGroups = Literal["matrices", "all"]


@dataclass(frozen=True, kw_only=True)
class TransformerConfig(ModelConfigBase):
    """A pre-LayerNorm Transformer encoder.

    d_model, n_layers, n_heads, d_ff : sizes (Table 4 "Features", "Depth", "Num Attn. Heads", "FF size").
    positions   : "sinusoidal" | "learned" | "rotary" | "alibi" | "none". "sinusoidal" and "learned"
                  add a table to the inputs; "rotary" rotates q and k in every layer; "alibi"
                  (Press, Smith & Lewis, "Train Short, Test Long: Attention with Linear Biases",
                  ICLR 2022) adds nothing to the inputs and instead adds the fixed bias
                  -m_h |i - j| to head h's scaled scores in every layer, in its symmetric form
                  for bidirectional models (causal ones see j <= i: the paper's -m_h (i - j)).
                  Slopes m_h = 2^(-8 (h + 1) / n_heads), h = 0..n_heads-1: the paper's for
                  n_heads a power of two, the same formula otherwise (the paper's code fills in
                  slopes from the next power of two there). Fixed, not learned: no parameters. A
                  locality prior: near keys start out favoured (spt.models.positions.alibi_bias).
    locality_bias : add ALiBi's bias -m_h |i - j| (the slopes above) to every head's scores on top
                  of the model's own positions (which Press et al. drop): a locality prior that
                  keeps where each input is. With positions="alibi" it is already there (error).
    dropout     : on the embeddings, after attention and in the feed-forward block (0.1).
    attn_dropout : on the attention weights.
    max_len     : longest sequence the position table supports (sinusoidal / learned); 4096.
    causal, pooling, head : as every model config's (:class:`~spt.config_base.ModelConfigBase`).
    local_block : None for full attention; W for neighbour-block local attention (the sequence is
                  cut into blocks of W tokens, each block attends to itself and its neighbours).
    reach       : None for attention over the whole sequence; w caps each layer's attention at
                  keys at most w positions away (|i - j| <= w): the range probe's attention window
                  (spt.analysis.range_probe). A stack of n such layers relates inputs at most
                  2 n w positions apart (n w when causal).
    How attention computes (torch's SDPA, flash-attn, FlexAttention, a dense mask) is not part of
    the model: it is the attention module's path (:mod:`spt.kernels.paths`), chosen by
    ``TrainConfig.paths``.
    """

    family: ClassVar[str] = "transformer"
    smoke_shape: ClassVar[dict] = {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64}

    n_layers: int = 3
    dropout: float = 0.1
    max_len: int = 4096
    n_heads: int = 4
    d_ff: int = 128
    attn_dropout: float = 0.0
    positions: Positions = "sinusoidal"
    local_block: Optional[int] = None
    reach: Optional[int] = None
    locality_bias: bool = False

    def check(self):
        c = "TransformerConfig"
        for name in ("n_heads", "d_ff"):
            _check_positive(c, name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"{c}.d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.positions == "rotary" and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"{c}: rotary positions need an even head size, got "
                             f"d_model/n_heads = {self.d_model // self.n_heads}")
        _check_choice(c, "positions", self.positions, Positions.__args__)
        if not 0.0 <= self.attn_dropout < 1.0:
            raise ValueError(f"{c}.attn_dropout must be in [0, 1), got {self.attn_dropout!r}")
        if self.local_block is not None:
            _check_positive(c, "local_block", self.local_block)
        if self.reach is not None:
            _check_positive(c, "reach", self.reach, allow_zero=True)
        if self.locality_bias and self.positions == "alibi":
            raise ValueError(f"{c}: locality_bias=True adds ALiBi's bias on top of the positions; "
                             f"positions='alibi' has it already: set one of them")

    @property
    def name(self) -> str:
        return "transformer"

    @property
    def width_multiple(self) -> int:
        """Heads split the width."""
        return self.n_heads

    def resize(self, d_model: int) -> "TransformerConfig":
        """At width d_model, the feed-forward width scaled by the same factor."""
        return replace(self, d_model=d_model, d_ff=d_model * self.d_ff // self.d_model)


@dataclass(frozen=True)
class ObjectiveConfig:
    """Self-pretraining objective.

    kind       : "masked" (bidirectional models) or "causal" (next-token, unidirectional models).
    mask_ratio : fraction of (non-padding) positions masked; the paper uses 0.5 for visual tasks,
                 0.15 for text, 0.1 for ListOps, 0.25 for Speech Commands / BIDMC.
    loss       : "ce" for token inputs, "l1" for continuous inputs (pixels, audio).
    """

    kind: ObjectiveKind = "masked"
    mask_ratio: float = 0.5
    loss: LossKind = "l1"

    def __post_init__(self):
        c = "ObjectiveConfig"
        check_finite(self)
        _check_choice(c, "kind", self.kind, ObjectiveKind.__args__)
        _check_choice(c, "loss", self.loss, LossKind.__args__)
        if self.kind == "masked" and not 0.0 < self.mask_ratio < 1.0:
            raise ValueError(f"{c}.mask_ratio must be in (0, 1), got {self.mask_ratio}")


# the largest TrainConfig.seed: per-epoch seeds (seed * 100003 + epoch) stay within int64
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings shared by pretrain(), finetune() and train_from_scratch().

    epochs        : maximum number of epochs (the paper: at most 200).
    max_steps     : optional cap on optimiser steps (fixed pretraining budgets, Fig. 3).
    max_time      : optional wall-clock budget of the stage, in seconds of training time (the
                    paper: 200 epochs or 24 h, whichever comes first: epochs=200,
                    max_time=24 * 3600). See "Time budget" below.
    patience      : stop after this many epochs without a better validation score, counted at
                    full-epoch validations (None: never). Epochs that end before the warmup has
                    ended (optimiser steps at the end of the epoch < warmup_steps) are never
                    counted, so a long warmup, whose rising lr can make validation worse for a
                    while, cannot stop a run before it has trained at its full lr (they still
                    update best.pt). With warmup_steps=0, or a warmup that ends within the first
                    validated epoch, every epoch counts.
    eval_every    : validate (and write the resumable checkpoint) every this many epochs, and
                    after the last epoch of the run; the history's train metrics cover the epochs
                    since the previous validation. With a small model on a few hundred examples,
                    validation can cost a third of an epoch: eval_every=2 or 4 saves most of it,
                    at the price of picking best.pt among fewer epochs. patience still counts
                    epochs (eval_every=4, patience=100: the first validation at least 100 epochs
                    after the best).
    select        : the validation metric that picks best.pt: "loss" (lower is better),
                    "accuracy" or "r2" (higher is better); None: the objective's own choice
                    (supervised: accuracy, or r2 for regression; denoising: loss). The paper
                    (App. C.1) selects pretraining checkpoints on accuracy for CE and R2 for L1.
                    The objective must report the metric on validation (denoising reports
                    accuracy for CE, r2 for L1), else fit() stops with an error naming what it
                    reports. The history's attrs["select"] records the metric used.
    weight_decay  : AdamW's decoupled weight decay of the parameters `wd_groups` names.
    wd_groups     : which parameters without an optimiser hint get weight_decay (a hint,
                    ``p._optim = {"weight_decay": ...}``, always wins): "matrices": those with
                    ndim >= 2 (weights, embedding tables), not biases and norm scales (the usual
                    Transformer rule); "all": every one, biases and norm scales too, as the
                    authors' train.py does (every parameter without an ``_optim`` hint goes into
                    AdamW with the config's weight decay).
    warmup_steps  : linear warmup, lr * (step + 1) / warmup_steps at optimiser step `step`
                    (0-based), from lr / warmup_steps to lr; then `schedule` (below).
    schedule      : "cosine": to 0 at the last step of min(epochs * steps_per_epoch, max_steps),
                    or over schedule_steps (below);
                    "constant": lr after warmup; "rsqrt": lr * sqrt(warmup_steps / (step + 1))
                    after warmup (needs warmup_steps >= 1; keeps annealing without knowing where
                    the run ends); "plateau": lr after warmup, multiplied by plateau_factor each
                    time validation stops improving (below); "multistep": lr after warmup,
                    multiplied by lr_gamma at each epoch of lr_milestones (below).
    schedule_steps : the cosine's length in optimiser steps (schedule="cosine" only). None: the
                    run's step cap, as above (lr 0 from the cap on). A number S: after the warmup,
                    lr * 0.5 * (1 + cos(pi * (step - warmup_steps) / max(1, S - warmup_steps))),
                    the lr lambda of transformers' get_cosine_schedule_with_warmup (num_cycles
                    0.5), which the authors' configs use with a fixed step count (e.g. 50,000 for
                    S4 on Text) whatever the run's length: 0 at step S and, since the cosine is
                    periodic, rising again after S. The warmup stays spt's, (step + 1) /
                    warmup_steps, where transformers' is step / warmup_steps (lr 0 at step 0).
    plateau_patience, plateau_factor : schedule="plateau": torch's ReduceLROnPlateau as
                    PyTorch Lightning drives it once per validation epoch (the authors' code and
                    state-spaces/s4's LRA configs: factor 0.2, min_lr 0, threshold 1e-4 in torch's
                    "rel" mode, no cooldown). After every full validation (not the partial epoch
                    of a run stopped by max_time) the selection metric (`select`, above, with its
                    direction) is compared with the best so far: better means > best * (1 + 1e-4)
                    for accuracy and r2, < best * (1 - 1e-4) for loss. A validation that is not
                    better counts one; when the count exceeds plateau_patience the lr is multiplied
                    by plateau_factor and the count restarts. The warmup still applies (lr x
                    warmup factor x plateau scale); a reduced lr is used from the next optimiser
                    step on, and the history's lr column shows it. The count is in validations:
                    with eval_every=k, one validation covers k epochs. Torch also skips a
                    reduction that would change an lr by less than 1e-8; spt has no such floor
                    (a difference only for lrs below ~1.25e-8). The state (best, count, scale)
                    is saved in last.pt, so a resumed run reduces the lr where an uninterrupted
                    one does.
    lr_milestones, lr_gamma : schedule="multistep": torch's MultiStepLR stepped once per epoch, as
                    the authors' BIDMC configs use it (milestones 100, 200, 300, 400, 500, gamma
                    0.5): during epoch e (0-based) the lr is lr x gamma^(milestones <= e), after
                    the warmup factor. Milestones are epochs, increasing and >= 1.
    accum_steps   : gradient accumulation; the optimiser sees batch_size * accum_steps examples.
    augment       : train on the task's label-preserving augmentation (:mod:`spt.data.augment`:
                    ListOps operand shuffles, AutoAugment-style image ops, flipped and turned
                    Pathfinder images), drawn afresh for every (seed, epoch, example); validation
                    and test read the data as it is. One of Miralles-Gonzalez et al. (2025)'s
                    techniques against data inefficiency. A task without one is an error.
    aux_denoise   : weight of a denoising loss trained beside the labels (supervised stages only:
                    finetune, train_from_scratch): the classifier reads a corrupted input and a
                    second per-position head reconstructs the original (:mod:`spt.train.joint`;
                    Miralles-Gonzalez et al. 2025's other technique, weight 1 in their code).
                    0: off.
    ckpt_every    : also write the resumable checkpoint every this many optimiser steps
                    (it is always written at each validation).
    amp           : bf16 autocast when running on CUDA (ignored on CPU).
    compile       : wrap the training forward in ``torch.compile`` (opt-in; pays a compile time
                    up front and recompiles for new padded lengths).
    grad_checkpointing : recompute each block's activations in the backward pass (activation
                    checkpointing): less memory for long inputs, ~1/3 more compute, same gradients.
    paths         : how the model's modules compute and how the training step runs
                    (:mod:`spt.kernels.paths`; results agree up to float rounding). "auto" (the
                    default): for every module with more than one path, each candidate is timed at
                    the run's own shapes and dtype on its device and checked against the module's
                    reference, and the fastest that agrees is kept; then the step itself, eager or
                    over static buffers ("graphs": captured into CUDA graphs on CUDA), on the real
                    model and batch. Choices are cached per device, library versions and shape
                    (:mod:`spt.train.paths`), recorded in the checkpoints and kept by a resumed
                    run; measuring stops at a few percent of the run's projected time.
                    "reference": every module's reference and the eager step, nothing measured. A
                    mapping {kind or module name: path} pins those (``{"fft_conv": "manual",
                    "step": "graphs"}``) and measures the rest, or takes their references
                    with ``"others": "reference"``. Not with compile or
                    grad_checkpointing: "graphs" (captured steps run the eager forward).
    num_workers, pin_memory, prefetch_factor : DataLoader workers; pinned host memory (CUDA
                    only) and batches prefetched per worker (used when num_workers > 0).
    log_every     : write the live training curves (loss, lr, gradient norm, tokens/s, peak
                    memory) every this many optimiser steps; 0: none. Where they go (TensorBoard
                    event files in the run folder by default; SPT_CURVES): :mod:`spt.train.curves`.
    distributed   : under ``torchrun``: "ddp" (replicated model) or "fsdp" (sharded parameters,
                    gradients and optimiser state, for models that do not fit one device). The
                    global batch is ``batch_size`` whatever the number of ranks.

    Time budget (max_time). Training time is the time spent in fit()'s training loop (steps,
    validation, checkpoint writes; not the setup before it nor the final test evaluation), summed
    over every resume of the run: last.pt stores the time spent up to its save, so a killed run
    resumed with resume=True counts on from there (steps redone after a kill count once, in the
    run that keeps them). The budget is checked after every optimiser step and before every epoch;
    once it has run out the run stops after that step (at least one step is always taken): it
    evaluates validation on the partial epoch (best.pt is replaced if that is better; the history
    row of a partial epoch has a fractional epoch, epochs completed, e.g. 1.75), writes last.pt
    marked ``stopped_by="max_time"``, and returns its result like any run (best weights loaded,
    test evaluated, ``RunResult.stopped_by == "max_time"``). Resumed with the same budget it
    returns that result without training; resumed with a larger max_time (or None) it goes on from
    the step where it stopped, inside the same epoch. A resumed run (after a kill, or with a larger
    budget) ends with the weights of an uninterrupted run with the same budget whenever both stop
    at the same step: exactly so when the clock advances with the steps, as in the tests
    (``fit(..., clock=...)``); with a wall clock the stopping step varies from run to run anyway.
    A run stopped and then extended has one more validation row (its partial epoch) and so one
    more candidate for best.pt; patience counts full-epoch evaluations only, so that extra row
    does not move an early stop. Under torchrun the ranks agree on stopping every 10 steps (one
    collective), so a distributed run may overrun its budget by up to 9 steps. max_time may change
    when resuming; the other fields that change results may not.

    Schedules under a time budget. The cosine cannot know where the clock will cut a run: it
    spans min(epochs * steps_per_epoch, max_steps) steps (or schedule_steps), so a run stopped by
    max_time ends before the end of its cosine, at a learning rate above 0 (as in the paper's
    budgeted runs). For a fully annealed budgeted run, measure the throughput and set max_steps
    (or schedule_steps) to the steps that fit the budget, or use schedule="rsqrt", which decays
    without an end point, or "plateau", which decays when validation stops improving.
    """

    # the metrics `select` may name, and whether higher values are better
    SELECT_METRICS = {"loss": False, "accuracy": True, "r2": True}

    lr: float = field(default=1e-3, metadata=rule("positive"))
    batch_size: int = field(default=32, metadata=rule("positive"))
    weight_decay: float = field(default=0.0, metadata=rule("nonnegative"))
    wd_groups: WdGroups = field(default="matrices", metadata=rule("choice", choices=WdGroups.__args__))
    epochs: int = field(default=20, metadata=rule("positive"))
    max_steps: Optional[int] = field(default=None, metadata=rule("positive"))
    max_time: Optional[float] = field(default=None, metadata=rule("positive"))
    patience: Optional[int] = field(default=None, metadata=rule("positive"))
    eval_every: int = field(default=1, metadata=rule("positive"))
    select: Optional[str] = None
    warmup_steps: int = field(default=0, metadata=rule("nonnegative"))
    schedule: Schedule = field(default="cosine", metadata=rule("choice", choices=Schedule.__args__))
    schedule_steps: Optional[int] = field(default=None, metadata=rule("positive"))
    plateau_patience: int = field(default=10, metadata=rule("nonnegative"))
    plateau_factor: float = 0.2
    lr_milestones: tuple = ()
    lr_gamma: float = 0.1
    grad_clip: Optional[float] = 1.0
    accum_steps: int = field(default=1, metadata=rule("positive"))
    eval_batch_size: Optional[int] = field(default=None, metadata=rule("positive", execution=True))
    ckpt_every: Optional[int] = field(default=None, metadata=rule("positive"))
    seed: int = field(default=0, metadata=rule("nonnegative"))  # masks: (seed, epoch, index)
    device: str = field(default="auto", metadata=rule(execution=True))
    amp: bool = True
    num_workers: int = field(default=0, metadata=rule("nonnegative", execution=True))
    progress: bool = field(default=True, metadata=rule(execution=True))
    betas: tuple = (0.9, 0.98)
    compile: bool = field(default=False, metadata=rule(execution=True))
    grad_checkpointing: bool = field(default=False, metadata=rule(execution=True))
    pin_memory: bool = field(default=True, metadata=rule(execution=True))
    prefetch_factor: int = field(default=4, metadata=rule("positive", execution=True))
    distributed: Literal["ddp", "fsdp"] = field(default="ddp", metadata=rule(
        "choice", execution=True, choices=("ddp", "fsdp")))
    log_every: int = field(default=50, metadata=rule("nonnegative", execution=True))
    augment: bool = False
    aux_denoise: float = field(default=0.0, metadata=rule("nonnegative"))
    paths: Union[str, tuple] = field(default="auto", metadata=rule(execution=True))

    def __post_init__(self):
        c = "TrainConfig"
        check_finite(self)
        check_fields(self)  # each field's rule (its metadata)
        if self.seed > MAX_SEED:  # per-epoch seeds seed * 100003 + epoch must fit torch's int64
            raise ValueError(f"{c}.seed={self.seed} is larger than spt's largest seed {MAX_SEED} "
                             f"(2**32 - 1): give a smaller seed")
        if self.schedule_steps is not None and self.schedule != "cosine":
            raise ValueError(f"{c}.schedule_steps sets the length of the cosine schedule; it "
                             f"means nothing with schedule={self.schedule!r}: use "
                             f"schedule='cosine' or schedule_steps=None")
        if not 0.0 < self.plateau_factor < 1.0:
            raise ValueError(f"{c}.plateau_factor multiplies the lr when validation stops "
                             f"improving: it must be in (0, 1), got {self.plateau_factor!r}")
        milestones = tuple(self.lr_milestones)
        if any(not isinstance(m, int) or isinstance(m, bool) or m < 1 for m in milestones) or \
                list(milestones) != sorted(set(milestones)):
            raise ValueError(f"{c}.lr_milestones must be increasing whole epochs >= 1, got "
                             f"{self.lr_milestones!r}")
        object.__setattr__(self, "lr_milestones", milestones)
        if (self.schedule == "multistep") != bool(milestones):
            raise ValueError(f"{c}: schedule='multistep' needs lr_milestones (epochs), and "
                             f"lr_milestones need schedule='multistep'; got schedule="
                             f"{self.schedule!r}, lr_milestones={self.lr_milestones!r}")
        if not 0.0 < self.lr_gamma <= 1.0:
            raise ValueError(f"{c}.lr_gamma multiplies the lr at each milestone: it must be in "
                             f"(0, 1], got {self.lr_gamma!r}")
        if self.schedule == "rsqrt" and self.warmup_steps < 1:
            raise ValueError(f"{c}.schedule='rsqrt' decays on the time scale of warmup_steps: set "
                             f"warmup_steps >= 1 (got {self.warmup_steps})")
        if self.select is not None:
            _check_choice(c, "select", self.select, tuple(self.SELECT_METRICS))
        from .kernels.paths import check_paths_spec
        object.__setattr__(self, "paths", check_paths_spec(self.paths, f"{c}.paths"))
        pinned = {} if isinstance(self.paths, str) else dict(self.paths)
        if pinned.get("step") == "graphs" and (self.compile or self.grad_checkpointing):
            raise ValueError(f"{c}.paths pins the step to 'graphs', which captures the eager step; "
                             f"it does not combine with compile=True or grad_checkpointing=True")


# TrainConfig fields that say where or how fast a run executes, never what it computes (their rule
# says execution=True): a killed run may resume with other values, and a result computed on a GPU
# is the same study cell on a CPU.
EXECUTION_FIELDS = execution_fields(TrainConfig)


def replace(cfg, **changes):
    """``dataclasses.replace`` that names the config class when a field does not exist."""
    names = {f.name for f in dataclasses.fields(cfg)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise TypeError(f"{type(cfg).__name__} has no field(s) {unknown}; fields are {sorted(names)}")
    return dataclasses.replace(cfg, **changes)


def to_dict(cfg) -> dict:
    """A JSON-friendly dict of a config dataclass (tuples become lists)."""
    return dataclasses.asdict(cfg)
