"""Cheap priors: what a from-scratch model can be given instead of self-pretraining, one config
change each, and the option that adds them beside the scratch arms of any study.

    transformer : "alibi"      ALiBi (Press et al. 2022): its fixed distance-decaying attention
                               bias in place of the model's positions, as Press et al. use it
                  "alibi_bias" the same bias on top of the model's own positions: locality
                               given, where each input is kept
    s4          : "free_conv"  the same blocks with an unrestricted kernel, one free weight per
                               lag (spt.models.free_conv; Miralles-Gonzalez et al. 2025)
                  "tdi"        task-dependent initialisation: the first layer's spectrum fitted to
                               the training inputs' (spt.models.task_init; our reading of Chen &
                               Chen 2025)

Study 14 (:mod:`spt.studies.priors_and_range`) trains each from scratch and under SPT;
``-p baselines "[alibi, tdi]"`` adds them beside another study's scratch arms
(:func:`with_baselines`).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import xarray as xr

from ..config import TransformerConfig, replace
from ..free_conv_config import FreeConvConfig
from ..ssm_config import SSMConfig
from .arms import Arm
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


def tdi(cfg: SSMConfig) -> SSMConfig:
    """The S4 stack whose first layer is fitted to the task's spectrum before training."""
    return replace(cfg, task_init="spectrum")


# model family -> {prior name: the baseline config -> the prior's config}
PRIORS = {"transformer": {"alibi": alibi, "alibi_bias": alibi_bias},
          "s4": {"free_conv": free_conv, "tdi": tdi}}
PRIOR_NOTES = {
    "alibi": ("cheap prior (not in the paper): ALiBi's fixed bias -m_h |i - j| (Press et al. "
              "2022) in place of the model's positions, the locality Coser et al. 2026 find SPT "
              "teaches; the row's protocol otherwise"),
    "alibi_bias": ("cheap prior (not in the paper): ALiBi's fixed bias -m_h |i - j| added on top "
                   "of the model's own positions (Press et al. drop them): locality without "
                   "losing where each input is; the row's protocol otherwise"),
    "free_conv": ("cheap prior (not in the paper): the S4 blocks with unrestricted kernels "
                  "(Miralles-Gonzalez et al. 2025), without their task-specific augmentations; "
                  "the S4 row's protocol otherwise"),
    "tdi": ("cheap prior (not in the paper): the first S4 layer fitted to the training inputs' "
            "power spectrum before training (Chen & Chen 2025, our reading: its estimator, loss "
            "and fitted parameters are ours); the S4 row's protocol otherwise"),
}


def with_prior(arm: Arm, family: str, prior: str) -> Arm:
    """`arm` (scratch or SPT) with the family's prior applied to its model ("none": unchanged)."""
    if prior == "none":
        return arm
    note = "; ".join(n for n in (PRIOR_NOTES[prior], arm.note) if n)
    # a free kernel has no state space: its paper-settings row is the S4 row's protocol without
    # the state-space fields (spt/paper/settings.tsv, model "free_conv")
    row = ("free_conv", arm.row[1]) if prior == "free_conv" and arm.row else arm.row
    return dataclasses.replace(arm, model=PRIORS[family][prior](arm.model), note=note, row=row)


def family_arms(family: str, scratch: Arm, spt: Arm) -> dict:
    """{(prior, init): Arm} of one model family: its scratch and SPT arms with no prior and with
    each of its PRIORS."""
    out = {}
    for prior in ("none", *PRIORS[family]):
        out[prior, "scratch"] = with_prior(scratch, family, prior)
        out[prior, "spt"] = with_prior(spt, family, prior)
    return out


def family_of(model) -> Optional[str]:
    """The PRIORS family of a model config: "transformer", "s4" (an S4 / S4D / DLR stack), or
    None (a layer no cheap prior here applies to)."""
    if isinstance(model, TransformerConfig):
        return "transformer"
    if isinstance(model, SSMConfig):
        return "s4"
    return None


def _applies(family: str, prior: str, model) -> bool:
    return prior in PRIORS[family] and not (prior == "tdi" and model.kind == "dlr")


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
        for name in names:
            if _applies(family, name, e.job.model):
                added.append(dataclasses.replace(e, coords=tuple(
                    (k, f"scratch+{name}" if k == "init" else v) for k, v in e.coords),
                    job=with_prior(e.job, family, name)))
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
