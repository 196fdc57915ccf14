"""Any sequence layer as an spt layer stack: ``LayerConfig(layer="my_pkg.layers:MyMixer", ...)``.

The contract a user's layer class meets::

    class MyMixer(nn.Module):
        def __init__(self, d_model, causal=False, **my_options): ...
        def forward(self, x, valid=None):      # x (B, L, d_model); valid (B, L) bool or None
            return y                            # (B, L, d_model)

* **construction**: ``cls(cfg.d_model, **cfg.kwargs)``, plus ``causal=...`` when ``__init__`` has a
  parameter named ``causal`` (True for both copies of a :class:`Bidirectional` layer, else
  ``cfg.causal``). Every one of the n_layers blocks gets its own instance.
* **forward**: ``layer(x, valid=valid)`` when ``forward`` has a parameter named ``valid``, else
  ``layer(x)``; it returns one tensor of x's shape (checked on every call, cheaply).
* **causality**: an instance may say what it is with a bool attribute ``causal``; one that
  contradicts the config (a non-causal layer in a causal stack, a causal one where the config asks
  for a bidirectional stack) is an error at build time. A layer without the attribute is trusted:
  :func:`check_causal` tests one empirically.
* **optimiser hints**: a parameter may carry ``p._optim = {"lr": ..., "weight_decay": ...}``
  (:mod:`spt.train.optim`), e.g. no weight decay on a state matrix.

What spt adds around each instance (:class:`LayerStack`): a pre-norm residual block
``x + Dropout(layer(Zero_pads(LayerNorm(x))))``, and a final LayerNorm after the last block.

Padding (right padding, ``valid`` False at the end of a row): the input a layer sees has its padded
positions zeroed, so pad *values* never reach it. For a causal layer that is enough: real
positions come before the pads and never see them. A non-causal layer still sees zeros at the
padded positions; one whose output at a real position must not depend on how much padding
follows (a mean over the sequence, an attention without a mask) has to honour ``valid`` itself.

A causal-only layer (Mamba, S5, a causal convolution) becomes bidirectional with
``LayerConfig(bidirectional=True)``: :class:`Bidirectional` runs one copy forward and a second
copy over each row reversed within its valid length (:func:`reverse_valid`), and sums the two, so
masked self-pretraining works with it.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Callable, Optional

import torch
import torch.nn as nn

from ..compat import current_layer_path
from ..layer_config import LayerConfig, split_layer_path
from .dropout import Dropout
from .stack import NormedStack


def import_layer(path: str) -> type:
    """The nn.Module subclass at ``"package.module:QualName"`` (or ``"package.module.ClassName"``),
    with errors that say which part is missing and what to do. A path into an spt module that was
    since renamed reads as the current one (:data:`spt.compat.OLD_LAYER_PATHS`)."""
    module_name, qualname = split_layer_path(current_layer_path(path))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise ImportError(
                f"layer {path!r}: no module named {module_name!r} can be imported here. Install "
                f"the package that holds it, or put its folder on sys.path / PYTHONPATH (for a "
                f"module of your project, run from the folder that holds it)") from e
        raise ImportError(f"layer {path!r}: importing {module_name!r} failed because it needs "
                          f"{e.name!r}, which is not installed ({e})") from e
    obj = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            if module_name == "__main__":
                raise ImportError(
                    f"layer {path!r}: this process has no class {qualname!r} in __main__. A layer "
                    f"defined in a notebook or script exists only in the process that ran that "
                    f"definition; move the class to a module file (e.g. my_layers.py), import it "
                    f"from there and build the config from that class, so that worker processes "
                    f"and later loads (from_pretrained, finetune of a saved checkpoint) find it")
            raise ImportError(f"layer {path!r}: module {module_name!r} has no attribute "
                              f"{qualname!r}; check the spelling (the format is "
                              f"'package.module:ClassName')")
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        raise TypeError(f"layer {path!r} is a {type(obj).__name__}, not a torch.nn.Module subclass")
    return obj


def _takes(fn, name: str) -> bool:
    """True when callable `fn` has a parameter called `name`."""
    return name in inspect.signature(fn).parameters


def call_layer(layer: nn.Module, x: torch.Tensor, valid: Optional[torch.Tensor],
               takes_valid: bool) -> torch.Tensor:
    """layer(x, valid=valid) or layer(x); checks that the result is a tensor of x's shape."""
    y = layer(x, valid=valid) if takes_valid else layer(x)
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(f"layer {type(layer).__module__}.{type(layer).__qualname__} returned "
                         f"{got} for an input of shape {tuple(x.shape)}: a layer's forward must "
                         f"return one tensor (B, L, d_model) of its input's shape (wrap a layer "
                         f"that returns a tuple and return its first element)")
    return y


def reverse_index(valid: torch.Tensor) -> torch.Tensor:
    """(B, L) long: for each row, the source position of every position when the row's valid
    positions are reversed among themselves and padded positions stay in place. For right padding
    (valid = the first n_b positions) that is n_b - 1 - t for t < n_b and t after. No host sync."""
    B, L = valid.shape
    pos = torch.arange(L, device=valid.device).expand(B, L)
    rank = valid.long().cumsum(1) - 1                                # rank among the row's valid
    n = valid.long().sum(1, keepdim=True)
    slot = torch.where(valid, rank, L)                               # pads go to a spare column
    pos_of_rank = torch.zeros(B, L + 1, dtype=torch.long, device=valid.device)
    pos_of_rank.scatter_(1, slot, pos)
    src = pos_of_rank.gather(1, (n - 1 - rank).clamp(min=0))
    return torch.where(valid, src, pos)


def reverse_valid(x: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
    """x (B, L, ...) with each row's valid positions in reverse order and padded positions where
    they were (right padding stays at the end). valid (B, L) bool, or None: reverse whole rows.
    Its own inverse."""
    if valid is None:
        return x.flip(1)
    idx = reverse_index(valid)
    idx = idx.reshape(idx.shape + (1,) * (x.dim() - 2)).expand_as(x)
    return x.gather(1, idx)


class Bidirectional(nn.Module):
    """A non-causal layer made of two causal ones. forward(x (B, L, D), valid) -> (B, L, D).

    y = fwd(x) + R(bwd(R(x))), with R = :func:`reverse_valid`: fwd sees positions <= t, bwd
    (over the reversed rows) positions >= t. The two are summed, not concatenated and projected by
    a Linear(2D, D): each direction's output already ends in the layer's own output projection, so
    a linear map of the concatenation adds parameters that those projections can already express.
    Both copies are checked to be causal when they have a ``causal`` attribute: a non-causal copy
    would make the wrapper see every position twice.
    """

    causal = False

    def __init__(self, forward_layer: nn.Module, backward_layer: nn.Module):
        super().__init__()
        for layer in (forward_layer, backward_layer):
            if getattr(layer, "causal", True) is not True:
                raise ValueError(f"Bidirectional needs causal layers, but "
                                 f"{type(layer).__qualname__}.causal is {layer.causal!r}; a layer "
                                 f"that already sees both directions needs no wrapper "
                                 f"(LayerConfig(bidirectional=False))")
        self.fwd, self.bwd = forward_layer, backward_layer
        self._valid = (_takes(forward_layer.forward, "valid"), _takes(backward_layer.forward, "valid"))

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        y = call_layer(self.fwd, x, valid, self._valid[0])
        back = call_layer(self.bwd, reverse_valid(x, valid), valid, self._valid[1])
        return y + reverse_valid(back, valid)


def build_layer(cls: type, cfg: LayerConfig, causal: bool) -> nn.Module:
    """One instance of `cls` by the module docstring's contract, checked against `causal`."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    kwargs = cfg.layer_kwargs
    if _takes(cls, "causal"):
        kwargs["causal"] = causal
    try:
        layer = cls(cfg.d_model, **kwargs)
    except TypeError as e:
        raise TypeError(f"building layer {name}({cfg.d_model}, **{kwargs}) failed: {e}. The stack "
                        f"calls cls(d_model, **LayerConfig.kwargs) (+ causal= when __init__ has "
                        f"that parameter); check LayerConfig.kwargs against its __init__") from e
    if not isinstance(layer, nn.Module):
        raise TypeError(f"layer {name} built a {type(layer).__name__}, not an nn.Module")
    said = getattr(layer, "causal", None)
    if isinstance(said, bool) and said != causal:
        if cfg.bidirectional:
            fix = ("the Bidirectional wrapper needs a causal layer: set its causal option, or "
                   "LayerConfig(bidirectional=False) if the layer already sees both directions")
        elif said:
            fix = ("LayerConfig.causal=False asks for a bidirectional stack: set "
                   "LayerConfig(bidirectional=True) to run it in both directions (masked "
                   "pretraining), or causal=True (next-token pretraining)")
        else:
            fix = ("LayerConfig.causal=True needs a layer that only looks back: a next-token model "
                   "that sees the token it predicts learns nothing; set causal=False (masked "
                   "pretraining) or make the layer causal")
        raise ValueError(f"layer {name} has causal={said} but the stack needs causal={causal}: {fix}")
    return layer


class LayerBlock(nn.Module):
    """x + Dropout(layer(norm(x) with padded positions zeroed)). (B, L, D) -> (B, L, D).
    norm : builds the norm from the width (nn.LayerNorm unless given)."""

    def __init__(self, layer: nn.Module, d_model: int, dropout: float,
                 norm: Callable[[int], nn.Module] = nn.LayerNorm):
        super().__init__()
        self.norm = norm(d_model)
        self.layer = layer
        self.drop = Dropout(dropout)
        self._takes_valid = _takes(layer.forward, "valid")

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = self.norm(x)
        if valid is not None:
            h = h * valid[..., None].to(h.dtype)
        return x + self.drop(call_layer(self.layer, h, valid, self._takes_valid))


class LayerStack(NormedStack):
    """The layer stack of a :class:`~spt.layer_config.LayerConfig`: n_layers :class:`LayerBlock`
    around instances of the configured class, then a LayerNorm. A Backbone's ``layers``.

    forward(x (B, L, D), valid (B, L) bool or None) -> (B, L, D).
    causal : cfg.causal.
    grad_checkpointing : when True (TrainConfig.grad_checkpointing), training recomputes each
    block in the backward pass instead of storing its activations.
    Parameters: ``blocks.<i>.layer.*`` are the user layer's own (``blocks.<i>.layer.fwd.*`` and
    ``.bwd.*`` with bidirectional=True), ``blocks.<i>.norm.*`` and ``norm.*`` spt's.
    """

    def __init__(self, cfg: LayerConfig):
        cls = import_layer(cfg.layer)

        def make() -> nn.Module:
            if cfg.bidirectional:
                return Bidirectional(build_layer(cls, cfg, True), build_layer(cls, cfg, True))
            return build_layer(cls, cfg, cfg.causal)

        super().__init__((LayerBlock(make(), cfg.d_model, cfg.dropout)
                          for _ in range(cfg.n_layers)), cfg.d_model, cfg.causal)


def check_causal(layer: nn.Module, d_model: int, length: int = 16, t: Optional[int] = None) -> bool:
    """True when `layer`'s output at position t has no gradient from inputs after t (one random
    (1, length, d_model) input, t = length // 2 by default): an empirical test of the ``causal``
    claim of a layer (or a whole stack) built on the CPU. The layer is put in eval mode for it.
    "No gradient" allows rounding: a causal convolution computed by FFT passes ~1e-7 of each
    gradient to later inputs, so the largest gradient after t may be 1e-5 of the largest up to t."""
    t = length // 2 if t is None else t
    was_training = layer.training
    layer.eval()
    try:
        x = torch.randn(1, length, d_model, requires_grad=True)
        y = call_layer(layer, x, None, _takes(layer.forward, "valid"))
        # a random weighting: a plain sum would vanish after a LayerNorm (its outputs sum to 0)
        (y[0, t] * torch.randn(d_model)).sum().backward()
    finally:
        layer.train(was_training)
    g = x.grad[0].abs()
    return bool(g[t + 1:].max() <= 1e-5 * g[:t + 1].max())
