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

# Model-config fields added after checkpoints and result files were first written, with the value
# those files ran with. A config holding that value is stored without the field, so its stored form
# is the one it had before the field existed: a study's result files, a run's last.pt (resuming
# compares stored configs) and hub folders still match the configs that made them. A stored dict
# without the field reads back as holding that value.
LATER_MODEL_FIELDS = {"head": "mlp"}


def model_config_to_dict(cfg: ModelConfigType) -> dict:
    """{"type": class name, **fields}: how checkpoints store a model config. Fields of
    LATER_MODEL_FIELDS at their listed value are left out (see there)."""
    fields = {k: v for k, v in dataclasses.asdict(cfg).items()
              if not (k in LATER_MODEL_FIELDS and v == LATER_MODEL_FIELDS[k])}
    return {"type": type(cfg).__name__, **fields}


def model_config_from_dict(d: dict) -> ModelConfigType:
    """Inverse of :func:`model_config_to_dict`. A dict with ``"type": "ModelConfig"`` or no
    "type" at all (checkpoints written by earlier versions) is a TransformerConfig; a dict without
    a field of LATER_MODEL_FIELDS holds its listed value (a dict without "head" has head "mlp")."""
    d = dict(d)
    name = d.pop("type", "TransformerConfig")
    name = _OLD_NAMES.get(name, name)
    for cls in MODEL_CONFIG_TYPES:
        if cls.__name__ == name:
            names = {f.name for f in dataclasses.fields(cls)}
            later = {k: v for k, v in LATER_MODEL_FIELDS.items() if k in names}
            return cls(**{**later, **d})
    raise ValueError(f"checkpoint has a model config of unknown type {name!r}; known: "
                     f"{[c.__name__ for c in MODEL_CONFIG_TYPES]}")
