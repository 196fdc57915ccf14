"""The model configs a checkpoint can hold, and how checkpoints store them.

A checkpoint (``best.pt``, a hub folder's ``config.json``) stores its model config as a dict:
``{"type": class name, **fields}``. :func:`model_config_from_dict` rebuilds it; the classes it knows
are :data:`MODEL_CONFIG_TYPES`. This module imports the config modules; none of them imports it.
"""
from __future__ import annotations

import dataclasses
from typing import Union

from .config import TransformerConfig
from .layer_config import LayerConfig
from .sgconv_config import SGConvConfig
from .ssm_config import SSMConfig

ModelConfigType = Union[TransformerConfig, SSMConfig, SGConvConfig, LayerConfig]

MODEL_CONFIG_TYPES: tuple[type, ...] = (TransformerConfig, SSMConfig, SGConvConfig, LayerConfig)

# Names under which earlier versions of spt stored a config type: the Transformer's config was
# called "ModelConfig", and a dict without "type" was one.
_OLD_NAMES = {"ModelConfig": "TransformerConfig"}


def model_config_to_dict(cfg: ModelConfigType) -> dict:
    """{"type": class name, **fields}: how checkpoints store a model config."""
    return {"type": type(cfg).__name__, **dataclasses.asdict(cfg)}


def model_config_from_dict(d: dict) -> ModelConfigType:
    """Inverse of :func:`model_config_to_dict`. A dict with ``"type": "ModelConfig"`` or no
    "type" at all (checkpoints written by earlier versions) is a TransformerConfig."""
    d = dict(d)
    name = d.pop("type", "TransformerConfig")
    name = _OLD_NAMES.get(name, name)
    for cls in MODEL_CONFIG_TYPES:
        if cls.__name__ == name:
            return cls(**d)
    raise ValueError(f"checkpoint has a model config of unknown type {name!r}; known: "
                     f"{[c.__name__ for c in MODEL_CONFIG_TYPES]}")
