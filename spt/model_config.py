"""The model configs a checkpoint can hold, and how checkpoints store them.

A checkpoint (``best.pt``, a hub folder's ``config.json``) stores its model config as a dict:
``{"type": class name, **fields}``. :func:`model_config_from_dict` rebuilds it; the classes it knows
are :data:`MODEL_CONFIG_TYPES`. This module imports the config modules; none of them imports it.
"""
from __future__ import annotations

import dataclasses
from typing import Union

from .compat import LATER_MODEL_FIELDS, OLD_CONFIG_NAMES, without_later_fields
from .config import TransformerConfig
from .free_conv_config import FreeConvConfig
from .layer_config import LayerConfig
from .mixer_config import MIXER_CONFIGS, GatedDeltaNetConfig, GLAConfig, LRUConfig, Mamba2Config, MambaConfig
from .sgconv_config import SGConvConfig
from .ssm_config import SSMConfig

ModelConfigType = Union[TransformerConfig, SSMConfig, SGConvConfig, FreeConvConfig, LayerConfig,
                        MambaConfig, Mamba2Config, GatedDeltaNetConfig, GLAConfig, LRUConfig]

MODEL_CONFIG_TYPES: tuple[type, ...] = (TransformerConfig, SSMConfig, SGConvConfig, FreeConvConfig,
                                        LayerConfig, *MIXER_CONFIGS)



def model_config_to_dict(cfg: ModelConfigType) -> dict:
    """{"type": class name, **fields}: how checkpoints store a model config. Fields of
    LATER_MODEL_FIELDS at their listed value are left out (see there)."""
    fields = without_later_fields(dataclasses.asdict(cfg), LATER_MODEL_FIELDS)
    return {"type": type(cfg).__name__, **fields}


def model_config_from_dict(d: dict) -> ModelConfigType:
    """Inverse of :func:`model_config_to_dict`. A dict with ``"type": "ModelConfig"`` or no
    "type" at all (checkpoints written by earlier versions) is a TransformerConfig; a dict without
    a field of LATER_MODEL_FIELDS holds its listed value (a dict without "head" has head "mlp")."""
    d = dict(d)
    name = d.pop("type", "TransformerConfig")
    name = OLD_CONFIG_NAMES.get(name, name)
    for cls in MODEL_CONFIG_TYPES:
        if cls.__name__ == name:
            names = {f.name for f in dataclasses.fields(cls)}
            later = {k: v for k, v in LATER_MODEL_FIELDS.items() if k in names}
            return cls(**{**later, **d})
    raise ValueError(f"checkpoint has a model config of unknown type {name!r}; known: "
                     f"{[c.__name__ for c in MODEL_CONFIG_TYPES]}")
