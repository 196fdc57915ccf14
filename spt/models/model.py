"""SequenceModel = backbone (encoder -> positions -> blocks -> norm) + head.

The backbone is what self-pretraining learns and finetuning keeps; the head is what finetuning
replaces. All parameters of the backbone live under ``backbone.`` and all of the head under
``head.``, so a checkpoint's backbone can be loaded strictly by name.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import torch.nn as nn
from huggingface_hub import ModelCard, PyTorchModelHubMixin

from .. import hub as _hub
from ..config import ModelConfig, ObjectiveConfig, SSMConfig
from ..data.task import TaskSpec
from .heads import ClassifierHead, ContinuousEncoder, TokenEncoder, TokenHead
from .positions import AddedPositions
from .ssm import SSMEncoder
from .transformer import TransformerEncoder


def build_layers(cfg) -> nn.Module:
    """The sequence-mixing stack for a model config: (B, L, d), valid (B, L) -> (B, L, d)."""
    if isinstance(cfg, ModelConfig):
        return TransformerEncoder(cfg)
    elif isinstance(cfg, SSMConfig):
        return SSMEncoder(cfg)
    raise TypeError(f"no layer stack for model config of type {type(cfg).__name__}")


class Backbone(nn.Module):
    """inputs (B, L) ids or (B, L, C) values, valid (B, L) bool, masked (B, L) bool -> (B, L, d)."""

    def __init__(self, cfg: ModelConfig, spec: TaskSpec):
        super().__init__()
        self.cfg = cfg
        if spec.is_tokens:
            self.encoder = TokenEncoder(spec.vocab_size, cfg.d_model)
        else:
            self.encoder = ContinuousEncoder(spec.d_input, cfg.d_model)
        self.positions = None
        if getattr(cfg, "positions", "none") in ("sinusoidal", "learned"):
            self.positions = AddedPositions(cfg.max_len, cfg.d_model, cfg.positions == "learned")
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = build_layers(cfg)

    def forward(self, inputs: torch.Tensor, valid: Optional[torch.Tensor] = None,
                masked: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.encoder(inputs, masked)
        if self.positions is not None:
            x = self.positions(x)
        return self.layers(self.drop(x), valid)


class SequenceModel(nn.Module, PyTorchModelHubMixin, library_name="spt", tags=list(_hub.TAGS),
                    paper_url=_hub.PAPER_URL):
    """backbone + head. forward(inputs, valid=None, masked=None) -> head output.

    head output: (B, n_out) for a ClassifierHead, (B, L, n_out) for a TokenHead.

    Hub checkpoints (huggingface_hub's PyTorchModelHubMixin, see :mod:`spt.hub`):
    ``save_pretrained(folder)``, ``push_to_hub(repo_id)``, ``SequenceModel.from_pretrained(folder or
    repo_id)``. They need ``hub_config`` (set by classifier_model / pretraining_model): config.json
    is that JSON, so the configs round-trip; weights go to model.safetensors.
    """

    hub_config: Optional[dict] = None  # how to rebuild this model (spt.hub.hub_config)

    def __init__(self, backbone: nn.Module, head: nn.Module):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, inputs, valid=None, masked=None):
        return self.head(self.backbone(inputs, valid, masked), valid)

    # ------------------------------------------------------------------ hub (PyTorchModelHubMixin)
    def _save_pretrained(self, save_directory) -> None:
        if self.hub_config is None:
            raise ValueError("this SequenceModel has no hub_config, so it could not be rebuilt from "
                             "a saved folder: build it with classifier_model() / pretraining_model()"
                             " or load it with SequenceModel.from_pretrained()")
        (Path(save_directory) / _hub.CONFIG_NAME).write_text(
            json.dumps(self.hub_config, sort_keys=True, indent=2))
        super()._save_pretrained(Path(save_directory))

    @classmethod
    def _from_pretrained(cls, *, model_id: str, revision, cache_dir, force_download,
                         local_files_only, token, config: Optional[dict] = None,
                         map_location: str = "cpu", strict: bool = True, **model_kwargs):
        if model_kwargs:
            raise TypeError(f"SequenceModel.from_pretrained got unexpected arguments "
                            f"{sorted(model_kwargs)}; the architecture comes from config.json")
        config = _hub.check_config(config, model_id)
        model = _hub.build_from_config(config)
        _hub.load_weights(model, model_id, map_location=map_location, strict=strict,
                          revision=revision, cache_dir=cache_dir, force_download=force_download,
                          local_files_only=local_files_only, token=token)
        model.hub_config = config
        return model.eval()

    def generate_model_card(self, *args, **kwargs) -> ModelCard:
        return ModelCard(_hub.model_card_text(self.hub_config))


def classifier_model(cfg: ModelConfig, spec: TaskSpec) -> SequenceModel:
    """A model for finetuning / training from scratch: pooled head with num_classes outputs
    (1 output for regression tasks)."""
    n_out = 1 if spec.is_regression else spec.num_classes
    model = SequenceModel(Backbone(cfg, spec), ClassifierHead(cfg.d_model, n_out, cfg.pooling))
    model.hub_config = _hub.hub_config("classifier", cfg, spec)
    return model


def pretraining_model(cfg: ModelConfig, spec: TaskSpec, objective: ObjectiveConfig) -> SequenceModel:
    """A model for self-pretraining: per-position head over the vocabulary (CE) or values (L1)."""
    if objective.kind == "masked" and cfg.causal:
        raise ValueError("masked pretraining needs a bidirectional model: set ModelConfig.causal="
                         "False, or use ObjectiveConfig(kind='causal')")
    if objective.kind == "causal" and not cfg.causal:
        raise ValueError("causal (next-token) pretraining needs ModelConfig.causal=True; a "
                         "bidirectional model would see the token it predicts")
    if objective.loss == "ce" and not spec.is_tokens:
        raise ValueError(f"task {spec.name!r} has continuous inputs: use ObjectiveConfig(loss='l1')")
    if objective.loss == "l1" and spec.is_tokens:
        raise ValueError(f"task {spec.name!r} has token inputs: use ObjectiveConfig(loss='ce')")
    n_out = spec.vocab_size if spec.is_tokens else spec.d_input
    model = SequenceModel(Backbone(cfg, spec), TokenHead(cfg.d_model, n_out))
    model.hub_config = _hub.hub_config("pretraining", cfg, spec, objective)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
