"""Checkpoint files: atomic writes, and loading a pretrained backbone strictly by name.

A checkpoint is a ``torch.save`` dict with ``format`` = :data:`FORMAT`, the configs as plain dicts
(``model_config``, ``spec``, ``objective``, ``train_config``), ``stage`` ("pretrain", "finetune",
"scratch"), ``model`` (the state dict), and for the resumable ``last.pt`` the optimiser, scheduler,
RNG states, position in the run and the history so far.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import torch

FORMAT = "spt-checkpoint-v1"


def atomic_save(obj, path: Path) -> None:
    """torch.save to a temp file in the same folder, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def load_checkpoint(path) -> dict:
    """A training checkpoint: best.pt (or its run folder), an spt hub folder or repo id
    (spt.hub.export_checkpoint), or a dict already loaded by spt.hub.load_checkpoint."""
    if isinstance(path, dict):
        return path
    p = Path(path)
    if (p.is_dir() and not (p / "best.pt").exists() and (p / "config.json").exists()) or \
            (not p.exists() and _REPO_ID.match(str(path))):
        from ..hub import load_checkpoint as load_hub_checkpoint
        return load_hub_checkpoint(str(path))
    path = Path(path)
    if path.is_dir():
        path = path / "best.pt"
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}; pass the best.pt written by pretrain() "
                                f"or its run folder")
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"{path} is not an spt checkpoint (expected format {FORMAT!r})")
    ckpt["path"] = str(path)
    return ckpt


def load_backbone(model: torch.nn.Module, ckpt: dict) -> None:
    """Copy the checkpoint's ``backbone.*`` weights into ``model.backbone``, strictly.

    Raises ValueError naming every missing, unexpected or mis-shaped parameter.
    """
    prefix = "backbone."
    state = {k[len(prefix):]: v for k, v in ckpt["model"].items() if k.startswith(prefix)}
    own = model.backbone.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
                    for k in set(own) & set(state) if state[k].shape != own[k].shape)
    if missing or unexpected or shapes:
        lines = [f"checkpoint {ckpt.get('path', '?')} does not match this model's backbone:"]
        if missing:
            lines.append(f"  missing in checkpoint: {missing}")
        if unexpected:
            lines.append(f"  not in this model: {unexpected}")
        if shapes:
            lines.append("  shape mismatch: " + "; ".join(shapes))
        lines.append("  build the finetuning model from the checkpoint's own model_config "
                     "(finetune() does this) and the same task.")
        raise ValueError("\n".join(lines))
    model.backbone.load_state_dict(state, strict=True)
