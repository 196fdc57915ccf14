"""What a study cell trains (a job), the preset's rows of jobs (entries), and a preset.

    entry = Entry((("task", "text"), ("init", "spt")), TaskRef("text", root="DATA"), arm)
    preset = GridPreset("paper", (entry, ...), seeds=(0, 1, 2), note="Table 4 rows, LRA data")

A :class:`Job` is one way to train on a task: :class:`spt.studies.machinery.arms.Arm` (scratch, or SPT ->
finetune), study 05's Pythia finetuning (:class:`spt.studies.text_corpus.LMFinetune`) and study
06's kernel probe (:class:`spt.studies.kernel_decay.KernelProbe`). The study runner
(:class:`spt.studies.machinery.study.Study`) turns each entry x seed into a
:class:`spt.studies.machinery.cells.Cell` through the same five methods, whatever the job.
"""
from __future__ import annotations

from dataclasses import dataclass


class Job:
    """The interface every job implements (a frozen dataclass in practice).

    to_dict()            -> dict: what the job trains, JSON-able; with the task and the seed it
                            is the cell's configuration (its identity: :meth:`cell_config`)
    run(task, seed, run_dir) -> xr.Dataset: train (resuming what run_dir holds) and report the
                            cell's values; task is a TaskRef (loaded in the worker) or a Task
    stages(ref)          -> [StageView]: the stages it trains, for the plan and the fidelity check
    with_execution(device, paths) -> Job: the same job on another device, at other
                                        implementation paths (TrainConfig.device, .paths: what
                                        never changes a result)
    dry(dry)             -> Job: the job shrunk by a DryRun / FewSteps (spt.studies.commands.check,
                            spt.studies.machinery.laptop)
    task_ref(ref)        -> TaskRef: the task it reads (a job may need loader options of its own)
    note                 : how the job reads the paper, or what it stands in for ("" = nothing)
    """

    note: str = ""

    def to_dict(self) -> dict:
        raise NotImplementedError

    def cell_config(self, ref, seed: int) -> dict:
        """The configuration stored with the cell's result: the task, the job, the seed."""
        return {"task": ref.to_dict(), **self.to_dict(), "seed": int(seed)}

    def run(self, task, seed: int, run_dir):
        raise NotImplementedError

    def stages(self, ref) -> list:
        raise NotImplementedError

    def with_execution(self, device: str = "auto", paths="auto") -> "Job":
        raise NotImplementedError

    def dry(self, dry) -> "Job":
        raise NotImplementedError

    def task_ref(self, ref):
        return ref


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
