"""Study 13 — today's architectures under the paper's protocol: Mamba, Mamba-2, Gated DeltaNet,
GLA and LRU, each trained from scratch vs. self-pretrained (masked, and causal), beside the rotary
Transformer and S4 of Table 2. Not a study of the paper: it asks the paper's question of the
layers that came after it (are selective and gated recurrent layers weak at long range, or only
badly initialised?).

Grid: task x model x init x seed; model in MODELS, init in {"scratch", "masked", "causal"}
("causal" for the recurrent mixers only: the paper has no rotary causal LRA rows, and S4's rows are
bidirectional).

The paper preset gives every mixer the S4 row's protocol on each LRA task (spt.paper.table5):
its depth, dropout, pooling, head, weight decay, batch sizes, warmups, schedules, epochs and
budgets, with masked SPT (its SPT settings). From scratch a mixer trains its finetuning settings
(the same schedule, 200 epochs or 24 h, the same patience: :func:`spt.studies.commands.plan.caps` shows
the two arms' step caps equal), not the cited S4 runs' from-scratch schedules, which Gu tuned for
S4: an untuned layer gets the budget its SPT arm gets, as the paper's own retrained scratch
baselines (S4 random init, DLR) do. Two things differ, both stated in spt.studies.machinery.departures:
- width: each mixer is as wide as makes its classifier's parameter count closest to the S4 row's
  (:func:`mixer_model`), so no layer wins by size, but never narrower than half the S4 row's
  width (:data:`WIDTH_FLOOR`): at S4's count the authors' head sizes (Gated DeltaNet's key heads
  of 256, fla's MLPs rounded to 256) and the LRU's state of 256 per channel leave residual streams
  of 24-36 channels on ListOps, a bottleneck the paper's models never have. Where the floor
  binds, the mixer has more parameters than S4 (up to 2.5x), said per cell; :func:`sizes` gives
  every width and count per task;
- learning rate: S4's rates are tuned for S4 (its state-space parameters train at their own rate);
  a mixer's supervised runs try LR_GRID (each a full run, the best on validation kept, as C.1.4
  does for Text) and its pretraining takes the S4 row's rate.

Each mixer of spt.mixer_config.MIXER_CONFIGS is at its authors' default shape (MIXERS: its
config's defaults, read from the authors' code, :mod:`spt.mixer_authors`), and the LRU at the
LRU paper's settings of each task (ring, phase, state size). Where the parameter match forces a
width, the authors' head size stays (Mamba-2's 64, Gated DeltaNet's 256) and the head count
follows. What still departs from the authors, ``STUDY.deviations("paper")`` prints, each with its
reason.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import xarray as xr

from ..config import ObjectiveConfig, replace
from ..mixer_config import MIXER_CONFIGS
from ..models.model import count_parameters_of
from ..paper import ssm_row, transformer_row
from ..paper.results import TABLE2
from ..results import format_gain, paired_gain
from .machinery.arms import Arm, task_ref
from .machinery.job import Entry, GridPreset
from .machinery.laptop import SMALL_D, SMALL_LAYERS, small_s4
from .machinery.paper_arms import scratch_arm, spt_arm
from .machinery.sizing import width_for_params
from .machinery.smoke import smoke_arm, smoke_digits
from .machinery.study import Study, need_root
from .machinery.tables import compare_table, spt_gains, with_gains, with_your_models

NAME = "13_modern_architectures"
TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")

# Every mixer of spt.mixer_config at its authors' default shape (its config's defaults); the width
# and depth are set per task, and the authors' per-task settings (the LRU's ring, phase and state
# size: task_settings). Mamba and Mamba-2 blocks are mixer-only (mamba-ssm's); fla's GLA and Gated
# DeltaNet blocks follow every mixer with a SwiGLU MLP (fla's GatedMLP); the LRU's block ends in its
# own GLU.
MIXERS = {cls.kind: cls() for cls in MIXER_CONFIGS}
# The mixers' shapes at the smoke and laptop sizes (d = 16 to 32), where the authors' heads (64 and
# 256 channels) cannot fit: each config's small_shape (heads that split the width, LayerNorm
# blocks, a SwiGLU of 2 D, the LRU's ring [0.9, 0.999] and recurrent parameters at the run's rate).
SMALL_SHAPES = {name: dict(cfg.small_shape) for name, cfg in MIXERS.items()}
MODELS = ("transformer", "s4", *MIXERS)

# The supervised runs' learning rates per mixer (scratch and finetuning alike). Their papers train
# at 1e-3 to 4e-3 (language modelling) and 1e-3 to 4e-3 (LRU on LRA); the grid spans that range
# below and above, for the smaller batches of the LRA runs.
LR_GRID = {name: (5e-4, 1e-3, 2e-3) for name in MIXERS}
MIXER_NOTE = ("study 13 (not in the paper): the mixer takes the S4 row's depth, dropout, pooling, "
              "head and SPT settings, a width that matches S4's parameter count, and the lr grid "
              "LR_GRID for its supervised runs; from scratch it trains its finetuning settings "
              "(the same budget as its SPT arm), not the cited S4 runs' tuned schedules")
CAUSAL_NOTE = ("causal SPT: the same mixer made causal, pretrained on next-token prediction with "
               "the S4 row's SPT settings, and finetuned causal")


@lru_cache(maxsize=None)
def s4_size(task: str) -> int:
    """Parameters of the S4 row's classifier on `task` (continuous input, 10 classes: the encoder
    and head are sized alike for every model, so the layer stacks decide the difference)."""
    return count_parameters_of(ssm_row(task, "s4").model)


def width_step(cfg) -> int:
    """The finest width grid the mixer's shape allows: multiples of 4, or coarser where its heads
    need it (Mamba-2's head_dim 64 must divide expand * d_model: multiples of 32)."""
    for step in (4, 8, 16, 32, 64):
        try:
            replace(cfg, d_model=step)
            return step
        except ValueError:
            continue
    raise ValueError(f"{type(cfg).__name__}: no width of 4 to 64 fits its head sizes")


def sized_like(cfg, target: int):
    """`cfg` at the width (on :func:`width_step`'s grid) whose classifier's parameter count is
    closest to `target`."""
    return width_for_params(cfg, target, step=width_step(cfg))[0]


# A mixer is never narrower than this share of the S4 row's width (the module docstring's why).
WIDTH_FLOOR = 0.5


def floor_width(cfg, width: int) -> int:
    """The narrowest width on `cfg`'s width grid (:func:`width_step`) of at least WIDTH_FLOOR x
    `width`."""
    step = width_step(cfg)
    return -(-int(WIDTH_FLOOR * width) // step) * step


def mixer_model(name: str, task: str):
    """MIXERS[name] with the S4 row's depth, dropout, pooling, head and length on `task` (and its
    authors' settings there, where they set them per task: the LRU's ring, phase and state size,
    LRUConfig.task_settings), at the width whose
    parameter count is closest to the S4 row's (:func:`sized_like`), or at WIDTH_FLOOR of S4's
    width where that is wider."""
    s4 = ssm_row(task, "s4").model
    cfg = replace(MIXERS[name], n_layers=s4.n_layers, dropout=s4.dropout, pooling=s4.pooling,
                  head=s4.head, max_len=s4.max_len)
    cfg = replace(cfg, **cfg.task_settings.get(task, {}))
    sized = sized_like(cfg, s4_size(task))
    return replace(sized, d_model=max(sized.d_model, floor_width(cfg, s4.d_model)))


SIZE_TOLERANCE = 0.1


def size_note(name: str, task: str, model) -> str:
    """The mixer's width on `task` against the S4 row's, and its parameter count against S4's
    where it misses by more than SIZE_TOLERANCE, with why (the width floor, or its width grid)."""
    n, target = count_parameters_of(model), s4_size(task)
    s4 = ssm_row(task, "s4").model
    said = (f"{name} on {task}: width D = {model.d_model} against the S4 row's {s4.d_model}, "
            f"{n:,} parameters against S4's {target:,} ({n / target - 1:+.0%})")
    if abs(n - target) <= SIZE_TOLERANCE * target:
        return said
    at_count = sized_like(replace(model, d_model=width_step(model)), target).d_model
    if at_count < model.d_model:
        return (f"{said}: at S4's count it would be {at_count} wide, under the floor of "
                f"{WIDTH_FLOOR:g} x S4's width that spt keeps (the parameters follow)")
    return (f"{said}: its heads of the authors' size allow widths in steps of "
            f"{width_step(model)} only, and D = {model.d_model} gives the nearest count")


def mixer_arms(name: str, task: str) -> dict:
    """{init: Arm} of one mixer on one LRA task (the module docstring's protocol)."""
    s4 = ssm_row(task, "s4")
    model, grid = mixer_model(name, task), LR_GRID[name]
    row = ("mixer", task)
    note = "\n".join(n for n in (MIXER_NOTE, size_note(name, task, model)) if n)
    supervised = replace(s4.finetune, lr=grid[0])
    scratch = Arm(model=model, train=supervised, lr_grid=grid, row=row, note=note)
    masked = Arm(model=model, objective=s4.objective, pretrain=s4.pretrain, train=supervised,
                 lr_grid=grid, row=row, note=note)
    causal = dataclasses.replace(
        masked, model=replace(model, causal=True), row=("mixer_causal", task),
        note=note.replace(MIXER_NOTE, CAUSAL_NOTE),
        objective=ObjectiveConfig(kind="causal", loss=s4.objective.loss))
    return {"scratch": scratch, "masked": masked, "causal": causal}


def paper_arms(task: str) -> dict:
    """{(model, init): Arm} on `task`: Table 2's rotary Transformer and S4 (study 02's arms) and
    every mixer's three."""
    t, s = transformer_row(task, "rotary_masked"), ssm_row(task, "s4")
    arms = {("transformer", "scratch"): scratch_arm(t), ("transformer", "masked"): spt_arm(t),
            ("s4", "scratch"): scratch_arm(s), ("s4", "masked"): spt_arm(s)}
    for name in MIXERS:
        arms.update({(name, i): a for i, a in mixer_arms(name, task).items()})
    return arms


def paper(data_root=None) -> GridPreset:
    root = need_root(data_root, NAME)
    entries = tuple(Entry((("task", t), ("model", m), ("init", i)), task_ref(t, root), arm)
                    for t in TASKS for (m, i), arm in paper_arms(t).items())
    return GridPreset("paper", entries, seeds=(0, 1, 2), note=(
        "LRA data; Table 2's rotary Transformer and S4, and each mixer with the S4 row's protocol "
        "at S4's parameter count, scratch vs. masked and causal SPT"))


SMOKE_EXAMPLES = 32


def smoke(data_root=None) -> GridPreset:
    """Every model from scratch and with masked SPT (and Mamba with causal SPT) at smoke size on
    SMOKE_EXAMPLES 8x8 digits per split, the Image row's protocol shrunk: under a minute."""
    ref = dataclasses.replace(smoke_digits(), limit=SMOKE_EXAMPLES)
    entries = []
    for (m, i), arm in paper_arms("image").items():
        if i == "causal" and m != "mamba":  # one causal SPT arm checks that path
            continue
        sizes = dict(d_model=16, n_layers=1) if m in MIXERS else {}
        if m in MIXERS:  # spt's small shapes: the authors' heads do not fit d = 16
            arm = dataclasses.replace(arm, lr_grid=(), model=replace(arm.model, **SMALL_SHAPES[m]))
        entries.append(Entry((("task", "digits"), ("model", m), ("init", i)), ref,
                             smoke_arm(arm, 64, epochs=1, **sizes)))
    return GridPreset("smoke", tuple(entries), seeds=(0,), note=(
        f"CPU smoke run: every model at d <= 32 from scratch and with masked SPT (Mamba also with "
        f"causal SPT), one epoch per stage, {SMOKE_EXAMPLES} digits 8x8 per split; checks the "
        f"pipeline, not the finding"))


# ------------------------------------------------------------------------------ laptop preset
# Two tasks a 2-core CPU trains in minutes: 100 labelled digits as 64 pixel tokens (the quickstart's
# task, LRA Image's encoding) and generated ListOps at 128 tokens (1,000 training expressions).
# Every model at the laptop S4's parameter count (a d=32 x 2 S4, N = 32; the other models' widths
# are sized to it as the paper preset sizes the mixers); one lr per stage for all models (no grid:
# it would triple the time), the same budgets for every model.
LAPTOP_D, LAPTOP_LAYERS = SMALL_D, SMALL_LAYERS
LAPTOP_SEEDS = (0, 1, 2)
# spt's small shapes (SMALL_SHAPES); Mamba-2's heads of 32 channels leave only widths 16 and 32 near
# the laptop size: heads of 16
LAPTOP_SHAPES = {**SMALL_SHAPES, "mamba2": {**SMALL_SHAPES["mamba2"], "head_dim": 16}}
# Budgets, every model alike, long enough that the supervised runs stop by patience, not by the cap
# (docs/modern_architectures.md, "Why: the laptop budgets": shorter budgets ended every run at the
# cap and hid SPT's gain on the digits).
# - digits: the quickstart's laptop stages (its pretraining: 250 epochs = 1,750 steps at lr 3e-3,
#   cosine, masking half the pixels; supervised: lr 1e-3, at most 800 epochs, patience 100,
#   validated every 4), where SPT lifts its Transformer by 15 points;
# - ListOps: 400 pretraining steps (lr 2e-3, 10% masked, validated every epoch), supervised lr
#   1e-3 for at most 80 epochs with patience 15, validated every epoch.
LAPTOP_LISTOPS = dict(pretrain_lr=2e-3, pretrain_steps=400, mask_ratio=0.1, lr=1e-3, epochs=80,
                      patience=15)
LAPTOP_NOTE = ("laptop preset: digits 8x8 as pixel tokens and generated ListOps stand in for the "
               "LRA tasks; every model at the parameter count of a d=32 x 2 S4, one lr per stage, "
               "the same budgets for all (the digits: the quickstart's stages); the mixers at "
               "spt's own small shapes, not their "
               "authors' (heads of 64 and 256 channels cannot fit d=32): Mamba-2 heads of 16 and "
               "d_state 64, Gated DeltaNet 4 heads of D/4 with a conv bias, GLA and Gated "
               "DeltaNet a SwiGLU of 2D, LayerNorm blocks, the LRU's ring [0.9, 0.999] with its "
               "recurrent parameters at the run's lr")


def laptop_models(seq_len: int) -> dict:
    """{model: config} of the laptop preset at sequence length seq_len."""
    from ..config import TransformerConfig
    s4 = small_s4(seq_len)
    target = count_parameters_of(s4)
    transformer = TransformerConfig(d_model=LAPTOP_D, n_layers=LAPTOP_LAYERS, n_heads=2,
                                    d_ff=2 * LAPTOP_D, dropout=0.1, positions="rotary",
                                    max_len=seq_len)
    out = {"transformer": sized_like(transformer, target), "s4": s4}
    for name, cfg in MIXERS.items():
        cfg = replace(cfg, n_layers=LAPTOP_LAYERS, dropout=0.1, max_len=seq_len,
                      **LAPTOP_SHAPES[name])
        out[name] = sized_like(cfg, target)
    return out


def laptop_stages(task: str) -> tuple:
    """(objective, pretraining, supervised) of the laptop preset on `task`, for every model."""
    from ..config import TrainConfig
    if task == "digits":
        from .machinery.digits_setup import LAPTOP
        spt = LAPTOP.arms()["spt"]
        return spt.objective, spt.pretrain, spt.train
    b = LAPTOP_LISTOPS
    pretrain = TrainConfig(lr=b["pretrain_lr"], batch_size=16, epochs=10**6,
                           max_steps=b["pretrain_steps"], warmup_steps=50, eval_every=1,
                           progress=False)
    supervised = TrainConfig(lr=b["lr"], batch_size=16, epochs=b["epochs"],
                             patience=b["patience"], warmup_steps=20, schedule="constant",
                             eval_every=1, progress=False)
    return ObjectiveConfig(kind="masked", mask_ratio=b["mask_ratio"], loss="ce"), pretrain, \
        supervised


def laptop_arms(task: str, seq_len: int) -> dict:
    """{(model, init): Arm}: scratch and masked SPT of every laptop model on one task."""
    objective, pretrain, supervised = laptop_stages(task)
    arms = {}
    for name, model in laptop_models(seq_len).items():
        arms[(name, "scratch")] = Arm(model=model, train=supervised, note=LAPTOP_NOTE)
        arms[(name, "masked")] = Arm(model=model, objective=objective, pretrain=pretrain,
                                     train=supervised, pretrain_val=100, note=LAPTOP_NOTE)
    return arms


def laptop(data_root=None) -> GridPreset:
    from .machinery.digits_setup import LAPTOP
    from .machinery.smoke import laptop_listops
    tasks = (("digits", LAPTOP.task(), 64), ("listops", laptop_listops(), 128))
    entries = tuple(Entry((("task", t), ("model", m), ("init", i)), ref, arm)
                    for t, ref, L in tasks for (m, i), arm in laptop_arms(t, L).items())
    return GridPreset("laptop", entries, seeds=LAPTOP_SEEDS, note=(
        "2-core CPU: 100 digits as 64 pixel tokens and generated ListOps (1,000 expressions, 128 "
        "tokens); every model at a d=32 x 2 S4's parameter count; scratch vs. masked SPT, one lr "
        "per stage (the digits: the quickstart's stages and budgets), 3 seeds"))


PRESETS = {"smoke": smoke, "laptop": laptop, "paper": paper}


def sizes(preset: str = "paper", data_root="DATA"):
    """A DataFrame: each model's parameter count and width per task of `preset` (classifiers on a
    1-channel input with 10 classes: what the paper preset sizes the mixers by)."""
    import pandas as pd

    rows: dict = {}
    for e in STUDY.preset(preset, data_root).entries:
        c = dict(e.coords)
        if c["init"] == "scratch":
            m = e.job.model
            rows.setdefault(c["model"], {})[c["task"]] = \
                f"{count_parameters_of(m):,} (d={m.d_model})"
    return pd.DataFrame(rows).T


def rankings(ds: xr.Dataset, metric: str = "test_accuracy"):
    """A DataFrame per task: the models ranked by mean `metric` trained from scratch, beside their
    ranking after masked SPT (1 = best), with both means. Models without both inits are left out."""
    import pandas as pd

    mean = ds[metric].mean("seed") * 100
    frames = []
    for task in [str(t) for t in ds.task.values]:
        both = [str(m) for m in ds.model.values
                if all(bool(mean.sel(task=task, model=m, init=i).notnull())
                       for i in ("scratch", "masked"))]
        scratch = {m: float(mean.sel(task=task, model=m, init="scratch")) for m in both}
        spt = {m: float(mean.sel(task=task, model=m, init="masked")) for m in both}
        rank = lambda d: {m: r + 1 for r, m in enumerate(sorted(d, key=d.get, reverse=True))}  # noqa: E731
        rs, rp = rank(scratch), rank(spt)
        frames.append(pd.DataFrame({"task": task, "model": both,
                                    "scratch": [round(scratch[m], 1) for m in both],
                                    "rank scratch": [rs[m] for m in both],
                                    "masked SPT": [round(spt[m], 1) for m in both],
                                    "rank SPT": [rp[m] for m in both]}))
    return pd.concat(frames).set_index(["task", "model"]).sort_values(["task", "rank scratch"])


def table(ds: xr.Dataset):
    """Mean test accuracy (%) per model x init x task (Table 2's rows beside ours for the
    Transformer and S4), then each model's SPT gains over scratch paired by seed."""
    rows = [("Transformer + Rotary", {"model": "transformer", "init": "scratch"},
             "Transformers + Rotary"),
            ("Transformer + Rotary + Masked SPT", {"model": "transformer", "init": "masked"},
             "Transformers + Rotary + Masked SPT"),
            ("S4", {"model": "s4", "init": "scratch"}, "S4"),
            ("S4 + Masked SPT", {"model": "s4", "init": "masked"}, "S4 + Masked SPT")]
    models = [str(m) for m in ds.model.values]
    inits = [str(i) for i in ds.init.values]
    for m in [m for m in models if m not in ("transformer", "s4")]:
        rows += [(f"{m} ({i})", {"model": m, "init": i}, None) for i in inits]
    rows = with_your_models(ds, rows, "transformer")
    pairs = [(f"{i} SPT - scratch", i, "scratch") for i in ("masked", "causal") if i in inits]
    return with_gains(compare_table(ds, rows, TABLE2), spt_gains(ds, pairs))


def headline(ds: xr.Dataset) -> str:
    """Per task, each model's masked-SPT gain over scratch paired by seed (mean and 95% interval),
    and the order of the models from scratch and after SPT (:func:`rankings`)."""
    acc, ranks = ds["test_accuracy"] * 100, rankings(ds)
    parts = []
    for task in [str(t) for t in acc.task.values]:
        a, r = acc.sel(task=task), ranks.loc[task]
        gains = [f"{m} " + format_gain(paired_gain(a.sel(model=m, init="masked"),
                                                   a.sel(model=m, init="scratch")))
                 for m in r.index]
        order = lambda col: " > ".join(r.sort_values(col).index)  # noqa: E731
        parts.append(f"{task}: SPT gain {', '.join(gains)}; scratch order "
                     f"{order('rank scratch')}, after SPT {order('rank SPT')}")
    return ". ".join(parts)


def extra_tables(ds: xr.Dataset) -> list:
    return [("The models ranked from scratch and after masked SPT (1 = best)", rankings(ds))]


STUDY = Study(NAME, "Today's mixers (Mamba, Mamba-2, Gated DeltaNet, GLA, LRU) beside the rotary "
              "Transformer and S4: scratch vs. masked and causal SPT",
              ("task", "model", "init", "seed"), PRESETS, table, takes_models=True,
              takes_baselines=True,
              models_like="mamba", headline=headline, extra_tables=extra_tables)
