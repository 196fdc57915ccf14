"""The model configs a checkpoint can hold, and how checkpoints store them.

A checkpoint (``best.pt``, a hub folder's ``config.json``) stores its model config as a dict:
``{"type": class name, **fields}``. :func:`model_config_from_dict` rebuilds it; the classes it knows
are :data:`MODEL_CONFIG_TYPES`. This module imports the config modules; none of them imports it.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from .compat import LATER_MODEL_FIELDS, OLD_CONFIG_NAMES, RETIRED_FIELDS, without_later_fields
from .config import TransformerConfig
from .config_base import ModelConfigBase
from .free_conv_config import FreeConvConfig
from .layer_config import LayerConfig
from .mixer_config import MIXER_CONFIGS
from .sgconv_config import SGConvConfig
from .ssm_config import SSMConfig

# every model config derives from ModelConfigBase; the classes a checkpoint can name:
ModelConfigType = ModelConfigBase
MODEL_CONFIG_TYPES: tuple[type, ...] = (TransformerConfig, SSMConfig, SGConvConfig, FreeConvConfig,
                                        LayerConfig, *MIXER_CONFIGS)



def model_config_to_dict(cfg: ModelConfigType) -> dict:
    """{"type": class name, **fields}: how checkpoints store a model config. Fields of
    LATER_MODEL_FIELDS at their listed value are left out (see there)."""
    fields = without_later_fields(dataclasses.asdict(cfg), LATER_MODEL_FIELDS)
    return {"type": type(cfg).__name__, **fields}


class ModelConfigError(ValueError):
    """A stored model config this spt cannot rebuild: an unknown type, a field its class does not
    have, a missing or invalid value. The message names the file (when known) and the fix."""


def _written_by(provenance: Optional[dict]) -> str:
    from .provenance import describe

    return describe(provenance) if provenance else "another spt version"


def model_config_from_dict(d: dict, where=None, written_by: Optional[dict] = None) -> ModelConfigType:
    """Inverse of :func:`model_config_to_dict`. A dict with ``"type": "ModelConfig"`` or no
    "type" at all (checkpoints written by earlier versions) is a TransformerConfig; a dict without
    a field of LATER_MODEL_FIELDS holds its listed value (a dict without "head" has head "mlp").

    where : the file the dict was read from (a checkpoint, a hub config.json), named by the
        :class:`ModelConfigError` of a dict this spt cannot rebuild; written_by : that file's
        provenance record (:mod:`spt.provenance`), to say which spt wrote it.
    """
    from . import __version__

    d = {k: v for k, v in d.items() if k not in RETIRED_FIELDS}
    name = d.pop("type", "TransformerConfig")
    name = OLD_CONFIG_NAMES.get(name, name)
    src = f"{where}: its model config" if where is not None else "the model config"
    by = (f"the file was written by {_written_by(written_by)} or edited by hand, and this is spt "
          f"{__version__}")
    cls = next((c for c in MODEL_CONFIG_TYPES if c.__name__ == name), None)
    if cls is None:
        raise ModelConfigError(
            f"{src} has the unknown type {name!r}; known: {[c.__name__ for c in MODEL_CONFIG_TYPES]} "
            f"({by}). Load it with the spt version that wrote it, or set its \"type\" to one of "
            f"those")
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    stray = sorted(set(d) - names)
    if stray:
        raise ModelConfigError(
            f"{src} ({name}) has the field(s) {stray}, which {name} does not have; its fields: "
            f"{sorted(names)} ({by}). Load it with the spt version that wrote it, or remove those "
            f"fields from its model_config")
    later = {k: v for k, v in LATER_MODEL_FIELDS.items() if k in names}
    try:
        return cls(**{**later, **d})
    except (TypeError, ValueError) as e:  # a required field missing, a value out of range
        if where is None:
            raise
        raise ModelConfigError(f"{src} ({name}) cannot be built: {e}") from None
