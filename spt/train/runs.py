"""pretrain(), finetune(), train_from_scratch(): the three runs of the self-pretraining protocol.

    pt = pretrain(task, model_cfg, objective_cfg, train_cfg, "runs/pt")
    ft = finetune(task, pt.best_checkpoint, train_cfg, "runs/ft")
    sc = train_from_scratch(task, model_cfg, train_cfg, "runs/scratch")

Each returns a :class:`~spt.train.result.RunResult` (model with its best-validation weights,
history as an xarray Dataset, metrics). Pretraining uses only the task's training split (its labels
are never read); its checkpoint is selected on the validation split's denoising loss (the history
also records masked-token accuracy for CE and R² of the reconstruction for L1, the metrics the
paper's appendix C.1 names; see :class:`~spt.train.objectives.Denoising` for why loss is used).

A pair task (``task.spec.pair``, LRA Retrieval) is pretrained on its single documents
(:func:`spt.data.pairs.documents_task`: both documents of every pair of each split), and finetuned
or trained from scratch as a dual encoder (:func:`spt.models.model.classifier_model`).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from ..config import ObjectiveConfig, TrainConfig, replace, to_dict
from ..data.pairs import documents_task
from ..data.task import Task, TaskSpec
from ..model_config import ModelConfigType, model_config_from_dict, model_config_to_dict
from ..models.model import classifier_model, joint_model, pretraining_model
from ..models.task_init import apply_task_init_
from .checkpoint import digest, load_backbone, load_checkpoint
from .engine import fit
from .joint import JointDenoising
from .objectives import Denoising, Supervised
from .result import RunResult


def _meta(model_cfg: ModelConfigType, spec: TaskSpec,
          objective: Optional[ObjectiveConfig]) -> dict:
    return {"model_config": model_config_to_dict(model_cfg), "spec": dataclasses.asdict(spec),
            "objective": to_dict(objective) if objective is not None else None}


def supervised_model(model_cfg: ModelConfigType, spec: TaskSpec, train_cfg: TrainConfig):
    """-> (model, objective) of a supervised run: a classifier and its loss, or, with
    ``train_cfg.aux_denoise > 0``, the classifier with a second per-position head and the
    denoising loss trained beside the labels (:mod:`spt.train.joint`)."""
    if train_cfg.aux_denoise:
        return joint_model(model_cfg, spec), JointDenoising(spec, train_cfg.aux_denoise)
    return classifier_model(model_cfg, spec), Supervised(spec)


def pretrain(task: Task, model_cfg: ModelConfigType, objective: ObjectiveConfig,
             train_cfg: TrainConfig, out_dir, *, resume: bool = False, **fit_kw) -> RunResult:
    """Self-pretrain a per-position model on task.train with masked or causal denoising.

    The best-validation weights are in ``<out_dir>/best.pt``; pass that to :func:`finetune`.
    ``test_metrics`` of the result are the denoising metrics on the test split.
    A pair task is pretrained on :func:`~spt.data.pairs.documents_task` (its single documents; the
    checkpoint's spec is that view's), so the backbone is the one its dual encoder shares.
    ``SSMConfig(task_init="spectrum")`` fits the first layer to the training inputs before
    training (:func:`spt.models.task_init.apply_task_init_`).
    """
    if train_cfg.aux_denoise:
        raise ValueError(f"TrainConfig.aux_denoise={train_cfg.aux_denoise} adds a denoising loss "
                         f"beside the labels of a supervised run; pretraining is denoising "
                         f"already: set aux_denoise=0 in pretrain()'s TrainConfig")
    if task.spec.pair:
        task = documents_task(task)
    torch.manual_seed(train_cfg.seed)
    model = pretraining_model(model_cfg, task.spec, objective)
    apply_task_init_(model, model_cfg, task)  # SSMConfig.task_init; resuming loads over it
    return fit(model, Denoising(objective, task.spec), task, train_cfg, out_dir, stage="pretrain",
               meta=_meta(model_cfg, task.spec, objective), resume=resume, **fit_kw)


def _check_same_task(spec: TaskSpec, saved: dict, path: str) -> None:
    for name in ("vocab_size", "d_input"):
        if saved.get(name) != getattr(spec, name):
            raise ValueError(f"checkpoint {path} was pretrained on task {saved.get('name')!r} with "
                             f"{name}={saved.get(name)}, but task {spec.name!r} has "
                             f"{name}={getattr(spec, name)}: finetune on the task it was pretrained on")


def finetune(task: Task, checkpoint, train_cfg: TrainConfig, out_dir, *,
             pooling: Optional[str] = None, head: Optional[str] = None, resume: bool = False,
             trust_remote_code: bool = False, **fit_kw) -> RunResult:
    """Finetune a pretrained backbone on task labels.

    checkpoint : a pretraining ``best.pt`` (or its folder), an spt hub folder / repo id
                 (:func:`spt.hub.export_checkpoint`), or a dict from :func:`spt.hub.load_checkpoint`.
                 The model is rebuilt from the checkpoint's own model config
                 (TransformerConfig or SSMConfig), its backbone loaded strictly by parameter name, and
                 the per-position head replaced by a fresh pooled classifier (or regressor),
                 pooled and shaped as the config's ``pooling`` and ``head`` say.
    pooling    : override the pooling of the saved config ("mean" | "max" | "last").
    head       : override the head of the saved config ("mlp" | "linear").
    trust_remote_code : needed (True) when the checkpoint's model config names a layer class
                 outside spt (a LayerConfig), since building it imports that module and runs its
                 code; see :func:`spt.train.checkpoint.load_checkpoint`.
    The finetuning checkpoints store the model config with these overrides applied.
    """
    ckpt = load_checkpoint(checkpoint, trust_remote_code=trust_remote_code)
    model_cfg = model_config_from_dict(ckpt["model_config"], where=ckpt.get("path"),
                                       written_by=ckpt.get("provenance"))
    if pooling is not None:
        model_cfg = replace(model_cfg, pooling=pooling)
    if head is not None:
        model_cfg = replace(model_cfg, head=head)
    _check_same_task(task.spec, ckpt["spec"], ckpt["path"])
    torch.manual_seed(train_cfg.seed)
    model, objective = supervised_model(model_cfg, task.spec, train_cfg)
    load_backbone(model, ckpt)
    meta = _meta(model_cfg, task.spec, None)
    meta["pretrained_from"] = ckpt["path"]  # where it was read: information, not identity
    meta["pretrained_weights"] = digest(
        {k: v for k, v in ckpt["model"].items() if k.startswith("backbone.")})
    return fit(model, objective, task, train_cfg, out_dir, stage="finetune", meta=meta,
               resume=resume, **fit_kw)


def train_from_scratch(task: Task, model_cfg: ModelConfigType, train_cfg: TrainConfig, out_dir, *,
                       resume: bool = False, **fit_kw) -> RunResult:
    """Train a randomly initialised classifier on task labels (the baseline).

    Give ``train_cfg.patience`` so it runs until validation stops improving, as the paper does.
    ``SSMConfig(task_init="spectrum")`` fits the first layer to the training inputs first
    (:func:`spt.models.task_init.apply_task_init_`), as :func:`pretrain` does; :func:`finetune`
    does not (it loads the pretrained weights).
    """
    torch.manual_seed(train_cfg.seed)
    model, objective = supervised_model(model_cfg, task.spec, train_cfg)
    apply_task_init_(model, model_cfg, task)  # SSMConfig.task_init; resuming loads over it
    return fit(model, objective, task, train_cfg, out_dir, stage="scratch",
               meta=_meta(model_cfg, task.spec, None), resume=resume, **fit_kw)
