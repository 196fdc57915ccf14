"""A study of the paper as one object: its presets, its grid, and everything a notebook calls.

    from spt.studies.transformers_vs_s4 import STUDY as study
    ds = study.run("smoke", "results")     # run or reuse every cell -> Dataset over study.dims
    study.table(ds)                        # ours beside the paper's table
    study.deviations("paper")              # where the paper preset departs from the paper, and why
    study.cells("paper", data_root=DIR)    # the cells, for spt study check / plan

A study's presets are functions ``preset(data_root) -> GridPreset``; a preset's entries carry
jobs (:mod:`spt.studies.machinery.job`), so studies 05 and 06, whose jobs are not Arms, run through the same
code as the rest. Each cell is one result file (:func:`spt.studies.machinery.cells.run_cells`).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import xarray as xr

from ...data.errors import DataMissingError
from ...results import other_code_note
from .cells import Cell, run_cells
from .job import GridPreset

# what a smoke preset's numbers mean, printed when one runs
SMOKE_SAYS = ("  smoke preset: it checks that every stage runs, end to end, in seconds; its models are "
              "too small and train too briefly to learn, so scores at chance (test accuracy 0.1 "
              "on 10 classes) are expected. The laptop and paper presets measure.")


def need_root(data_root, study: str) -> str:
    if not data_root:
        raise ValueError(f"study {study}: the paper preset reads the real data sets: pass "
                         f"data_root (a folder made with `spt data prepare TASK --root DIR`)")
    return str(data_root)


def check_data(refs: Sequence, study: str) -> None:
    """Fail before training if any task's data folder is missing, listing what to run."""
    from ...data.registry import TASK_DIRS
    missing = {}
    for r in refs:
        if r.name in TASK_DIRS and r.root is not None and \
                not (Path(r.root) / TASK_DIRS[r.name]).exists():
            missing[r.name] = f"spt data prepare {r.name} --root {r.root}"
    if missing:
        raise DataMissingError(
            f"study {study}: data missing for {', '.join(missing)}. Run:\n  " +
            "\n  ".join(missing.values()) +
            "\nor run the study with preset='smoke' (generated / embedded data, CPU).")


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


def cell_line(coords: dict) -> str:
    """A cell's coordinates as one line, ``task=listops model=s4 init=spt seed=0``: what
    ``only`` patterns match."""
    return " ".join(f"{k}={v}" for k, v in coords.items())


def preset_cells(p: GridPreset, *, seeds: Optional[Sequence[int]] = None, device: str = "auto",
                 dry=None, paths="auto") -> list[Cell]:
    """One Cell per entry x seed. dry: a :class:`spt.studies.commands.check.DryRun` or
    :class:`spt.studies.machinery.laptop.FewSteps` (the same cells, shrunk) or None. device and
    paths: where and how the cells execute (TrainConfig.device, .paths), not what they compute:
    a cell's identity is the same on every device and at every path."""
    out = []
    for e in p.entries:
        for s in (tuple(seeds) if seeds else p.seeds):
            ref, job = e.task, e.job.at(int(s), device, paths)
            if dry is not None:
                ref, job = dry.ref(ref, job), job.dry(dry)
            out.append(Cell({**dict(e.coords), "seed": int(s)}, ref, job))
    return out


@dataclass(frozen=True)
class SettingsPresets:
    """A study whose presets are settings objects, and whose notebook takes those settings as its
    parameters rather than a preset name (the quickstart's :class:`Setup`).

    preset_of  : fn(settings object) -> GridPreset (``study.preset(Setup(n_train=50))``).
    parameters : fn(preset name) -> the notebook's parameters that run that preset (what
                 ``spt study run NAME --preset P`` passes it); a ValueError for an unknown name.
    """

    preset_of: Callable
    parameters: Callable


@dataclass(frozen=True)
class Study:
    """One study of the paper (one notebook): its name, title, grid dims and presets.

    name     : "02_transformers_vs_s4": its notebook and its results folder under out_dir (a
               Study is a path-like of its name, so ``out_dir / STUDY`` is that folder).
    title    : what it compares (the paper's table or figure).
    dims     : the grid dims of its results, seed last.
    presets  : {preset name: fn(data_root) -> GridPreset} ("smoke", "laptop", "paper", ...).
    make_table : fn(Dataset) -> DataFrame: our results beside the paper's.
    takes_models : whether your models (``models=``) can run beside the preset's own.
    takes_baselines : whether cheap-prior baselines (``baselines=``) can run beside its scratch
               arms (:func:`spt.studies.machinery.baselines.with_baselines`).
    models_like : the preset's model whose arms yours copy ("": its first model).
    settings : for a study whose presets are settings objects and whose notebook takes their
               fields (the quickstart's): how to read them (:class:`SettingsPresets`). None: its
               presets are names and GridPresets, and its notebook takes `preset`.
    finish   : fn(Dataset) -> Dataset applied to the combined results (None: as they are).
    no_paper : for a study without a paper preset, where the paper's settings are run instead
               (what ``deviations("paper")`` says).
    headline : fn(Dataset) -> one line: what the results show (the laptop results table's row,
               :mod:`spt.studies.laptop_results`). None: each init's mean beside scratch's.
    extra_tables : fn(Dataset) -> [(title, DataFrame)] shown under the study's table there (None:
               none).
    """

    name: str
    title: str
    dims: tuple
    presets: dict
    make_table: Callable
    takes_models: bool = False
    takes_baselines: bool = False
    models_like: str = ""
    settings: Optional[SettingsPresets] = None
    finish: Optional[Callable] = None
    no_paper: str = ""
    headline: Optional[Callable] = None
    extra_tables: Optional[Callable] = None

    def __str__(self) -> str:
        return self.name

    def __fspath__(self) -> str:
        return self.name

    @property
    def number(self) -> str:
        """"02": the study column of spt/paper/settings.tsv."""
        return self.name.split("_", 1)[0]

    def preset(self, preset="smoke", data_root=None, *, tasks: Optional[Sequence[str]] = None,
               models: Optional[dict] = None,
               baselines: Optional[Sequence[str]] = None) -> GridPreset:
        """The preset (a name, a GridPreset, or an object preset_from understands) with only
        `tasks`, your `models` beside its own (:func:`spt.studies.machinery.yours.with_models`) and the
        cheap-prior `baselines` beside its scratch arms
        (:func:`spt.studies.machinery.baselines.with_baselines`)."""
        if isinstance(preset, str):
            if preset not in self.presets:
                raise ValueError(f"study {self.name}: unknown preset {preset!r}; choose from "
                                 f"{', '.join(self.presets)}")
            p = self.presets[preset](data_root)
        elif isinstance(preset, GridPreset):
            p = preset
        elif self.settings is not None:
            p = self.settings.preset_of(preset)
        else:
            raise TypeError(f"study {self.name}: a preset is a name ({', '.join(self.presets)}) "
                            f"or a GridPreset, got {type(preset).__name__}")
        p = only_tasks(p, tasks, self.name)
        if models:
            if not self.takes_models:
                raise ValueError(f"study {self.name} does not take your models (models=); "
                                 f"`spt study list` marks the studies that do")
            from .yours import with_models
            p = with_models(p, models, self.name, like=self.models_like or None)
        if baselines:
            if not self.takes_baselines:
                raise ValueError(f"study {self.name} does not take cheap-prior baselines "
                                 f"(baselines=): its arms are not scratch Transformers or S4s")
            from .baselines import with_baselines
            p = with_baselines(p, baselines, self.name)
        return p

    def cells(self, preset="smoke", *, data_root=None, seeds: Optional[Sequence[int]] = None,
              device: str = "auto", dry=None, tasks: Optional[Sequence[str]] = None,
              models: Optional[dict] = None, only: Optional[str] = None,
              paths="auto") -> list[Cell]:
        """One Cell per entry x seed of the preset; fails before anything trains when a task's
        data folder is missing (saying what to run).

        only : a regular expression; keep only the cells whose "dim=value ..." line (seed
               included) it matches, e.g. "task=(listops|text)"; only their data must exist.
        """
        p = self.preset(preset, data_root, tasks=tasks, models=models)
        seeds = tuple(seeds) if seeds else p.seeds
        if only:
            pattern = re.compile(only)
            hit = [e for e in p.entries
                   if any(pattern.search(cell_line({**dict(e.coords), "seed": s})) for s in seeds)]
            if not hit:
                first = cell_line({**dict(p.entries[0].coords), "seed": seeds[0]})
                raise ValueError(f"study {self.name}: only={only!r} matches none of its cells; "
                                 f"they read like {first!r}")
            p = dataclasses.replace(p, entries=tuple(hit))
        check_data([e.task for e in p.entries], self.name)
        cells = preset_cells(p, seeds=seeds, device=device, dry=dry, paths=paths)
        return [c for c in cells if not only or pattern.search(cell_line(c.coords))]

    def run(self, preset="smoke", out_dir="results", *, data_root=None,
            seeds: Optional[Sequence[int]] = None, workers: int = 1, device: str = "auto",
            paths="auto", tasks: Optional[Sequence[str]] = None, models: Optional[dict] = None,
            baselines: Optional[Sequence[str]] = None) -> xr.Dataset:
        """Run (or reuse) every cell of the preset; returns a Dataset over the study's dims
        (a "model" dim added by your `models`; init values "scratch+<prior>" added by
        `baselines`, cheap priors trained from scratch beside each scratch arm). An empty
        data_root, seeds, tasks, models or baselines (a notebook parameter's default) is none
        given: the preset's own seeds, all its tasks, no models or baselines of yours. workers: cells
        in parallel processes (0: one per core; the smoke preset's cells then run in this
        process); paths: the implementation paths of every run (TrainConfig.paths: "auto",
        "reference" or a mapping); a different `workers`, device or paths agrees up to float
        rounding and reuses the finished cells (:func:`spt.studies.machinery.cells.run_cells`);
        which paths each cell ran is in its provenance (:func:`spt.results.provenance`)."""
        p = self.preset(preset, data_root or None, tasks=tasks, models=models, baselines=baselines)
        check_data([e.task for e in p.entries], self.name)
        print(f"{self.name} [{p.name}]: {p.note}" + (f"\n{SMOKE_SAYS}" if p.name == "smoke" else ""))
        if p.name == "smoke" and workers == 0:  # seconds-long cells: a spawned process per cell
            workers = 1                         # (its imports) would cost more than the cell
        ds = run_cells(self.name, preset_cells(p, seeds=seeds, device=device, paths=paths),
                       out_dir, workers=workers)
        note = other_code_note(ds)  # reused cells made by another spt version: said, not refused
        if note:
            print(note)
        return self.finish(ds) if self.finish is not None else ds

    def stage_views(self, preset="paper", data_root="DATA",
                    tasks: Optional[Sequence[str]] = None) -> list:
        """[(coords, [StageView], seeds)]: what each cell's stages train, for the plan and the
        fidelity check (nothing is read: data_root only names the tasks' folder)."""
        p = self.preset(preset, data_root, tasks=tasks)
        return [(dict(e.coords), e.job.stages(e.task), len(p.seeds)) for e in p.entries]

    def deviations(self, preset="paper", data_root="DATA"):
        """Where the preset departs from the paper and why (a DataFrame): for the paper preset
        every setting that differs from spt/paper/settings.tsv, with its reason
        (:mod:`spt.studies.machinery.fidelity`), then how the preset reads ambiguous cells of the paper;
        for the other presets, what they stand in for."""
        from .departures import readings
        from .fidelity import departures_table
        if preset == "paper" and "paper" not in self.presets and self.no_paper:
            return departures_table(self.number, [], [({"preset": "paper"}, self.no_paper)])
        p = self.preset(preset, data_root)
        notes = [(e.coords, line) for e in p.entries for line in e.job.note.splitlines() if line]
        if p.name != "paper":  # a stand-in for the paper: what it stands for, not field by field
            return departures_table(self.number, [],
                                    [({"preset": p.name}, p.note or "not the paper's settings")]
                                    + notes)
        cells = [(dict(e.coords), e.job.stages(e.task)) for e in p.entries]
        return departures_table(self.number, cells, notes + readings(cells))

    def table(self, ds: xr.Dataset):
        """Our results beside the paper's (the study's own table), with the gains of any
        cheap-prior baselines over scratch under it."""
        from .baselines import baseline_gains
        from .tables import with_gains
        table, extra = self.make_table(ds), baseline_gains(ds)
        if extra is None:
            return table
        return with_gains(table, extra)

