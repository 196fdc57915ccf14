"""Training checkpoints to and from the Hugging Face hub (or a local folder in the hub's layout).

The layout (config.json, model.safetensors, a model card) and ``save_pretrained`` /
``from_pretrained`` / ``push_to_hub`` on every spt model are :mod:`spt.models.hub_mixin`'s::

    model.save_pretrained("ckpt/listops-spt")              # folder; push_to_hub=True also uploads
    model = SequenceModel.from_pretrained("ckpt/listops-spt")   # or a hub repo id "user/name"
    model.push_to_hub("user/listops-spt")

This module moves a training run's ``best.pt`` (:mod:`spt.train.checkpoint`) into that layout and
back::

    export_checkpoint("runs/pt/best.pt", "ckpt/listops-spt")   # pretraining checkpoint -> hub folder
    ckpt = load_checkpoint("ckpt/listops-spt")                # -> the dict finetune() reads
    finetune(task, ckpt, train_cfg, "runs/ft")

Only models built by ``classifier_model`` / ``pretraining_model`` (or loaded from a checkpoint) can
be saved: they carry ``model.hub_config``, the JSON that rebuilds them.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from .config import ObjectiveConfig
from .data.task import TaskSpec
from .model_config import model_config_from_dict
from .models.hub_mixin import (  # noqa: F401  (the hub format, public here too)
    CONFIG_NAME,
    HUB_FORMAT,
    KINDS,
    WEIGHTS_NAME,
    HubMixin,
    NotAnSptCheckpoint,
    check_config,
    hub_config,
    load_weights,
    model_card_text,
    read_config,
    read_weights,
    save_weights,
)
from .models.model import SequenceModel, build_from_config
from .train.checkpoint import load_checkpoint

__all__ = ["export_checkpoint", "load_checkpoint", "load_model", "NotAnSptCheckpoint",
           "build_from_config", "hub_config"]


def load_model(source, *, map_location="cpu", trust_remote_code: bool = False, **hub_kw):
    """The model at `source`: a hub folder or hub repo id (SequenceModel.from_pretrained,
    ``revision=``, ``token=``), a file of a hub folder (its folder is read), or a training run's
    checkpoint file (``runs/pt/best.pt``: the model it holds, as export_checkpoint builds it).

    trust_remote_code : needed (True) when the config names a layer class outside spt, since
    building it imports that module and runs its code.
    """
    text = os.path.expanduser(str(source))
    if os.path.isfile(text):
        if Path(text).name in (CONFIG_NAME, WEIGHTS_NAME):
            text = str(Path(text).parent)  # a file of a hub folder: the folder
        else:  # a training checkpoint (best.pt / last.pt)
            model = model_from_checkpoint(load_checkpoint(text, trust_remote_code=trust_remote_code))
            return model.to(map_location)
    elif not os.path.isdir(text) and _looks_local(text):
        raise FileNotFoundError(f"load_model({str(source)!r}): there is no such file or folder, and "
                                f"it is not a hub repo id (user/name). Check the path")
    if os.path.isdir(text) and not (Path(text) / CONFIG_NAME).is_file():
        check_config(None, text)  # the mixin would only log a warning
    return SequenceModel.from_pretrained(text, map_location=map_location,
                                         trust_remote_code=trust_remote_code, **hub_kw)


def _looks_local(text: str) -> bool:
    """A source that can only be a local path: a hub repo id is ``name`` or ``user/name``."""
    return (text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep != "/" and os.sep in text
            or text.endswith((".pt", ".pth", ".json", ".safetensors")))


def model_from_checkpoint(ckpt: dict):
    """The model a training checkpoint (load_checkpoint's dict) holds, with its hub config: a
    pretraining run's backbone and per-position head, a finetuning / scratch run's classifier."""
    kind = "pretraining" if ckpt.get("stage") == "pretrain" else "classifier"
    objective = ObjectiveConfig(**ckpt["objective"]) if kind == "pretraining" else None
    config = hub_config(kind, model_config_from_dict(ckpt["model_config"]),
                        TaskSpec(**ckpt["spec"]), objective)
    model = build_from_config(config)
    # a run trained with TrainConfig.aux_denoise also holds its denoising head (aux_head.*): a
    # training device, not part of the classifier
    weights = {k: v for k, v in ckpt["model"].items()
               if not (kind == "classifier" and k.startswith("aux_head."))}
    model.load_state_dict(weights, strict=True)
    model.hub_config = config
    return model


def export_checkpoint(checkpoint, out_dir, *, push_to: Optional[str] = None,
                      private: Optional[bool] = None, trust_remote_code: bool = False,
                      overwrite: bool = False) -> Path:
    """Write a training run's best.pt (or its run folder) as a hub folder at `out_dir`.

    A pretraining checkpoint becomes a "pretraining" model (backbone + per-position head), a
    finetuning / scratch one a "classifier". The training stage, epoch, validation metrics and the
    checkpoint's provenance (the code that trained it) go to config.json under "training"; its
    "provenance" is the code that wrote the folder (as for every save_pretrained). push_to : also
    upload the folder to this hub repo id.
    trust_remote_code : needed (True) for a checkpoint whose layer class lives outside spt.
    overwrite : replace the files of an existing, non-empty out_dir (else FileExistsError).
    """
    out = Path(out_dir)
    if out.exists() and not overwrite and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} already exists and is not empty: export_checkpoint writes a "
                              f"new hub folder. Choose another out_dir, or pass overwrite=True to "
                              f"replace its model files")
    ckpt = load_checkpoint(checkpoint, trust_remote_code=trust_remote_code)
    model = model_from_checkpoint(ckpt)
    model.hub_config = {**model.hub_config, "training": {
        "stage": ckpt.get("stage"), "epoch": ckpt.get("epoch"),
        "val_metrics": ckpt.get("val_metrics"), "train_config": ckpt.get("train_config"),
        "pretrained_from": ckpt.get("pretrained_from"), "source": ckpt["path"],
        "provenance": ckpt.get("provenance")}}
    model.save_pretrained(out)
    if push_to:
        model.push_to_hub(push_to, private=private)
    return out
