"""Checkpoint files: atomic writes, reads that name a damaged file, and loading a pretrained
backbone strictly by name.

A checkpoint is a ``torch.save`` dict with ``format`` = :data:`FORMAT`, the configs as plain dicts
(``model_config``, ``spec``, ``objective``, ``train_config``), ``stage`` ("pretrain", "finetune",
"scratch"), ``model`` (the state dict), and for the resumable ``last.pt`` the optimiser, scheduler,
RNG states, position in the run and the history so far; ``provenance``: the code that wrote it
(spt version and commit, torch, device, host, date: :func:`spt.provenance.current_provenance`).
"""
from __future__ import annotations

import hashlib
import pickle
import re
from pathlib import Path

import torch

from ..atomic import DamagedFileError, atomic_write
from ..layer_config import check_layer_trusted
from ..model_config import model_config_from_dict
from ..models.hub_mixin import NotAnSptCheckpoint
from ..provenance import current_provenance

FORMAT = "spt-checkpoint-v1"


class CheckpointNotFound(FileNotFoundError, NotAnSptCheckpoint):
    """No checkpoint file, run folder, hub folder or hub repo at the given place."""


def digest(obj) -> str:
    """SHA-256 of everything a checkpoint holds: each tensor's dtype, shape and bytes, and every
    other value's repr, in the order a walk of the dicts and lists meets them."""
    h = hashlib.sha256()

    def walk(v):
        if isinstance(v, dict):
            h.update(b"{")
            for k, x in v.items():
                h.update(repr(k).encode())
                walk(x)
            h.update(b"}")
        elif isinstance(v, (list, tuple)):
            h.update(b"[")
            for x in v:
                walk(x)
            h.update(b"]")
        elif isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(v).encode())

    walk(obj)
    return h.hexdigest()


def atomic_save(obj, path: Path) -> None:
    """torch.save `obj` to `path` atomically (temp file, fsync, rename; mode from the umask).
    A dict gets its :func:`digest` under "sha256", which :func:`read_checkpoint` verifies; an spt
    checkpoint (format :data:`FORMAT`) also gets the writer's "provenance"."""
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        obj = {**obj, "provenance": current_provenance()}
    if isinstance(obj, dict):
        obj = {**{k: v for k, v in obj.items() if k != "sha256"}, "sha256": digest(
            {k: v for k, v in obj.items() if k != "sha256"})}
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def read_checkpoint(path) -> dict:
    """A checkpoint file spt wrote, loaded on the CPU without running code from it.

    ``torch.load(weights_only=True)``: tensors, dicts, lists, numbers and strings, what spt writes,
    and nothing that unpickling could run; a file that needs more is refused
    (:class:`UnsafeCheckpointError`). Its "sha256" digest, when it has one (every checkpoint spt
    writes), is checked, so a flipped bit in the payload is found.

    Raises FileNotFoundError if there is no file, and :class:`~spt.atomic.DamagedFileError` naming
    the file for a truncated or corrupt one (torch says "Invalid argument", "failed finding central
    directory" or "Ran out of input"; or the digest does not match), with what to do instead.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except pickle.UnpicklingError as e:
        # torch wraps every failure of its restricted unpickler; a refused object says so
        if any(w in str(e).lower() for w in ("unsupported global", "unsupported operand",
                                             "allowed global", "unsupported class")):
            raise UnsafeCheckpointError(
                f"checkpoint {path} holds objects spt never writes (unpickling them could run "
                f"code): refused. Load only checkpoints spt wrote; if you made this file yourself "
                f"and trust it, read it with torch.load(weights_only=False) and save its dicts and "
                f"tensors again") from None
        raise _damaged(path, e) from None
    except (RuntimeError, EOFError, OSError) as e:
        raise _damaged(path, e) from None
    if isinstance(ck, dict) and "sha256" in ck:
        stored = ck.pop("sha256")
        if digest(ck) != stored:
            raise DamagedFileError(path, f"checkpoint {path} does not match its digest: its "
                                         f"payload changed after spt wrote it (a flipped bit, a "
                                         f"partial copy). "
                                         f"{_DAMAGED_FIX.get(path.name, _DAMAGED_FIX[None])}")
    return ck


class UnsafeCheckpointError(ValueError):
    """A checkpoint file that only a full unpickler (which can run code) could load."""


def _damaged(path: Path, e: BaseException) -> DamagedFileError:
    return DamagedFileError(path, f"checkpoint {path} ({path.stat().st_size} bytes) is truncated "
                                  f"or corrupt ({type(e).__name__}: "
                                  f"{(str(e).splitlines() or ['end of file'])[0][:120]}). "
                                  f"{_DAMAGED_FIX.get(path.name, _DAMAGED_FIX[None])}")


# What to do about a damaged checkpoint, by file name (see spt.train.engine for the two files).
_DAMAGED_FIX = {
    "last.pt": "Delete it and re-run with resume to start that run over; best.pt beside it, if "
               "intact, still holds the best weights so far.",
    "best.pt": "Delete it and last.pt beside it and train that stage again, or load that last.pt "
               "instead (the last epoch's weights, not the best).",
    None: "Delete it and write it again, or use another copy.",
}


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def load_checkpoint(path, *, trust_remote_code: bool = False, **hub_kw) -> dict:
    """A training checkpoint as the dict finetune() reads: a run's best.pt (or its run folder), an
    spt hub folder or repo id (:func:`spt.hub.export_checkpoint`, ``model.save_pretrained``), or a
    dict already loaded by this function (returned as it is). hub_kw (revision, token, ...) go to
    the hub download.

    trust_remote_code : a checkpoint whose model config names a layer class outside spt
        (:class:`~spt.layer_config.LayerConfig`) loads only when True, since building that layer
        imports its module (:func:`~spt.layer_config.check_layer_trusted`); otherwise
        UntrustedLayerError names the file and the layer.

    Keys: format, stage, model_config, spec, objective, model (the state dict), path; from a hub
    folder also hub_config (a classifier's head is included, but finetune() replaces it).
    """
    if isinstance(path, dict):
        return path
    p = Path(path)
    if (p.is_dir() and not (p / "best.pt").exists() and (p / "config.json").exists()) or \
            (not p.exists() and _REPO_ID.match(str(path))):
        return _hub_checkpoint(str(path), trust_remote_code=trust_remote_code, **hub_kw)
    path = Path(path)
    if path.is_dir():
        path = path / "best.pt"
    if not path.exists():
        raise CheckpointNotFound(
            f"no checkpoint at {path}: it is neither a local folder nor a reachable hub repo with "
            f"config.json, nor a checkpoint file. Pass the best.pt written by pretrain() or its run "
            f"folder, a hub folder or a hub repo id")
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"{path} is not an spt checkpoint (expected format {FORMAT!r})")
    check_layer_trusted(ckpt.get("model_config"), path, trust_remote_code)
    if "model_config" in ckpt:  # one this spt cannot rebuild is named here, with the file
        model_config_from_dict(ckpt["model_config"], where=path, written_by=ckpt.get("provenance"))
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


def _hub_checkpoint(source: str, *, trust_remote_code: bool, **hub_kw) -> dict:
    """A hub folder / repo id as a checkpoint dict (see load_checkpoint)."""
    from ..models.hub_mixin import load_weights, read_config
    from ..models.model import build_from_config

    config = read_config(source, **hub_kw)
    check_layer_trusted(config["model_config"], source, trust_remote_code)
    model = build_from_config(config)
    load_weights(model, str(source), **hub_kw)
    training = config.get("training") or {}
    stage = training.get("stage") or ("pretrain" if config["kind"] == "pretraining" else "finetune")
    return {"format": FORMAT, "stage": stage, "model_config": config["model_config"],
            "spec": config["spec"], "objective": config.get("objective"),
            "model": model.state_dict(), "path": str(source), "hub_config": config}
