"""The base of spt's config dataclasses: the checks every config runs, and the fields every model
config shares.

:class:`ModelConfigBase` holds what every model stack has (width, depth, direction, dropout, the
finetuning head and its pooling, the longest sequence) and checks those fields once;
:class:`ConvBlockConfig` adds the S4 block's frame that the S4 / S4D / DLR, SGConv and free-kernel
stacks share (norm, pre- or post-norm, GLU output). A model config is a frozen, keyword-only
dataclass deriving from one of them: it declares its own fields, overrides a shared field's default
by declaring it again, and checks its own fields in :meth:`ModelConfigBase.check`.

This module imports nothing of spt's; :mod:`spt.config` and the model config modules build on it.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

Pooling = Literal["mean", "max", "last"]
# The classifier after pooling: "mlp" Linear(d, d) -> GELU -> Linear(d, n_out); "linear" one
# Linear(d, n_out) (the paper's authors' `sequence` decoder; see spt.models.heads).
Head = Literal["mlp", "linear"]
# A position table added to a stack's input (the stacks whose layers may not know where each
# input is: today's mixers, your layer); the Transformer has more choices (spt.config.Positions).
TablePositions = Literal["none", "sinusoidal", "learned"]
# The S4 block's norm: LayerNorm, or BatchNorm over real (non-padded) positions.
BlockNorm = Literal["layer", "batch"]


def _check_choice(cls: str, name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{cls}.{name}={value!r} is not one of {list(choices)}")


def _check_positive(cls: str, name: str, value, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not ok:
        raise ValueError(f"{cls}.{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


class NotAWholeNumber(TypeError, ValueError):
    """A config field declared ``int`` given a fraction, a float or a bool (a TypeError by kind, a
    ValueError for the code that checks a config's values)."""


@functools.lru_cache(maxsize=None)
def _int_fields(cls) -> frozenset:
    """The names of `cls`'s fields annotated ``int`` or ``Optional[int]`` (the annotations are
    strings here: ``from __future__ import annotations``)."""
    return frozenset(f.name for f in dataclasses.fields(cls)
                     if str(f.type).replace(" ", "") in ("int", "Optional[int]", "int|None"))


def check_finite(cfg) -> None:
    """Every number of a config dataclass, and every number in its tuple fields (betas,
    lr_milestones), is finite: NaN or infinity is a ValueError naming the field; and every field
    declared ``int`` holds an int (``batch_size=16.5``, ``epochs=1.5``, ``seed=1e30`` are a
    TypeError naming the field, not rounded later or refused deep inside torch). Each config's
    ``__post_init__`` calls it before its own checks (a NaN fails every comparison, so those
    would let it through or stop on it with a message about something else)."""
    ints = _int_fields(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, numbers.Real) and not isinstance(v, bool) and not math.isfinite(v):
                what = "is not" if v is value else f"holds {v!r}, not"
                raise ValueError(f"{type(cfg).__name__}.{f.name}={value!r} {what} a finite number: "
                                 f"give a finite value")
        if f.name in ints and value is not None and (
                isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise NotAWholeNumber(f"{type(cfg).__name__}.{f.name}={value!r} must be a whole "
                                  f"number (an int), got {type(value).__name__}: give e.g. "
                                  f"{f.name}={_whole(value)}")


def rule(check: Optional[str] = None, *, execution: bool = False, choices: tuple = ()) -> dict:
    """A config field's metadata, read by :func:`check_fields` and :func:`execution_fields`.

    check     : what the value must be: "positive" (> 0), "nonnegative" (>= 0), "choice" (one of
                `choices`), or None (the class checks it itself); None is accepted where the
                field is Optional.
    execution : the field says where or how fast a run executes, never what it computes: a
                killed run may resume with another value, and it is not part of a result's
                identity (:mod:`spt.same_run`).
    """
    return {"check": check, "execution": execution, "choices": tuple(choices)}


def check_fields(cfg) -> None:
    """Every field of `cfg` with a :func:`rule` checked by it: a ValueError naming the field."""
    c = type(cfg).__name__
    for f in dataclasses.fields(cfg):
        check, value = f.metadata.get("check"), getattr(cfg, f.name)
        if check is None or (value is None and "Optional" in str(f.type)):
            continue
        if check == "positive":
            _check_positive(c, f.name, value)
        elif check == "nonnegative":
            _check_positive(c, f.name, value, allow_zero=True)
        elif check == "choice":
            _check_choice(c, f.name, value, f.metadata["choices"])
        else:
            raise ValueError(f"{c}.{f.name}: unknown rule {check!r}")


def execution_fields(cls) -> frozenset:
    """The names of `cls`'s fields whose :func:`rule` says execution=True."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get("execution"))


def _whole(value) -> str:
    try:
        return str(int(value)) if abs(value) < 1e9 else "1"
    except (TypeError, ValueError, OverflowError):
        return "1"


def _check_count(cls: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{cls}.{name} must be an int > 0, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{cls}.{name} must be an int > 0, got {value!r}")


def _check_bool(cls: str, name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{cls}.{name} must be True or False, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ModelConfigBase:
    """What every model config has and answers for itself, so that the code that sizes, names and
    groups models (the studies) needs no switch on config types.

    Fields (each model config may declare one again with its own default):

    d_model  : width D; every block maps (B, L, D) -> (B, L, D).
    n_layers : depth, the number of blocks.
    causal   : True: position t sees inputs <= t (next-token pretraining); False: bidirectional.
    dropout  : the stack's dropout probability, in [0, 1) (where it applies: each config says).
    pooling  : how the finetuning head pools the sequence: "mean" | "max" | "last".
    head     : the finetuning head after pooling: "mlp" (Linear(D, D) -> GELU -> Linear(D, n_out))
               or "linear" (one Linear(D, n_out), the authors' S4 / DLR decoder).
    max_len  : the longest sequence the model takes (a position table's length, S4's kernel
               length, a free kernel's number of lags: each config says which).

    Answers:

    name   : the model's name in a study's grid ("transformer", "s4", "mamba", ...): its kind.
    family : "transformer", "ssm" (S4 / S4D / DLR), "conv" (SGConv, free kernel), "mixer"
             (today's mixers) or "layer" (your layer): what a cheap prior or a size rule applies to.
    width_multiple : the widths the config allows are multiples of this.
    resize(d_model) : the config at width d_model, its other sizes following where they are tied
             to the width.
    check() : the config's own checks of its own fields (a ValueError naming the field), run after
             the shared fields are checked.
    smoke_shape : the sizes a smoke run builds it at (its other fields kept).
    counting_form() : the config with the same parameters, built as fast as it can be (for
             counting them).
    departures(task) : one sentence per way the config departs from its authors' layer on `task`
             (today's mixers: :meth:`spt.mixer_config.MixerConfig.departures`); [] for the
             paper's models, whose settings :mod:`spt.studies.machinery.fidelity` compares with
             the paper's.
    """

    family: ClassVar[str] = "layer"
    smoke_shape: ClassVar[dict] = {"d_model": 32, "n_layers": 2}

    d_model: int = 64
    n_layers: int = 2
    causal: bool = False
    dropout: float = 0.0
    pooling: Pooling = "mean"
    head: Head = "mlp"
    max_len: int = 1024

    def __post_init__(self):
        check_finite(self)
        self._check_shared(type(self).__name__)
        self.check()

    def _check_shared(self, c: str) -> None:
        """The checks of the fields this class declares for all its subclasses."""
        for name in ("d_model", "n_layers", "max_len"):
            _check_count(c, name, getattr(self, name))
        _check_bool(c, "causal", self.causal)
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, numbers.Real) \
                or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"{c}.dropout must be in [0, 1), got {self.dropout!r}")
        _check_choice(c, "pooling", self.pooling, Pooling.__args__)
        _check_choice(c, "head", self.head, Head.__args__)

    def check(self) -> None:
        """The config's own checks of its own fields (raise ValueError naming the field)."""

    def departures(self, task: str = "") -> list[str]:
        return []

    def counting_form(self):
        return self

    @property
    def name(self) -> str:
        return self.kind

    @property
    def width_multiple(self) -> int:
        return 1

    def resize(self, d_model: int):
        return dataclasses.replace(self, d_model=d_model)


@dataclass(frozen=True, kw_only=True)
class ConvBlockConfig(ModelConfigBase):
    """The S4 block's frame, shared by the S4 / S4D / DLR, SGConv and free-kernel stacks:
    norm -> convolution over the sequence -> GELU -> linear or GLU output, in a residual block.

    n_layers : 4 by default.
    norm     : "layer" or "batch" (batch statistics over real, non-padded positions).
    prenorm  : normalise inside the residual branch (pre-norm) or after the residual (post-norm).
    glu      : output projection Linear(H, 2H) + GLU (S4's) instead of Linear(H, H).
    positions : always "none" (not a field): the kernel already knows where each input is, so the
               stack adds no position encoding.
    """

    positions: ClassVar[str] = "none"

    n_layers: int = 4
    norm: BlockNorm = "layer"
    prenorm: bool = True
    glu: bool = True

    def _check_shared(self, c: str) -> None:
        super()._check_shared(c)
        _check_choice(c, "norm", self.norm, BlockNorm.__args__)
        for name in ("prenorm", "glu"):
            _check_bool(c, name, getattr(self, name))
