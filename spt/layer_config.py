"""The config of a stack of any sequence layer, named by its import path (:mod:`spt.models.user_layers`).

A researcher's own layer enters spt's protocol (pretrain, finetune, train_from_scratch, checkpoints,
the hub) through :class:`LayerConfig`: the config stores where the class lives
(``"package.module:ClassName"``) and its constructor's keyword arguments, all of it JSON, so a
checkpoint rebuilds the model in any process that can import that module. spt keeps no registry
of names: the import path is the name.

A plain dataclass with no torch import, so the model-config registry (:mod:`spt.model_config`) can
name it; importing and building the layer happens in :mod:`spt.models.user_layers`.
"""
from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any, Union

from .config_base import ModelConfigBase, TablePositions, _check_bool, _check_choice

# Constructor arguments that come from the config's own fields, never from kwargs.
_RESERVED = ("d_model", "causal")


def layer_path(cls: type) -> str:
    """``"module:QualName"`` of a class: the string :attr:`LayerConfig.layer` stores."""
    if not isinstance(cls, type):
        raise TypeError(f"layer_path needs a class, got {type(cls).__name__} {cls!r}; pass the "
                        f"class itself (MyLayer), not an instance (MyLayer(...))")
    if "<locals>" in cls.__qualname__:
        raise ValueError(f"layer class {cls.__qualname__} is defined inside a function, so no "
                         f"other code can import it by name: define it at the top level of a "
                         f"module")
    return f"{cls.__module__}:{cls.__qualname__}"


def split_layer_path(path: str) -> tuple[str, str]:
    """("package.module", "QualName") of ``"package.module:QualName"`` or of
    ``"package.module.ClassName"`` (the dotted form names a top-level class: its last part)."""
    if not isinstance(path, str):
        raise TypeError(f"LayerConfig.layer must be a class or its import path "
                        f"'package.module:ClassName', got {type(path).__name__} {path!r}")
    module, sep, qual = path.partition(":") if ":" in path else path.rpartition(".")
    ok = (sep and module and qual and ":" not in qual
          and all(p.isidentifier() for p in module.split("."))
          and all(p.isidentifier() for p in qual.split(".")))
    if not ok:
        raise ValueError(f"LayerConfig.layer={path!r} is not an import path: write "
                         f"'package.module:ClassName' (or 'package.module.ClassName'), or pass the "
                         f"class itself")
    return module, qual


class UntrustedLayerError(ValueError):
    """A model config read from a file names a layer class outside spt, and the caller did not
    pass ``trust_remote_code=True``."""


def check_layer_trusted(model_config: dict, source, trust_remote_code: bool) -> None:
    """Refuse to build a layer outside spt that a file names, unless the caller trusts the file.

    A LayerConfig stored in a checkpoint or a hub config.json names its class by import path, and
    building the model imports that module, which runs its code. So a model config read from
    `source` may name a class outside the ``spt`` package only when ``trust_remote_code`` is True
    (the same rule as ``trust_remote_code`` in transformers). Model configs without a layer path
    (Transformer, S4, S4D, DLR) always pass.
    """
    from .compat import current_layer_path

    path = model_config.get("layer") if isinstance(model_config, dict) else None
    if path is None or trust_remote_code:
        return
    module, _ = split_layer_path(current_layer_path(path))
    if module == "spt" or module.startswith("spt."):
        return
    raise UntrustedLayerError(
        f"{source}: its model config names the layer {path!r}, a class outside spt; building it "
        f"would import {module!r} and run its code. spt imports a module named in a file only when "
        f"you say you trust it: if you trust {source}, load it again with trust_remote_code=True")


def _json_value(key: str, v: Any) -> Any:
    """`v` as a JSON value that survives a JSON round trip unchanged (lists become tuples)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        if not math.isfinite(v):
            raise ValueError(f"LayerConfig.kwargs[{key!r}]={v!r}: JSON has no NaN or infinity; "
                             f"give a finite number")
        return float(v)
    if isinstance(v, (list, tuple)):
        return tuple(_json_value(key, x) for x in v)
    raise TypeError(f"LayerConfig.kwargs[{key!r}] is a {type(v).__name__} ({v!r:.60}); values must "
                    f"be JSON: None, bool, int, float, str or lists of them, so that a checkpoint "
                    f"can rebuild the layer. Pass a dict's entries as separate keyword arguments, "
                    f"and build modules or tensors inside the layer's __init__ from plain numbers")


def normalise_kwargs(kwargs) -> tuple[tuple[str, Any], ...]:
    """A dict, or (key, value) pairs (a JSON round trip's list of lists), as a sorted tuple of
    (key, value) pairs with lists turned into tuples: hashable, and equal after a JSON round trip."""
    if kwargs is None:
        return ()
    if isinstance(kwargs, dict):
        items = list(kwargs.items())
    elif isinstance(kwargs, (list, tuple)) and all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in kwargs):
        items = [tuple(p) for p in kwargs]
    else:
        raise TypeError(f"LayerConfig.kwargs must be a dict of constructor keyword arguments (or "
                        f"(key, value) pairs), got {type(kwargs).__name__} {kwargs!r:.80}")
    out: dict[str, Any] = {}
    for key, value in items:
        if not (isinstance(key, str) and key.isidentifier()):
            raise ValueError(f"LayerConfig.kwargs key {key!r} is not a Python identifier, so it "
                             f"cannot be a keyword argument")
        if key in out:
            raise ValueError(f"LayerConfig.kwargs has {key!r} twice")
        if key in _RESERVED:
            raise ValueError(f"LayerConfig.kwargs must not hold {key!r}: set LayerConfig.{key} "
                             f"instead (the stack passes it to the layer itself)")
        out[key] = _json_value(key, value)
    return tuple(sorted(out.items()))


@dataclass(frozen=True, kw_only=True)
class LayerConfig(ModelConfigBase):
    """A stack of n_layers copies of any sequence layer, found by its importable class path.

    layer        : ``"package.module:ClassName"`` (or ``"package.module.ClassName"``), or the class
                   itself, stored as its path (:func:`layer_path`). The class must be importable
                   wherever the config is used: a class defined in a notebook (module ``__main__``)
                   works only in the process that defined it; put it in a module file so that
                   checkpoints load later and elsewhere.
    kwargs       : the layer's constructor keyword arguments, a dict or (key, value) pairs of JSON
                   values; stored as a sorted tuple of pairs, lists as tuples.
    n_layers     : depth: the number of layer instances (each in a pre-norm residual block).
    causal       : True when output t may depend only on inputs <= t (next-token pretraining).
    bidirectional: run every layer as :class:`spt.models.user_layers.Bidirectional` (one causal copy
                   forward, one over the reversed sequence): a causal-only layer (Mamba, S5) then
                   gives a non-causal stack for masked pretraining. Needs causal=False.
    positions    : "none" | "sinusoidal" | "learned": a position table added to the layer stack's
                   input, for layers that do not know where each input is.
    max_len      : longest sequence the position table covers.
    dropout      : on the stack's input and on every layer's output, before the residual sum.
    The other fields (d_model, pooling, head) are every model config's
    (:class:`~spt.config_base.ModelConfigBase`). Every field but `layer` is a keyword argument.

    How the layer is constructed and called is the contract in :mod:`spt.models.user_layers`.
    """

    layer: Union[str, type] = field(kw_only=False)
    kwargs: tuple = ()
    bidirectional: bool = False
    positions: TablePositions = "none"

    @property
    def name(self) -> str:
        """The lower-cased class name of the layer ("module:MyLayer" -> "mylayer")."""
        layer = self.layer if isinstance(self.layer, str) else \
            f"{self.layer.__module__}.{self.layer.__qualname__}"
        return layer.replace(":", ".").rsplit(".", 1)[-1].lower()

    def __post_init__(self):
        layer = self.layer
        if isinstance(layer, type):
            layer = layer_path(layer)
            object.__setattr__(self, "layer", layer)
        module, _ = split_layer_path(layer)
        if module == "__main__":
            warnings.warn(f"LayerConfig.layer={layer!r} lives in __main__ (a notebook or script): "
                          f"only this process can build it, so its checkpoints will not load "
                          f"elsewhere. Move the class to a module file and import it from there.",
                          stacklevel=3)
        object.__setattr__(self, "kwargs", normalise_kwargs(self.kwargs))
        super().__post_init__()

    def check(self):
        c = "LayerConfig"
        _check_bool(c, "bidirectional", self.bidirectional)
        if self.causal and self.bidirectional:
            raise ValueError(f"{c}: bidirectional=True runs each layer in both directions, so the "
                             f"stack cannot be causal: set causal=False (masked pretraining), or "
                             f"bidirectional=False to keep a causal layer causal (next-token "
                             f"pretraining)")
        _check_choice(c, "positions", self.positions, TablePositions.__args__)

    @property
    def layer_kwargs(self) -> dict:
        """kwargs as a dict (list values as tuples): what the layer's constructor receives."""
        return dict(self.kwargs)
