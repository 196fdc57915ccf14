"""SequenceModel = backbone (input encoder -> positions -> layer stack) + head.

The backbone is what self-pretraining learns and finetuning keeps; the head is what finetuning
replaces. All parameters of the backbone live under ``backbone.`` (``backbone.encoder.*``,
``backbone.positions.*``, ``backbone.layers.*``) and all of the head under ``head.``, so a
checkpoint's backbone can be loaded strictly by name.

The layer stack is the seam between the architectures: any ``nn.Module`` with
``forward(x (B, L, D), valid (B, L) bool or None) -> (B, L, D)`` and a ``causal`` attribute (True
when position t only sees positions <= t) can be a Backbone's ``layers``. :func:`build_layers` makes
the stack of a model config (Transformer, SSM, SGConv, free convolution, a mixer of
:mod:`spt.mixer_config`, or a :class:`~spt.layer_config.LayerConfig` naming any user layer class,
:mod:`spt.models.user_layers`) and :func:`build_backbone` the whole backbone.

Pair tasks (``TaskSpec.pair``, LRA Retrieval) get a :class:`DualEncoderModel`: the same one
backbone encodes each document (shared weights, same parameter names, so a backbone pretrained on
single documents loads into it), each is pooled, and a head classifies [u, v, u*v, u-v].

Saving and loading (``save_pretrained``, ``from_pretrained``, ``push_to_hub``) come from
:class:`spt.models.hub_mixin.HubMixin`; :func:`build_from_config` says how a saved config.json
becomes a model again.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import torch
import torch.nn as nn

from ..compat import upgrade_spec
from ..config import ObjectiveConfig, TransformerConfig
from ..data.task import TaskSpec
from ..free_conv_config import FreeConvConfig
from ..layer_config import LayerConfig
from ..mixer_config import MixerConfig
from ..model_config import ModelConfigType, model_config_from_dict
from ..sgconv_config import SGConvConfig
from ..ssm_config import SSMConfig
from .dropout import Dropout
from .free_conv import FreeConvEncoder
from .heads import ClassifierHead, ContinuousEncoder, PairClassifierHead, TokenEncoder, TokenHead
from .hub_mixin import HubMixin, NotAnSptCheckpoint, hub_config
from .init import apply_init_
from .mixers.stack import MixerStack
from .positions import AddedPositions
from .sgconv import SGConvEncoder
from .ssm import SSMEncoder
from .transformer import TransformerEncoder
from .user_layers import LayerStack

# The layer stack of each kind of model config; a subclass of a key (each mixer config of
# spt.mixer_config) takes its base class's stack.
STACKS: dict[type, type] = {TransformerConfig: TransformerEncoder, SSMConfig: SSMEncoder,
                            SGConvConfig: SGConvEncoder, FreeConvConfig: FreeConvEncoder,
                            LayerConfig: LayerStack, MixerConfig: MixerStack}


def build_layers(cfg: ModelConfigType) -> nn.Module:
    """The layer stack of a model config: (B, L, d), valid (B, L) -> (B, L, d)."""
    for cls in type(cfg).__mro__:
        if cls in STACKS:
            return STACKS[cls](cfg)
    raise TypeError(f"no layer stack for model config of type {type(cfg).__name__}; expected one "
                    f"of {', '.join(c.__name__ for c in STACKS)} (or a subclass), or a LayerConfig "
                    f"naming any layer class of yours by its import path")


def input_encoder(spec: TaskSpec, d_model: int) -> nn.Module:
    """Token ids (B, L) -> (B, L, d) for token tasks; values (B, L, C) + the mask channel ->
    (B, L, d) for continuous ones."""
    if spec.is_tokens:
        return TokenEncoder(spec.vocab_size, d_model)
    return ContinuousEncoder(spec.d_input, d_model)


class Backbone(nn.Module):
    """inputs (B, L) ids or (B, L, C) values, valid (B, L) bool, masked (B, L) bool -> (B, L, d).

    encoder -> (+ positions) -> dropout -> layers.
    encoder   : inputs, masked -> (B, L, d) (:func:`input_encoder`).
    layers    : the layer stack: forward(x (B, L, d), valid (B, L) bool or None) -> (B, L, d), and
                an attribute ``causal`` (see the module docstring).
    positions : None, or a module x (B, L, d) -> x + positions (sinusoidal or learned tables).
    dropout   : dropout probability on the layer stack's input.
    """

    def __init__(self, encoder: nn.Module, layers: nn.Module, *,
                 positions: Optional[nn.Module] = None, dropout: float = 0.0):
        super().__init__()
        if not isinstance(getattr(layers, "causal", None), bool):
            raise TypeError(f"Backbone layers {type(layers).__name__} must say whether they are "
                            f"causal: give the module a bool attribute `causal` (True when "
                            f"position t only sees positions <= t)")
        self.encoder = encoder
        self.positions = positions
        self.drop = Dropout(dropout)
        self.layers = layers

    @property
    def causal(self) -> bool:
        """True when the output at position t depends only on inputs at positions <= t."""
        return self.layers.causal

    def forward(self, inputs: torch.Tensor, valid: Optional[torch.Tensor] = None,
                masked: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.encoder(inputs, masked)
        if self.positions is not None:
            x = self.positions(x)
        return self.layers(self.drop(x), valid)


def build_backbone(cfg: ModelConfigType, spec: TaskSpec) -> Backbone:
    """The backbone of a model config for a task: its input encoder, the position table the config
    asks for (``cfg.positions`` "sinusoidal" or "learned"; rotary and alibi live in the attention,
    SSMs have none) and its layer stack (:func:`build_layers`)."""
    encoder = input_encoder(spec, cfg.d_model)
    positions = None
    if cfg.positions in ("sinusoidal", "learned"):
        positions = AddedPositions(cfg.max_len, cfg.d_model, learned=cfg.positions == "learned")
    return Backbone(encoder, build_layers(cfg), positions=positions, dropout=cfg.dropout)


class SequenceModel(nn.Module, HubMixin):
    """backbone + head. forward(inputs, valid=None, masked=None) -> head output.

    head output: (B, n_out) for a ClassifierHead, (B, L, n_out) for a TokenHead.

    Hub checkpoints (:class:`spt.models.hub_mixin.HubMixin`): ``save_pretrained(folder)``,
    ``push_to_hub(repo_id)``, ``SequenceModel.from_pretrained(folder or repo_id)``. They need
    ``hub_config`` (set by classifier_model / pretraining_model): the JSON that rebuilds the model.
    """

    def __init__(self, backbone: nn.Module, head: nn.Module):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, inputs, valid=None, masked=None):
        return self.head(self.backbone(inputs, valid, masked), valid)

    @classmethod
    def build_from_config(cls, config: dict) -> "SequenceModel":
        return build_from_config(config)


def stack_pair(inputs: torch.Tensor, valid: Optional[torch.Tensor], inputs2: torch.Tensor,
               valid2: Optional[torch.Tensor]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The two documents of a pair batch as one batch for the shared backbone.

    inputs (B, L1) or (B, L1, C), inputs2 (B, L2) or (B, L2, C); valid / valid2 (B, L1) / (B, L2)
    bool or None (no padding). Returns x (2B, L) with L = max(L1, L2), rows 0..B-1 the first
    documents, each padded with zeros (PAD_ID for tokens), and valid (2B, L), or None when neither
    document has padding and L1 == L2.
    """
    if inputs.shape[0] != inputs2.shape[0] or inputs.shape[2:] != inputs2.shape[2:]:
        raise ValueError(f"pair batch: inputs {tuple(inputs.shape)} and inputs2 "
                         f"{tuple(inputs2.shape)} must agree except in length (dim 1)")
    L1, L2 = inputs.shape[1], inputs2.shape[1]
    if L1 == L2 and valid is None and valid2 is None:
        return torch.cat([inputs, inputs2]), None
    L = max(L1, L2)

    def pad(x, v):
        if v is None:
            v = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        extra = L - x.shape[1]
        if extra:
            x = torch.cat([x, x.new_zeros((x.shape[0], extra) + x.shape[2:])], dim=1)
            v = torch.cat([v, v.new_zeros((v.shape[0], extra))], dim=1)
        return x, v

    (x1, v1), (x2, v2) = pad(inputs, valid), pad(inputs2, valid2)
    return torch.cat([x1, x2]), torch.cat([v1, v2])


class DualEncoderModel(SequenceModel):
    """The pair-task classifier (LRA Retrieval): one shared backbone encodes each document.

    forward(inputs (B, L1), valid (B, L1) or None, masked=None, *, inputs2 (B, L2), valid2 (B, L2)
    or None) -> logits (B, n_out). The two documents go through ``self.backbone`` as one batch of
    2B rows (:func:`stack_pair`, as the S4 code batches them), each is pooled over its own real
    positions, and :class:`~spt.models.heads.PairClassifierHead` classifies [u, v, u*v, u-v].
    Parameters are named as in SequenceModel (``backbone.*``, ``head.*``).
    """

    def forward(self, inputs, valid=None, masked=None, *, inputs2=None, valid2=None):
        if inputs2 is None:
            raise ValueError("DualEncoderModel classifies document pairs: pass inputs2 (and "
                             "valid2), the second documents of the batch")
        if masked is not None:
            raise ValueError("DualEncoderModel is a classifier: it takes no `masked` positions "
                             "(self-pretraining uses a single-document pretraining_model)")
        x, v = stack_pair(inputs, valid, inputs2, valid2)
        return self.head(self.backbone(x, v), v)


def classifier_model(cfg: ModelConfigType, spec: TaskSpec) -> SequenceModel:
    """A model for finetuning / training from scratch: pooled head with num_classes outputs
    (1 output for regression tasks). A pair task (spec.pair) gets a :class:`DualEncoderModel`.

    The head pools as ``cfg.pooling`` says and classifies with ``cfg.head``: "mlp" (parameters
    ``head.mlp.*``) or "linear" (``head.linear.*``), see :mod:`spt.models.heads`.
    """
    n_out = 1 if spec.is_regression else spec.num_classes
    if spec.pair:
        model = DualEncoderModel(build_backbone(cfg, spec),
                                 PairClassifierHead(cfg.d_model, n_out, cfg.pooling, cfg.head))
    else:
        model = SequenceModel(build_backbone(cfg, spec),
                              ClassifierHead(cfg.d_model, n_out, cfg.pooling, cfg.head))
    model.hub_config = hub_config("classifier", cfg, spec)
    apply_init_(model, cfg)  # SSMConfig(init='random'): every parameter ~ N(0, 0.1^2)
    return model


class JointModel(SequenceModel):
    """A classifier with a second, per-position head on the same backbone output, for the
    denoising loss trained beside the labels (:mod:`spt.train.joint`).

    forward(inputs, valid=None, masked=None) -> (B, n_out) logits, as a classifier;
    forward(..., aux=True) -> (logits, (B, L, n_aux) reconstructions).
    The extra head's parameters are ``aux_head.*``; the rest are the classifier's, named as
    :func:`classifier_model` names them; it is saved as that classifier (the extra head, a
    training device, left out).
    """

    def __init__(self, backbone: nn.Module, head: nn.Module, aux_head: nn.Module):
        super().__init__(backbone, head)
        self.aux_head = aux_head

    def forward(self, inputs, valid=None, masked=None, aux: bool = False):
        h = self.backbone(inputs, valid, masked)
        logits = self.head(h, valid)
        return (logits, self.aux_head(h, valid)) if aux else logits

    def _save_pretrained(self, save_directory) -> None:
        """Saved as the classifier it is, so the folder loads with ``SequenceModel.from_pretrained``."""
        plain = SequenceModel(self.backbone, self.head)
        plain.hub_config = self.hub_config
        plain._save_pretrained(save_directory)


class JointDualModel(DualEncoderModel):
    """:class:`JointModel` for a pair task: the dual encoder plus the per-position head.

    forward(inputs, valid, masked=None, *, inputs2, valid2, masked2=None, aux=False): the logits
    (B, n_out); with aux=True also the reconstructions (2B, L, n_aux) of both documents, stacked
    as :func:`stack_pair` stacks them (rows 0..B-1 the first documents).
    """

    def __init__(self, backbone: nn.Module, head: nn.Module, aux_head: nn.Module):
        super().__init__(backbone, head)
        self.aux_head = aux_head

    def forward(self, inputs, valid=None, masked=None, *, inputs2=None, valid2=None,
                masked2=None, aux: bool = False):
        if inputs2 is None:
            raise ValueError("JointDualModel classifies document pairs: pass inputs2 (and "
                             "valid2), the second documents of the batch")
        x, v = stack_pair(inputs, valid, inputs2, valid2)
        m = None if masked is None else stack_pair(masked, None, masked2, None)[0]
        h = self.backbone(x, v, m)
        logits = self.head(h, v)
        return (logits, self.aux_head(h, v)) if aux else logits

    _save_pretrained = JointModel._save_pretrained


def joint_model(cfg: ModelConfigType, spec: TaskSpec) -> SequenceModel:
    """:func:`classifier_model` plus a per-position head reconstructing the input: over the
    vocabulary for token tasks, the values (L1) for continuous ones. A pair task gets a
    :class:`JointDualModel`, any other a :class:`JointModel`."""
    model = classifier_model(cfg, spec)
    n_aux = spec.vocab_size if spec.is_tokens else spec.d_input
    kind = JointDualModel if spec.pair else JointModel
    joint = kind(model.backbone, model.head, TokenHead(cfg.d_model, n_aux))
    joint.hub_config = model.hub_config
    apply_init_(joint.aux_head, cfg)  # SSMConfig(init='random'); the rest is classifier_model's
    return joint


def pretraining_model(cfg: ModelConfigType, spec: TaskSpec,
                      objective: ObjectiveConfig) -> SequenceModel:
    """A model for self-pretraining: per-position head over the vocabulary (CE) or values (L1)."""
    name = type(cfg).__name__
    if objective.kind == "masked" and cfg.causal:
        raise ValueError(f"masked pretraining needs a bidirectional model: set {name}.causal=False, "
                         f"or use ObjectiveConfig(kind='causal')")
    if objective.kind == "causal" and not cfg.causal:
        raise ValueError(f"causal (next-token) pretraining needs {name}.causal=True; a "
                         f"bidirectional model would see the token it predicts")
    if spec.pair:
        raise ValueError(f"task {spec.name!r} is a pair task: self-pretraining reads its single "
                         f"documents; build the model for spt.data.pairs.documents_task(task).spec "
                         f"(spt.train.pretrain does this)")
    if objective.loss == "ce" and not (spec.is_tokens or spec.levels):
        raise ValueError(f"task {spec.name!r} has continuous inputs: use ObjectiveConfig(loss='l1')")
    if objective.loss == "l1" and spec.is_tokens:
        raise ValueError(f"task {spec.name!r} has token inputs: use ObjectiveConfig(loss='ce')")
    if spec.is_tokens:
        n_out = spec.vocab_size
    else:  # CE over the intensity levels of continuous pixels (the paper's Pathfinder / PathX)
        n_out = spec.levels if objective.loss == "ce" else spec.d_input
    model = SequenceModel(build_backbone(cfg, spec), TokenHead(cfg.d_model, n_out))
    model.hub_config = hub_config("pretraining", cfg, spec, objective)
    apply_init_(model, cfg)  # SSMConfig(init='random'): every parameter ~ N(0, 0.1^2)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@lru_cache(maxsize=None)
def count_parameters_of(cfg, d_input: int = 1, num_classes: int = 10) -> int:
    """Parameters of `cfg`'s classifier for a continuous input of d_input channels and
    num_classes classes (cached: configs are frozen). An SSM stack is built with its state-space
    parameters drawn at random: the same parameters without the HiPPO set-up (seconds at d > 1K)."""
    spec = TaskSpec(name="size", seq_len=cfg.max_len, num_classes=num_classes, d_input=d_input)
    return count_parameters(classifier_model(cfg.counting_form(), spec))


def build_from_config(config: dict):
    """A freshly initialised SequenceModel for a hub config (weights not loaded).

    A classifier config whose spec has ``pair: true`` builds a DualEncoderModel (classifier_model
    decides from the spec); an older spec is read by :func:`spt.compat.upgrade_spec`.
    """
    cfg = model_config_from_dict(config["model_config"])
    spec = TaskSpec(**upgrade_spec(config["spec"]))
    if config["kind"] == "pretraining":
        if not config.get("objective"):
            raise NotAnSptCheckpoint("a pretraining model's config needs its 'objective'")
        return pretraining_model(cfg, spec, ObjectiveConfig(**config["objective"]))
    return classifier_model(cfg, spec)
