"""Cheap priors: what a from-scratch model can be given instead of self-pretraining, one config
change each, and the option that adds them beside the scratch arms of any study.

    transformer : "alibi"      ALiBi (Press et al. 2022): its fixed distance-decaying attention
                               bias in place of the model's positions, as Press et al. use it
                  "alibi_bias" the same bias on top of the model's own positions: locality
                               given, where each input is kept
                  "techniques" the model as it is, trained with Miralles-Gonzalez et al. (2025)'s
                               techniques against data inefficiency (:data:`TECHNIQUES`)
    s4          : "free_conv"  the same blocks with an unrestricted kernel, one free weight per
                               lag (spt.models.free_conv; Miralles-Gonzalez et al. 2025)
                  "tdi"        task-dependent initialisation: the first layer's spectrum fitted to
                               the training inputs' (spt.models.task_init; our reading of Chen &
                               Chen 2025)
                  "techniques" the S4 trained with the same techniques (the control their paper
                               lacks: does S4 gain from them as much as the free kernel?)
                  "free_conv+techniques"  the free kernel trained with them, as they train it

The techniques are per task, each task's own fact (``techniques`` in
:data:`spt.data.registry.TASKS`, gathered in :data:`TECHNIQUES`; from the authors' code, the
paper's own values could not be read): the task's label-preserving augmentation (``TrainConfig.augment``,
:mod:`spt.data.augment`), easier Pathfinder images added to training (the loader's
``extra_train`` option, :data:`spt.data.pathfinder.EASIER`), and a denoising loss trained beside
the labels (``TrainConfig.aux_denoise``, :mod:`spt.train.joint`). They change the supervised stage
only: SPT + techniques pretrains as SPT does and finetunes with them.

Study 14 (:mod:`spt.studies.priors_and_range`) trains each from scratch and under SPT;
``-p baselines "[alibi, tdi]"`` adds them beside another study's scratch arms
(:func:`with_baselines`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import xarray as xr

from ...config import TransformerConfig, replace
from ...data.registry import TASKS
from ...free_conv_config import FreeConvConfig
from ...ssm_config import SSMConfig
from .arms import Arm, TaskRef
from .job import GridPreset


def alibi(cfg: TransformerConfig) -> TransformerConfig:
    """The Transformer with ALiBi's distance-decaying attention bias instead of its positions."""
    return replace(cfg, positions="alibi")


def alibi_bias(cfg: TransformerConfig) -> TransformerConfig:
    """The Transformer with ALiBi's bias added on top of its own positions."""
    return replace(cfg, locality_bias=True)


def free_conv(cfg: SSMConfig) -> FreeConvConfig:
    """The S4 stack with every kernel freed: the same width, depth, norm, pre/post-norm, GLU,
    dropout, pooling and head; one free weight per lag at the SSM parameters' lr."""
    return FreeConvConfig(d_model=cfg.d_model, n_layers=cfg.n_layers, max_len=cfg.max_len,
                          causal=cfg.causal, pooling=cfg.pooling, dropout=cfg.dropout,
                          norm=cfg.norm, prenorm=cfg.prenorm, glu=cfg.glu, head=cfg.head,
                          lr=cfg.lr)


def free_kernel_size(cfg: SSMConfig) -> str:
    """What freeing the kernels of `cfg` costs in weights, beside the S4 model's parameters (a
    classifier of one input channel and 10 classes) and those of the kernels it replaces."""
    from ...models.model import count_parameters, count_parameters_of
    from ...models.ssm_kernels import make_kernel
    n_dir = 1 if cfg.causal else 2
    free = cfg.n_layers * n_dir * cfg.d_model * cfg.max_len
    kernels = cfg.n_layers * count_parameters(make_kernel(cfg.counting_form(), n_dir))
    model = count_parameters_of(cfg)
    return (f"its free kernels hold {free / 1e6:.2f}M weights ({cfg.n_layers} layers x {n_dir} "
            f"directions x {cfg.d_model} channels x {cfg.max_len} lags), against "
            f"{model / 1e6:.2f}M parameters in the whole S4 model ({kernels / 1e6:.2f}M in the "
            f"kernels they replace)")


def tdi(cfg: SSMConfig) -> SSMConfig:
    """The S4 stack whose first layer is fitted to the task's spectrum before training."""
    return replace(cfg, task_init="spectrum")


# task (TaskRef.name) -> (TrainConfig changes, TaskRef options): Miralles-Gonzalez et al.'s
# techniques, the tasks' own facts (spt.data.registry.TASKS, `techniques`).
TECHNIQUES = {name: source.techniques for name, source in TASKS.items() if source.techniques}


@dataclass(frozen=True)
class Prior:
    """A cheap prior: a change of the model config and/or training with the task's TECHNIQUES."""

    model: Optional[Callable] = None  # model config -> the prior's model config; None: unchanged
    techniques: bool = False
    fits: Callable = lambda model: True  # whether the prior can change this model config


# model family -> {prior name: Prior}
PRIORS = {"transformer": {"alibi": Prior(alibi), "alibi_bias": Prior(alibi_bias),
                          "techniques": Prior(techniques=True)},
          "s4": {"free_conv": Prior(free_conv), "tdi": Prior(tdi, fits=lambda m: m.takes_task_init),
                 "techniques": Prior(techniques=True),
                 "free_conv+techniques": Prior(free_conv, techniques=True)}}
TECHNIQUES_NOTE = ("Miralles-Gonzalez et al. 2025's techniques against data inefficiency, as their "
                   "code sets them (the paper's values could not be read): the task's augmentation, "
                   "easier Pathfinder images, the denoising loss beside the labels (30% corrupted, "
                   "weight 1); on the supervised stage only")
PRIOR_NOTES = {
    "alibi": ("cheap prior (not in the paper): ALiBi's fixed bias -m_h |i - j| (Press et al. "
              "2022) in place of the model's positions, the locality Coser et al. 2026 find SPT "
              "teaches; the row's protocol otherwise"),
    "alibi_bias": ("cheap prior (not in the paper): ALiBi's fixed bias -m_h |i - j| added on top "
                   "of the model's own positions (Press et al. drop them): locality without "
                   "losing where each input is; the row's protocol otherwise"),
    "free_conv": ("cheap prior (not in the paper): the S4 blocks with unrestricted kernels "
                  "(Miralles-Gonzalez et al. 2025; their gated block is replaced by S4's), "
                  "without their techniques; the S4 row's protocol otherwise"),
    "tdi": ("cheap prior (not in the paper): the first S4 layer fitted to the training inputs' "
            "power spectrum before training (Chen & Chen 2025, our reading: its estimator, loss "
            "and fitted parameters are ours); the S4 row's protocol otherwise"),
    "techniques": f"cheap prior (not in the paper): {TECHNIQUES_NOTE}; the row's protocol otherwise",
    "free_conv+techniques": ("cheap prior (not in the paper): the S4 blocks with unrestricted "
                             f"kernels trained with {TECHNIQUES_NOTE}; the S4 row's protocol "
                             f"otherwise"),
}


def with_techniques(arm: Arm, task: str) -> Arm:
    """`arm` whose supervised stage trains with `task`'s TECHNIQUES (TrainConfig changes only;
    :func:`technique_ref` adds the data options)."""
    if task not in TECHNIQUES:
        raise ValueError(f"no data-efficiency techniques are set for task {task!r}; tasks with "
                         f"them: {', '.join(TECHNIQUES)} (each task's `techniques` in "
                         f"spt.data.registry.TASKS)")
    return dataclasses.replace(arm, train=replace(arm.train, **TECHNIQUES[task][0]))


def technique_ref(ref: TaskRef, prior: str, family: str) -> TaskRef:
    """The task a prior's cells read: `ref` with the TECHNIQUES' data options (easier Pathfinder
    images in training) when the prior trains with the techniques."""
    if prior == "none" or not PRIORS[family][prior].techniques:
        return ref
    extra = TECHNIQUES[ref.name][1]
    return dataclasses.replace(ref, options=tuple(ref.options) + extra) if extra else ref


def with_prior(arm: Arm, family: str, prior: str, task: Optional[str] = None) -> Arm:
    """`arm` (scratch or SPT) with the family's prior applied ("none": unchanged). `task`
    (a TaskRef name) picks the TECHNIQUES of a prior that trains with them."""
    if prior == "none":
        return arm
    p = PRIORS[family][prior]
    note = "; ".join(n for n in (PRIOR_NOTES[prior], arm.note) if n)
    out = dataclasses.replace(arm, note=note)
    if p.model is not None:
        # a free kernel has no state space: its paper-settings row is the S4 row's protocol
        # without the state-space fields (spt/paper/settings.tsv, model "free_conv")
        row = ("free_conv", arm.row[1]) if p.model is free_conv and arm.row else arm.row
        out = dataclasses.replace(out, model=p.model(arm.model), row=row)
        if p.model is free_conv:
            out = dataclasses.replace(out, note=f"{out.note}; {free_kernel_size(arm.model)}")
    if p.techniques:
        if task is None:
            raise ValueError(f"prior {prior!r} trains with a task's techniques: give the task")
        out = with_techniques(out, task)
    return out


def priors_for(family: str, task: Optional[str]) -> tuple:
    """The family's priors that can run on `task`: the techniques ones only where TECHNIQUES
    has the task."""
    return tuple(n for n, p in PRIORS[family].items() if not p.techniques or task in TECHNIQUES)


FREE_SCRATCH_NOTE = ("from scratch a free kernel trains its SPT arm's finetuning settings (the "
                     "same budget, schedule and patience: caps() shows them equal), not the cited "
                     "S4 runs' from-scratch schedules, which Gu et al. tuned for S4: an untuned "
                     "layer gets the budget its SPT arm gets, as study 13's mixers do")


def family_arms(family: str, scratch: Arm, spt: Arm, task: Optional[str] = None) -> dict:
    """{(prior, init): Arm} of one model family on `task` (a TaskRef name): its scratch and SPT
    arms with no prior and with each of its priors that can run there (:func:`priors_for`). A
    prior that replaces the model by an untuned one (the free kernel) trains from scratch with its
    SPT arm's finetuning settings (:data:`FREE_SCRATCH_NOTE`)."""
    untuned = dataclasses.replace(spt, objective=None, pretrain=None, pretrain_val=None,
                                  note="; ".join(n for n in (FREE_SCRATCH_NOTE, spt.note) if n))
    out = {}
    for prior in ("none", *priors_for(family, task)):
        own = untuned if prior != "none" and PRIORS[family][prior].model is free_conv else scratch
        out[prior, "scratch"] = with_prior(own, family, prior, task)
        out[prior, "spt"] = with_prior(spt, family, prior, task)
    return out


def family_of(model) -> Optional[str]:
    """The PRIORS family of a model config: "transformer", "s4" (an S4 / S4D / DLR stack), or
    None (a layer no cheap prior here applies to)."""
    return {"transformer": "transformer", "ssm": "s4"}.get(getattr(model, "family", None))


def _applies(family: str, prior: str, model, task: str) -> bool:
    return prior in priors_for(family, task) and PRIORS[family][prior].fits(model)


def with_baselines(p: GridPreset, names, study: str = "") -> GridPreset:
    """The preset with, beside each from-scratch entry (coordinate init="scratch") of a
    Transformer or SSM arm, one entry per named prior that applies to its family, under
    init="scratch+<prior>" (the arm with only the prior changed: :func:`with_prior`). What
    ``-p baselines "[alibi, tdi]"`` adds to a study; off by default, so the paper presets stay the
    paper's."""
    names = list(names or ())
    known = sorted({p for priors in PRIORS.values() for p in priors})
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"study {study}: no cheap prior {unknown}; choose from {', '.join(known)}")
    if not names:
        return p
    added = []
    for e in p.entries:
        coords = dict(e.coords)
        family = family_of(getattr(e.job, "model", None))
        if coords.get("init") != "scratch" or family is None:
            continue
        task = getattr(e.ref, "name", None)
        for name in names:
            if _applies(family, name, e.job.model, task):
                added.append(dataclasses.replace(e, coords=tuple(
                    (k, f"scratch+{name}" if k == "init" else v) for k, v in e.coords),
                    ref=technique_ref(e.ref, name, family),
                    job=with_prior(e.job, family, name, task)))
    if not added:
        raise ValueError(f"study {study}: baselines {names} apply to none of its cells (they "
                         f"need a from-scratch Transformer or S4 arm, init='scratch')")
    return dataclasses.replace(p, entries=p.entries + tuple(added))


def baseline_gains(ds: xr.Dataset):
    """The gain rows (paired by seed) of every "scratch+<prior>" init over "scratch" in `ds`, or
    None when it has none: what a study's table shows under its own with baselines."""
    from .tables import spt_gains
    if "init" not in ds.dims:
        return None
    pairs = [(f"{v} - scratch", str(v), "scratch") for v in ds.init.values
             if str(v).startswith("scratch+")]
    return spt_gains(ds, pairs) if pairs else None
