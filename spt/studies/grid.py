"""Study presets as grids of entries, and the helpers the study modules share.

A study preset lists :class:`Entry` s (coords + task + arm); :func:`grid_cells` crosses them with
seeds. `smoke` presets shrink the paper's models (:func:`shrink`) and budgets (:func:`smoke_train`)
so that a whole study runs on a laptop CPU in well under a minute; `paper` presets hold the
paper's hyper-parameters (spt.config Table 4 / Table 5 rows).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import xarray as xr

from ..config import TrainConfig, TransformerConfig, replace
from ..data.errors import DataMissingError
from ..ssm_config import SSMConfig
from .arms import Arm, TaskRef, arm_cell
from .cells import Cell, run_cells


@dataclass(frozen=True)
class Entry:
    """One row of a study grid: coords (without seed), the task to load and the arm to train."""

    coords: tuple  # ((dim, value), ...) in the study's dim order
    ref: TaskRef
    arm: Arm


@dataclass(frozen=True)
class GridPreset:
    """A study preset: entries x seeds. `note` says what it stands for (printed by notebooks)."""

    name: str
    entries: tuple
    seeds: tuple = (0,)
    note: str = ""


def grid_cells(p: GridPreset, *, seeds: Optional[Sequence[int]] = None,
               device: str = "auto", dry=None) -> list[Cell]:
    """One Cell per entry x seed. dry: a :class:`spt.studies.check.DryRun` (one step per stage on
    the longest examples) or None."""
    seeds = tuple(seeds) if seeds else p.seeds
    out = []
    for e in p.entries:
        ref, arm = e.arm.task_ref(e.ref), e.arm.with_device(device)
        if dry is not None:
            ref, arm = dry.ref(ref), dry.arm(arm)
        out += [arm_cell({**dict(e.coords), "seed": int(s)}, ref, arm, int(s)) for s in seeds]
    return out


def pick(presets: dict, name: str, study: str, *args):
    """presets[name](*args), or an error listing the presets."""
    if name not in presets:
        raise ValueError(f"study {study}: unknown preset {name!r}; choose from "
                         f"{', '.join(presets)}")
    return presets[name](*args)


def need_root(data_root, study: str) -> str:
    if not data_root:
        raise ValueError(f"study {study}: the paper preset reads the real data sets: pass "
                         f"data_root (a folder made with `spt data prepare TASK --root DIR`)")
    return str(data_root)


def check_data(refs: Sequence[TaskRef], study: str) -> None:
    """Fail before training if any task's data folder is missing, listing what to run."""
    from ..data.registry import TASK_DIRS
    missing = {}
    for r in refs:
        if r.name in TASK_DIRS and r.root is not None and not (Path(r.root) / TASK_DIRS[r.name]).exists():
            missing[r.name] = f"spt data prepare {r.name} --root {r.root}"
    if missing:
        raise DataMissingError(
            f"study {study}: data missing for {', '.join(missing)}. Run:\n  " +
            "\n  ".join(missing.values()) +
            "\nor run the study with preset='smoke' (generated / embedded data, CPU).")


# ------------------------------------------------------------------------------------ smoke sizes
SMOKE_EPOCHS = 3


def shrink(model, **sizes):
    """The paper's model reduced to smoke size, keeping its kind, positions, pooling, causality."""
    if isinstance(model, SSMConfig):
        base = dict(d_model=16, n_layers=2, d_state=8 if model.kind != "dlr" else 16)
    else:
        base = dict(d_model=32, n_layers=2, n_heads=2, d_ff=64)
    base.update(sizes)
    return replace(model, **base)


SMOKE_LR = 2e-3


def smoke_train(cfg: TrainConfig, epochs: int = SMOKE_EPOCHS, **changes) -> TrainConfig:
    """Paper optimisation settings with a smoke budget: few epochs, batch <= 32, no progress bar,
    and lr 2e-3 (the paper's rates, down to 5e-5, move a tiny model nowhere in 3 epochs)."""
    return replace(cfg, **{"epochs": epochs, "batch_size": min(cfg.batch_size, 32),
                           "progress": False, "patience": None, "lr": SMOKE_LR, **changes})


def fit_len(model, seq_len: int):
    """Set the model's max_len to the task's sequence length (and drop local attention blocks that
    no longer divide it)."""
    if isinstance(model, TransformerConfig) and model.local_block and model.local_block >= seq_len:
        model = replace(model, local_block=None)
    return replace(model, max_len=seq_len)


def smoke_arm(arm: Arm, seq_len: int, epochs: int = SMOKE_EPOCHS, **sizes) -> Arm:
    """The arm at smoke size: shrunk model, few epochs."""
    return dataclasses.replace(
        arm, model=fit_len(shrink(arm.model, **sizes), seq_len),
        train=smoke_train(arm.train, epochs),
        pretrain=smoke_train(arm.pretrain, epochs) if arm.pretrain else None)


def smoke_listops(root) -> TaskRef:
    """The smoke ListOps: generated short ListOps under `root` (smoke_data_root), 128 tokens."""
    return TaskRef("listops", root=root, options=(("seq_len", 128),))


def smoke_digits(n_train: int = 200, fraction: float = 1.0) -> TaskRef:
    """The smoke stand-in for the image tasks: the embedded 8x8 digits (64 pixels, no data root)."""
    return TaskRef("digits", fraction=fraction, options=(("size", 8), ("n_train", n_train)))


def pick_tasks(items: Sequence, task_of: Callable, tasks: Optional[Sequence[str]],
               study: str) -> list:
    """The items whose task (``task_of(item)``) is in `tasks` (None or empty: all of them); an
    unknown task is an error listing the study's tasks."""
    if not tasks:
        return list(items)
    have = list(dict.fromkeys(task_of(i) for i in items))
    unknown = [t for t in tasks if t not in have]
    if unknown:
        raise ValueError(f"study {study}: no task(s) {unknown}; its tasks are "
                         f"{', '.join(map(str, have))}")
    return [i for i in items if task_of(i) in tasks]


def only_tasks(p: GridPreset, tasks: Optional[Sequence[str]], study: str) -> GridPreset:
    """The preset with the entries whose "task" coordinate is in `tasks` (see pick_tasks)."""
    entries = pick_tasks(p.entries, lambda e: dict(e.coords).get("task"), tasks, study)
    return dataclasses.replace(p, entries=tuple(entries))


def model_name(cfg) -> str:
    """The "model" coordinate of a model config: transformer, s4 / s4d / dlr, sgconv, or the
    lower-cased class name of a LayerConfig's layer."""
    if isinstance(cfg, TransformerConfig):
        return "transformer"
    if isinstance(cfg, SSMConfig):
        return cfg.kind
    layer = getattr(cfg, "layer", None)
    if isinstance(layer, str):
        return layer.replace(":", ".").rsplit(".", 1)[-1].lower()
    return getattr(cfg, "kind", type(cfg).__name__.lower())


def layer_from_spec(spec, like, what: str = "layer spec"):
    """A LayerConfig from the JSON form of your layer, sized like the preset's model `like`:

        "module:Class" (or the class itself)
        {"layer": "module:Class", "kwargs": {...}, "bidirectional": false, "d_model": 64,
         "n_layers": 3, "positions": "none"}

    Only "layer" is required. d_model and n_layers default to like's; dropout and pooling are
    always like's, so your model is trained the way the preset trains its own. bidirectional:
    run a causal-only layer (Mamba, S5) forwards and backwards, as masked SPT needs.
    """
    from ..layer_config import LayerConfig

    if isinstance(spec, (str, type)):
        spec = {"layer": spec}
    if not isinstance(spec, dict) or not isinstance(spec.get("layer"), (str, type)):
        raise ValueError(f"{what}: expected \"module:Class\" or a dict with key \"layer\" (and "
                         f"optionally kwargs, bidirectional, d_model, n_layers, positions), got "
                         f"{spec!r:.120}")
    unknown = sorted(set(spec) - {"layer", "kwargs", "bidirectional", "d_model", "n_layers",
                                  "positions"})
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {unknown}; a layer spec takes layer, kwargs, "
                         f"bidirectional, d_model, n_layers, positions")
    return LayerConfig(layer=spec["layer"], kwargs=spec.get("kwargs") or {},
                       d_model=int(spec.get("d_model") or like.d_model),
                       n_layers=int(spec.get("n_layers") or like.n_layers),
                       bidirectional=bool(spec.get("bidirectional", False)),
                       positions=spec.get("positions", "none"), max_len=like.max_len,
                       dropout=getattr(like, "dropout", 0.0), pooling=getattr(like, "pooling", "mean"))


def _as_in(cfg, model):
    """`cfg` at `model`'s max_len, and causal where `model` is (a causal SPT arm needs a causal
    model: a bidirectional one would see the token it predicts)."""
    cfg = replace(cfg, max_len=model.max_len)
    if getattr(model, "causal", False) and not getattr(cfg, "causal", False):
        cfg = replace(cfg, causal=True, **({"bidirectional": False}
                                           if getattr(cfg, "bidirectional", False) else {}))
    return cfg


def with_models(p: GridPreset, models: Optional[dict], study: str,
                like: Optional[str] = None) -> GridPreset:
    """The preset with your models beside its own.

    models : {name: model config} (TransformerConfig, SSMConfig, SGConvConfig, or a LayerConfig
             holding your own layer class), or {name: layer spec}, the JSON form of a layer that
             `spt study run --model` and the notebooks' `models` parameter carry
             (:func:`layer_from_spec`: sized like the `like` model). For each, every entry of the
             `like` model is copied with coordinate model=name and that config, its max_len set to
             the entry's (the task's length) and made causal where the entry's model is (the
             causal SPT arm of study 01); the task, the objective, the training settings and the lr
             grid are the `like` model's, so your model gets exactly the protocol the preset's own
             does.
    like   : the preset's model whose arms yours copy (default: its first model).
    A preset without a "model" coordinate (studies 00, 01, 04) gets one: its own entries are
    named by their model (:func:`model_name`).
    """
    if not models:
        return p
    dims = [d for d, _ in p.entries[0].coords]

    def named(e: Entry) -> Entry:
        if "model" in dims:
            return e
        at = dims.index("task") + 1 if "task" in dims else 0
        c = list(e.coords)
        return dataclasses.replace(e, coords=tuple(c[:at] + [("model", model_name(e.arm.model))] +
                                                   c[at:]))

    entries = [named(e) for e in p.entries]
    own = list(dict.fromkeys(dict(e.coords)["model"] for e in entries))
    like = like or own[0]
    if like not in own:
        raise ValueError(f"study {study}: like={like!r} is not one of the preset's models {own}")
    for name, cfg in models.items():
        if name in own:
            raise ValueError(f"study {study}: your model's name {name!r} is one of the preset's "
                             f"own models {own}; choose another name")
        if isinstance(cfg, (str, dict)):
            like_cfg = next(e.arm.model for e in entries if dict(e.coords)["model"] == like)
            cfg = layer_from_spec(cfg, like_cfg, f"study {study}: models[{name!r}]")
        if not hasattr(cfg, "max_len") or not hasattr(cfg, "d_model"):
            raise TypeError(f"study {study}: models[{name!r}] must be a model config "
                            f"(TransformerConfig, SSMConfig, SGConvConfig or "
                            f"spt.layer_config.LayerConfig), got {type(cfg).__name__}")
        for e in [e for e in entries if dict(e.coords)["model"] == like]:
            arm = dataclasses.replace(e.arm, model=_as_in(cfg, e.arm.model), note="")
            coords = tuple((d, name if d == "model" else v) for d, v in e.coords)
            entries.append(Entry(coords, e.ref, arm))
    return dataclasses.replace(p, entries=tuple(entries))


def grid_study(study: str, presets: dict, dims: str):
    """The `cells()` and `run()` of a grid study.

    cells(preset, *, data_root, seeds, device, dry, tasks, models) -> [Cell]: pick the preset,
    check its data (failing before anything trains, saying what to run), one Cell per entry x seed.
    run(preset, out_dir, *, data_root, seeds, workers, device, tasks, models) -> Dataset over
    (`dims`): run or reuse every cell. models: your model configs beside the preset's own
    (:func:`with_models`; adds or extends the "model" dimension).
    """
    def chosen(preset: str, data_root, tasks, models) -> GridPreset:
        """The preset with the chosen tasks, its data checked (what to run if it is missing)."""
        p = only_tasks(pick(presets, preset, study, data_root), tasks, study)
        p = with_models(p, models, study)
        check_data([e.ref for e in p.entries], study)
        return p

    def cells(preset: str = "smoke", *, data_root=None, seeds: Optional[Sequence[int]] = None,
              device: str = "auto", dry=None, tasks: Optional[Sequence[str]] = None,
              models: Optional[dict] = None) -> list[Cell]:
        return grid_cells(chosen(preset, data_root, tasks, models), seeds=seeds, device=device,
                          dry=dry)

    def run(preset: str = "smoke", out_dir="results", *, data_root=None,
            seeds: Optional[Sequence[int]] = None, workers: int = 1, device: str = "auto",
            tasks: Optional[Sequence[str]] = None, models: Optional[dict] = None) -> xr.Dataset:
        p = chosen(preset, data_root, tasks, models)  # built once (model_scales sizes models here)
        print(f"{study} [{preset}]: {p.note}")
        return run_cells(study, grid_cells(p, seeds=seeds, device=device), out_dir,
                         workers=workers)

    def deviations(preset: str = "paper", data_root="DATA"):
        """Where the preset departs from the paper and why (a DataFrame): for the paper preset
        every setting that differs from spt/studies/paper_settings.tsv with its reason
        (:mod:`spt.studies.fidelity`), then how the preset reads ambiguous cells of the paper;
        for the other presets, what they stand in for."""
        p = pick(presets, preset, study, data_root)
        return preset_deviations(study, p)

    run.__doc__ = (f"Run (or reuse) every cell of study {study} with preset `preset` ('smoke' or "
                   f"'paper'); returns a Dataset over ({dims}).")
    return cells, run, deviations


def study_number(study: str) -> str:
    """"02" of "02_transformers_vs_s4": the study column of paper_settings.tsv."""
    return study.split("_", 1)[0]


def preset_deviations(study: str, p: GridPreset):
    """The deviations DataFrame of a grid preset (see grid_study's deviations)."""
    from .fidelity import departures_table
    notes = [(e.coords, e.arm.note) for e in p.entries if e.arm.note]
    if p.name != "paper":  # a stand-in for the paper: what it stands for, not field by field
        return departures_table(study_number(study), [],
                                [({"preset": p.name}, p.note or "not the paper's settings")] + notes)
    cells = [(dict(e.coords), e.arm.stages(e.ref)) for e in p.entries]
    return departures_table(study_number(study), cells, notes)


def spt_arm(preset) -> Arm:
    """SPT arm of a Table 4 (Preset) or Table 5 (SSMPreset) row."""
    return Arm(model=preset.model, objective=preset.objective, pretrain=preset.pretrain,
               train=preset.finetune, row=getattr(preset, "row", ()))


TRANSFORMER_SCRATCH_NOTE = ("Table 4 gives no from-scratch settings: the masked row's model and "
                            "finetuning settings, trained until validation stops improving")


def scratch_arm(preset) -> Arm:
    """From-scratch arm of a row: its own scratch settings (SSM rows: Table 5's, or Gu et al.'s
    for HiPPO S4, with their model and task options) or the finetuning settings (Transformer rows:
    the paper gives no separate ones)."""
    own = getattr(preset, "scratch", None)
    if own is not None:
        return Arm(model=preset.scratch_model or preset.model, train=own,
                   note=getattr(preset, "scratch_note", ""), row=preset.scratch_row,
                   task_options=preset.scratch_options)
    return Arm(model=preset.model, train=preset.finetune, note=TRANSFORMER_SCRATCH_NOTE,
               row=preset.row)
