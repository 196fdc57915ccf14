"""The hub format of spt models: config.json + model.safetensors + a model card, and the mixin
that gives a model ``save_pretrained`` / ``from_pretrained`` / ``push_to_hub``.

A hub folder holds ``config.json`` (how to rebuild the model: its TransformerConfig / SSMConfig, the
TaskSpec, the head kind and, for pretraining models, the ObjectiveConfig; under "provenance" the
code that wrote the folder, :func:`spt.provenance.current_provenance`), ``model.safetensors`` (the
state dict) and ``README.md`` (a model card, which says that provenance too). :class:`HubMixin`
is huggingface_hub's ``PyTorchModelHubMixin`` with spt's config.json; the model class it is mixed
into (:class:`spt.models.model.SequenceModel`) says how to build itself from that config. Moving
training checkpoints to and from this layout is :mod:`spt.hub`'s.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Optional

import torch
from huggingface_hub import ModelCard, PyTorchModelHubMixin

from ..atomic import DamagedFileError, atomic_write
from ..config import ObjectiveConfig, to_dict
from ..data.task import TaskSpec
from ..layer_config import check_layer_trusted
from ..model_config import model_config_from_dict, model_config_to_dict
from ..provenance import current_provenance, describe

HUB_FORMAT = "spt-hub-v1"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
KINDS = ("classifier", "pretraining")
PAPER_URL = "https://arxiv.org/abs/2310.02980"
TAGS = ["spt", "self-pretraining", "long-range-arena"]


class NotAnSptCheckpoint(ValueError):
    """A folder / repo that does not hold an spt model (no config.json, or another format)."""


def hub_config(kind: str, model_cfg, spec: TaskSpec,
               objective: Optional[ObjectiveConfig] = None) -> dict:
    """The JSON that rebuilds a SequenceModel: kind "classifier" or "pretraining"."""
    if kind not in KINDS:
        raise ValueError(f"hub_config: kind must be one of {KINDS}, got {kind!r}")
    return {"format": HUB_FORMAT, "kind": kind, "model_config": model_config_to_dict(model_cfg),
            "spec": dataclasses.asdict(spec),
            "objective": to_dict(objective) if objective is not None else None}


def check_config(config: Optional[dict], where: str) -> dict:
    """`config` if it is an spt hub config; else NotAnSptCheckpoint naming `where` and the fix."""
    if config is None:
        raise NotAnSptCheckpoint(
            f"{where} is not an spt checkpoint: it has no {CONFIG_NAME}. Save a model with "
            f"model.save_pretrained(folder) or export a run with spt.hub.export_checkpoint(best.pt, "
            f"folder).")
    if not isinstance(config, dict) or config.get("format") != HUB_FORMAT:
        fmt = config.get("format") if isinstance(config, dict) else type(config).__name__
        hint = (" (it looks like a transformers model: load it with transformers, or for Pythia "
                "with spt.models.pretrained_lm)" if isinstance(config, dict)
                and "model_type" in config else "")
        raise NotAnSptCheckpoint(f"{where}/{CONFIG_NAME} is not an spt model config: its format is "
                                 f"{fmt!r}, expected {HUB_FORMAT!r}{hint}")
    for key in ("kind", "model_config", "spec"):
        if key not in config:
            raise NotAnSptCheckpoint(f"{where}/{CONFIG_NAME} has no {key!r} field; it was not "
                                     f"written by spt (or is damaged)")
    if config["kind"] not in KINDS:
        raise NotAnSptCheckpoint(f"{where}/{CONFIG_NAME}: kind={config['kind']!r} is not one of "
                                 f"{KINDS}")
    # a model config this spt cannot rebuild is named here, with the file, before anything is built
    model_config_from_dict(config["model_config"], where=f"{where}/{CONFIG_NAME}",
                           written_by=config.get("provenance"))
    return config


def model_card_text(config: Optional[dict]) -> str:
    """The README.md of a saved model: what it is, how to load it, where the method comes from."""
    lines = ["---", "library_name: spt", "tags:"] + [f"- {t}" for t in TAGS] + ["---", ""]
    if config:
        cfg, spec = config["model_config"], config["spec"]
        what = ("per-position pretraining model" if config["kind"] == "pretraining" else
                "dual-encoder classifier (document pairs)" if spec.get("pair") else "classifier")
        lines += [f"# spt {cfg.get('type', 'model')} {what} for task `{spec['name']}`", "",
                  f"- architecture: `{json.dumps(cfg, sort_keys=True)}`",
                  f"- task: {spec.get('description') or spec['name']} (L = {spec['seq_len']}, "
                  f"classes = {spec['num_classes']})"]
        if config.get("objective"):
            lines.append(f"- self-pretraining objective: `{json.dumps(config['objective'])}`")
        train = config.get("training")
        if train:
            lines.append(f"- training: stage {train.get('stage')!r}, epoch {train.get('epoch')}, "
                         f"validation {json.dumps(train.get('val_metrics'))}"
                         + (f", trained with {describe(train['provenance'])}"
                            if train.get("provenance") else ""))
        saved = config.get("provenance")
        if saved:
            lines.append(f"- saved with {describe(saved)}, torch {saved.get('torch')}, on "
                         f"{saved.get('date')}")
    lines += ["", "Load it with", "", "```python",
              "from spt.models.model import SequenceModel",
              "model = SequenceModel.from_pretrained(REPO_OR_FOLDER)",
              "```", "",
              f"Method: Amos, Berant & Gupta, Never Train from Scratch (ICLR 2024), {PAPER_URL}. "
              "Saved with huggingface_hub's PyTorchModelHubMixin."]
    return "\n".join(lines) + "\n"


def _fetch(model_id: str, filename: str, **hub_kw) -> Optional[str]:
    """Local path of `filename` in a folder or hub repo; None if the folder lacks it."""
    if os.path.isdir(model_id):
        p = Path(model_id) / filename
        return str(p) if p.is_file() else None
    from huggingface_hub import hf_hub_download
    return hf_hub_download(repo_id=model_id, filename=filename, **hub_kw)


def read_weights(path, map_location="cpu") -> dict:
    """The state dict in a safetensors file; DamagedFileError naming a truncated / corrupt file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path, device=str(map_location))
    except (SafetensorError, EOFError) as e:
        raise DamagedFileError(path, f"weights file {path} ({Path(path).stat().st_size} bytes) is "
                               f"truncated or corrupt ({e}). Save the model there again "
                               f"(model.save_pretrained / spt.hub.export_checkpoint); for a hub "
                               f"repo, load it with force_download=True to fetch it again."
                               ) from None


def save_weights(model: torch.nn.Module, folder) -> Path:
    """Write `model`'s state dict to ``folder/model.safetensors`` atomically (temp file, fsync,
    rename; mode from the umask), so a crash never leaves a truncated weights file."""
    from safetensors.torch import save_model

    return atomic_write(Path(folder) / WEIGHTS_NAME, lambda tmp: save_model(model, str(tmp)))


def load_weights(model: torch.nn.Module, model_id: str, *, map_location="cpu",
                 strict: bool = True, **hub_kw) -> torch.nn.Module:
    """Load model.safetensors of a folder / repo into `model` (by parameter name)."""
    path = _fetch(model_id, WEIGHTS_NAME, **hub_kw)
    if path is None:
        raise NotAnSptCheckpoint(f"{model_id} has {CONFIG_NAME} but no {WEIGHTS_NAME}: the save "
                                 f"did not finish; save the model again")
    state = read_weights(path, map_location)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if strict and (missing or unexpected):
        raise ValueError(f"{model_id}/{WEIGHTS_NAME} does not match the model its {CONFIG_NAME} "
                         f"describes: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    return model


def read_config(source, **hub_kw) -> dict:
    """The checked config.json of a hub folder or repo id (NotAnSptCheckpoint when there is none)."""
    source = str(source)
    try:
        path = _fetch(source, CONFIG_NAME, **hub_kw)
    except Exception as e:  # offline, no such repo, no such file: say which and why
        if os.path.exists(source):
            raise
        raise NotAnSptCheckpoint(f"{source} is neither a local folder nor a reachable hub repo "
                                 f"with {CONFIG_NAME} ({type(e).__name__}: {e})") from e
    if path is None:
        check_config(None, source)
    with open(path, encoding="utf-8") as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as e:
            raise NotAnSptCheckpoint(f"{path} is not valid JSON ({e})") from None
    return check_config(config, source)


class HubMixin(PyTorchModelHubMixin, library_name="spt", tags=list(TAGS), paper_url=PAPER_URL):
    """``save_pretrained(folder)``, ``push_to_hub(repo_id)`` and ``cls.from_pretrained(folder or
    repo_id)`` for spt models, in the layout of this module's docstring.

    A model saves only if it has ``hub_config`` (:func:`hub_config`; classifier_model and
    pretraining_model set it): config.json is that JSON, so the configs round-trip, and the weights
    go to model.safetensors. Loading rebuilds the model from config.json
    (``cls.build_from_config``, which the model class defines), loads the weights strictly by
    name and returns it in eval mode. A config.json naming a layer class outside spt loads only
    with ``from_pretrained(..., trust_remote_code=True)`` (:func:`spt.layer_config.check_layer_trusted`).
    """

    hub_config: Optional[dict] = None  # how to rebuild this model (see hub_config())

    @classmethod
    def build_from_config(cls, config: dict):
        """A freshly initialised model for a hub config; the model class says how."""
        raise NotImplementedError(f"{cls.__name__} does not say how to build itself from a hub "
                                  f"config")

    def _save_pretrained(self, save_directory) -> None:
        if self.hub_config is None:
            raise ValueError(f"this {type(self).__name__} has no hub_config, so it could not be "
                             f"rebuilt from a saved folder: build it with classifier_model() / "
                             f"pretraining_model() or load it with SequenceModel.from_pretrained()")
        # the code that writes the folder, recorded as results files and checkpoints record it
        config = {**self.hub_config, "provenance": current_provenance()}
        (Path(save_directory) / CONFIG_NAME).write_text(json.dumps(config, sort_keys=True, indent=2))
        save_weights(self, save_directory)  # safetensors itself writes 0600: honour the umask
        # the card of this config (huggingface_hub writes a README.md only where there is none)
        (Path(save_directory) / "README.md").write_text(model_card_text(config))

    @classmethod
    def _from_pretrained(cls, *, model_id: str, revision, cache_dir, force_download,
                         local_files_only, token, config: Optional[dict] = None,
                         map_location: str = "cpu", strict: bool = True,
                         trust_remote_code: bool = False, **model_kwargs):
        if model_kwargs:
            raise TypeError(f"{cls.__name__}.from_pretrained got unexpected arguments "
                            f"{sorted(model_kwargs)}; the architecture comes from {CONFIG_NAME}")
        config = check_config(config, model_id)
        check_layer_trusted(config["model_config"], model_id, trust_remote_code)
        model = cls.build_from_config(config)
        load_weights(model, model_id, map_location=map_location, strict=strict, revision=revision,
                     cache_dir=cache_dir, force_download=force_download,
                     local_files_only=local_files_only, token=token)
        model.hub_config = config
        return model.eval()

    def generate_model_card(self, *args, **kwargs) -> ModelCard:
        return ModelCard(model_card_text(self.hub_config))
