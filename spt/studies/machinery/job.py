"""What a study cell trains (a job), the preset's rows of jobs (entries), and a preset.

    entry = Entry((("task", "text"), ("init", "spt")), TaskRef("text", root="DATA"), arm)
    preset = GridPreset("paper", (entry, ...), seeds=(0, 1, 2), note="Table 4 rows, LRA data")

A :class:`Job` is one way to train on a task: :class:`spt.studies.machinery.arms.Arm` (scratch, or SPT ->
finetune), study 05's Pythia finetuning (:class:`spt.studies.text_corpus.LMFinetune`) and study
06's kernel probe (:class:`spt.studies.kernel_decay.KernelProbe`). The study runner
(:class:`spt.studies.machinery.study.Study`) turns each entry x seed into a
:class:`spt.studies.machinery.cells.Cell` holding the entry's job at that seed (:meth:`Job.at`),
whatever the job.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

from ...config import replace


class Job:
    """The interface every job implements (a frozen dataclass in practice).

    to_dict()            -> dict: what the job trains, JSON-able (its TrainConfigs with their seed)
    seed                 : the seed every run of the job trains with (each of its TrainConfigs
                           carries it)
    at(seed, device=None, paths=None) -> Job: the job at `seed` (TrainConfig.seed of every
                            stage), on `device` at implementation `paths` where given (.device,
                            .paths; None: as the job has them): what a cell trains, and, with
                            the task, what its result file stores (:meth:`cell_config`)
    run(task, run_dir)   -> xr.Dataset: train (resuming what run_dir holds) and report the cell's
                            values; task is a TaskRef (loaded in the worker) or a Task
    stages(ref)          -> [StageView]: the stages it trains, for the plan and the fidelity check
    dry(dry)             -> Job: the job shrunk by a DryRun / FewSteps (spt.studies.commands.check,
                            spt.studies.machinery.laptop)
    task_ref(ref)        -> TaskRef: the task it reads (a job may need loader options of its own)
    note                 : how the job reads the paper, or what it stands in for ("" = nothing)
    """

    note: str = ""

    def to_dict(self) -> dict:
        raise NotImplementedError

    @property
    def seed(self) -> int:
        raise NotImplementedError

    def at(self, seed: int, device: Optional[str] = None, paths=None) -> "Job":
        raise NotImplementedError

    def cell_config(self, ref) -> dict:
        """The configuration stored with the cell's result: the task, the job, the seed."""
        return {"task": ref.to_dict(), **self.to_dict(), "seed": self.seed}

    def run(self, task, run_dir):
        raise NotImplementedError

    def stages(self, ref) -> list:
        raise NotImplementedError

    def dry(self, dry) -> "Job":
        raise NotImplementedError

    def task_ref(self, ref):
        return ref


@dataclass(frozen=True)
class FunctionJob(Job):
    """A job of your own: `fn(run_dir) -> xr.Dataset` (the cell's metrics, without its coords)
    with `config` as its identity, so :func:`~spt.studies.machinery.cells.run_cells` keeps, reuses
    and refuses its results as it does a study's. fn must be picklable (a module-level function or
    a functools.partial of one) to run in worker processes; its task reference is unused (None).

        Cell({"size": 8, "seed": 0}, None, FunctionJob(partial(train, 8), {"size": 8}))
    """

    fn: Callable
    config: dict
    seed: int = 0

    def to_dict(self) -> dict:
        return dict(self.config)

    def cell_config(self, ref) -> dict:
        return dict(self.config)

    def at(self, seed: int, device: Optional[str] = None, paths=None) -> "FunctionJob":
        return dataclasses.replace(self, seed=int(seed))

    def run(self, task, run_dir):
        return self.fn(run_dir)


def at_seed(cfg, seed: int, device: Optional[str], paths):
    """`cfg` (a TrainConfig) with the run's seed, and its device and implementation paths where
    given (None: as `cfg` has them)."""
    execution = {k: v for k, v in (("device", device), ("paths", paths)) if v is not None}
    return replace(cfg, seed=int(seed), **execution)


@dataclass(frozen=True)
class Entry:
    """One row of a study preset: its coords (without seed), the task to load, the job to train."""

    coords: tuple  # ((dim, value), ...) in the study's dim order
    ref: object    # TaskRef
    job: Job

    @property
    def task(self):
        """The task the job reads (its own loader options applied)."""
        return self.job.task_ref(self.ref)


@dataclass(frozen=True)
class GridPreset:
    """A study preset: entries x seeds. `note` says what it stands for (printed by notebooks)."""

    name: str
    entries: tuple
    seeds: tuple = (0,)
    note: str = ""
