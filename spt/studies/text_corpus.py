"""Study 05 — pretraining on a text corpus (paper section 3.5, C.1.5; Table 2's Pythia rows, Table 5's
Pythia row): Pythia 70M (GPT-NeoX, EleutherAI/pythia-70m-deduped) with its Pile-pretrained weights
vs. the same architecture randomly initialised, finetuned on LRA tasks with character / pixel
tokens written as Pythia's own token ids through its own input embedding, as the paper's code does
(see :mod:`spt.models.pretrained_lm` for the mapping).

Grid: task x init x seed, init in {"pretrained", "random"}. One cell = one finetuning run of
:func:`spt.train.engine.fit` with the Supervised objective (spt's engine: best-validation weights,
test accuracy of those, resumable), no regularisation (weight decay 0, Pythia's dropout 0).

    ds = STUDY.run("smoke", "results")   # CPU, offline, tiny GPT-NeoX; Dataset (task, init, seed)
    STUDY.table(ds)                      # ours beside Table 2's "Pythia 70M" rows

The smoke preset cannot download Pythia: "pretrained" there is a 2-layer d=32 GPT-NeoX trained for
150 steps on byte-level English text shipped with Python (standard-library docstrings; made once
and cached beside the smoke data, with its byte-level tokenizer.json), "random" the same
architecture with fresh weights. Its numbers check the pipeline; they are not the paper's.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Optional

import torch
import xarray as xr

from ..compat import LATER_MODEL_FIELDS, without_later_fields
from ..config import TrainConfig, replace, to_dict
from ..models.pretrained_lm import PYTHIA_70M, LMConfig, lm_classifier
from ..models.tiny_lm import TinyLMConfig, train_tiny_text_lm
from ..paper.appendix import PYTHIA_OPTIM, PYTHIA_ROWS
from ..paper.results import TABLE2
from ..paper.rows import PAPER_PATIENCE
from ..train.engine import fit
from ..train.objectives import Supervised
from .machinery.arms import TaskRef, epochs_run, history_curve
from .machinery.cells import scalar_dataset
from .machinery.job import Entry, GridPreset, Job, at_seed
from .machinery.smoke import default_smoke_root, smoke_data_root
from .machinery.stages import StageView
from .machinery.study import Study, need_root
from .machinery.tables import compare_table, spt_gains, with_gains

NAME = "05_text_corpus_pretraining"
INITS = ("pretrained", "random")
# LMConfig.source of the smoke presets: the tiny text LM, trained offline on first use.
SMOKE_LM = "spt-smoke:tiny-gpt-neox"


@dataclass(frozen=True)
class TaskRow:
    """One task of a preset.

    name       : the task coordinate in the results ("listops", "digits", ...).
    task       : loader name: "digits" or a name of :func:`spt.data.registry.load_task`.
    options    : loader options as (key, value) pairs (e.g. (("tokens", True),) for pixel tokens).
    lr, batch_size : finetuning learning rate and (global) batch size (Table 5, Pythia row).
    micro_batch : examples per forward pass (memory only: gradients are accumulated over
                 batch_size / micro_batch of them); None = batch_size.
    warmup, schedule, schedule_steps : the lr schedule (TrainConfig's fields of those names).
    pooling, head : how the classifier pools the LM's outputs and classifies them (None: the
                 preset's pooling, spt's MLP head).
    """

    name: str
    task: str
    lr: float
    batch_size: int
    options: tuple = ()
    micro_batch: Optional[int] = None
    warmup: int = 0
    schedule: str = "constant"
    schedule_steps: Optional[int] = None
    pooling: Optional[str] = None
    head: str = "mlp"

    def __post_init__(self):
        mb = self.micro_batch or self.batch_size
        if self.batch_size % mb:
            raise ValueError(f"TaskRow {self.name!r}: batch_size={self.batch_size} must be a "
                             f"multiple of micro_batch={mb}")

    def ref(self, root: Optional[str]) -> TaskRef:
        return TaskRef(self.task, root=None if self.task == "digits" else root,
                       options=self.options)

    def train_config(self, p: "LMSettings", device: str = "auto") -> TrainConfig:
        mb = self.micro_batch or self.batch_size
        return TrainConfig(lr=self.lr, batch_size=mb, accum_steps=self.batch_size // mb,
                           weight_decay=0.0, epochs=p.epochs, patience=p.patience,
                           progress=p.progress, device=device, warmup_steps=self.warmup,
                           schedule=self.schedule, schedule_steps=self.schedule_steps,
                           **dict(p.optim))

    def lm(self, p: "LMSettings", init: str) -> LMConfig:
        return LMConfig(source=p.source, init=init, revision=p.revision,
                        pooling=self.pooling or p.pooling, head=self.head)


@dataclass(frozen=True)
class LMSettings:
    """What a preset of this study finetunes, and how.

    tasks   : TaskRows; source: GPT-NeoX repo id / folder, or SMOKE_LM for the tiny offline LM.
    epochs, patience : finetuning budget (early stopping on validation accuracy).
    pooling : over valid positions ("last" for a causal LM), where a TaskRow does not say.
    optim   : further TrainConfig fields as (name, value) pairs (the paper's optimiser settings).
    tiny    : the tiny LM's sizes and training (source == SMOKE_LM only).
    threads : torch CPU threads while a cell trains (restored after); None = leave as set. Tiny
              smoke models gain nothing from intra-op threads and lose a lot on a busy machine.
    """

    name: str
    tasks: tuple
    source: str
    epochs: int
    patience: Optional[int]
    seeds: tuple = (0,)
    pooling: str = "last"
    revision: Optional[str] = None
    progress: bool = True
    tiny: Optional[TinyLMConfig] = None
    threads: Optional[int] = None
    optim: tuple = ()
    note: str = ""


# The paper's Pythia rows (spt.paper.appendix.PYTHIA_ROWS: Table 5, C.1.5, the authors' configs).
PAPER_TASKS = tuple(TaskRow(task, task, **row) for task, row in PYTHIA_ROWS.items())
PAPER_LM_OPTIM = tuple(PYTHIA_OPTIM.items())

SETTINGS = {
    "smoke": LMSettings(
        "smoke",
        (TaskRow("listops", "listops", 1e-3, 32, options=(("seq_len", 128),)),
         TaskRow("digits", "digits", 1e-3, 32,
                 options=(("size", 8), ("n_train", 100), ("tokens", True)))),
        source=SMOKE_LM, epochs=4, patience=None, progress=False, tiny=TinyLMConfig(), threads=1,
        note="CPU smoke run: a 2-layer d=32 GPT-NeoX pretrained for 150 steps on byte-level "
             "standard-library docstrings stands in for Pythia 70M; generated ListOps (<= 100 "
             "symbols) and 8x8 digits as 17 pixel tokens stand in for LRA. lr 1e-3, 4 epochs. It "
             "checks the pipeline; its numbers are not the paper's."),
    "paper": LMSettings(
        "paper", PAPER_TASKS, source=PYTHIA_70M, epochs=200, patience=PAPER_PATIENCE,
        optim=PAPER_LM_OPTIM,
        note="Pythia 70M (deduped) vs. random init, Table 5 learning rates and batch sizes, the "
             "authors' schedules, pooling and heads, no regularisation, at most 200 epochs or 2 "
             "days per run, early stopping on validation (patience 10, after the warmup)."),
}


def settings(name: str) -> LMSettings:
    """SETTINGS[name], or an error listing the presets."""
    if name not in SETTINGS:
        raise ValueError(f"study {NAME}: unknown preset {name!r}; choose from "
                         f"{', '.join(SETTINGS)}")
    return SETTINGS[name]


def smoke_lm_dir(tiny: TinyLMConfig, root=None) -> Path:
    """Where the tiny text LM of `tiny` is cached (beside the smoke data; keyed by its config)."""
    key = hashlib.sha1(json.dumps(dataclasses.asdict(tiny), sort_keys=True).encode()).hexdigest()
    return Path(root or default_smoke_root()) / f"tiny-gpt-neox-v2-{key[:10]}"


def lm_dict(lm: LMConfig) -> dict:
    """How a cell stores its LMConfig: its fields, those of LATER_MODEL_FIELDS left out at the
    value runs written before them had (so those runs still resume and count as their cell)."""
    return without_later_fields(dataclasses.asdict(lm), LATER_MODEL_FIELDS)


def resolve_source(lm: LMConfig, tiny: Optional[TinyLMConfig]) -> LMConfig:
    """`lm` with SMOKE_LM replaced by the cached tiny LM's folder (training it on first use)."""
    if lm.source != SMOKE_LM:
        return lm
    if tiny is None:
        raise ValueError(f"LMConfig.source={SMOKE_LM!r} needs the preset's `tiny` config")
    return replace(lm, source=str(train_tiny_text_lm(smoke_lm_dir(tiny), tiny)))


def run_cell(ref: TaskRef, lm: LMConfig, train: TrainConfig,
             tiny: Optional[TinyLMConfig], threads: Optional[int], run_dir: Path) -> xr.Dataset:
    """Cell.run: finetune GPT-NeoX (`lm`) on `ref` with `train` (at its seed); scalars + per-epoch
    curves."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _finetune_cell(ref, lm, train, tiny, Path(run_dir))
    finally:
        torch.set_num_threads(before)


def _finetune_cell(ref: TaskRef, lm: LMConfig, train: TrainConfig,
                   tiny: Optional[TinyLMConfig], run_dir: Path) -> xr.Dataset:
    task = ref.load()
    lm_resolved = resolve_source(lm, tiny)  # before seeding: training the tiny LM draws numbers
    torch.manual_seed(train.seed)  # random init and the new head
    model = lm_classifier(lm_resolved, task.spec)
    n_params = sum(p.numel() for p in model.parameters())
    meta = {"lm": lm_dict(lm), "spec": dataclasses.asdict(task.spec)}
    r = fit(model, Supervised(task.spec), task, train, Path(run_dir) / "finetune",
            stage="finetune", meta=meta, resume=True)
    m = task.spec.score
    values = {f"test_{m}": r.test_metrics[m], f"val_{m}": r.val_metrics[m], "steps": r.steps,
              "best_epoch": r.best_epoch, "epochs_run": epochs_run(r.history),
              "n_parameters": n_params, "seq_len": task.spec.seq_len,
              "time": float(r.history["time"].values[-1])}
    return scalar_dataset(values, curve_train_loss=history_curve(r.history, "train_loss"),
                          **{f"curve_train_{m}": history_curve(r.history, f"train_{m}"),
                             f"curve_val_{m}": history_curve(r.history, f"val_{m}")})


@dataclass(frozen=True)
class LMFinetune(Job):
    """One cell's job: finetune the GPT-NeoX of `lm` on the task with `train` (a Job, see
    :mod:`spt.studies.machinery.job`). tiny: the smoke preset's tiny LM (trained on first use); threads:
    torch CPU threads while it trains (None: as set)."""

    lm: LMConfig
    train: TrainConfig
    tiny: Optional[TinyLMConfig] = None
    threads: Optional[int] = None
    row: tuple = ()
    note: str = ""

    def to_dict(self) -> dict:
        return {"lm": lm_dict(self.lm), "train": to_dict(self.train),
                "tiny_lm": dataclasses.asdict(self.tiny) if self.tiny else None}

    @property
    def seed(self) -> int:
        return self.train.seed

    def at(self, seed: int, device: Optional[str] = None, paths=None) -> "LMFinetune":
        return dataclasses.replace(self, train=at_seed(self.train, seed, device, paths))

    def run(self, task, run_dir) -> xr.Dataset:
        return run_cell(task, self.lm, self.train, self.tiny, self.threads, run_dir)

    def stages(self, ref: TaskRef) -> list:
        return [StageView("finetune", self.train, self.lm, ref, row=self.row)]

    def dry(self, dry) -> "LMFinetune":
        return dataclasses.replace(self, train=dry.train(self.train))


def _grid(name: str, data_root=None) -> GridPreset:
    """The GridPreset of SETTINGS[name]: one LMFinetune per task x init."""
    p = settings(name)
    root = str(smoke_data_root()) if p.source == SMOKE_LM else need_root(data_root, NAME)
    entries = []
    for row in p.tasks:
        note = (f"micro-batches of {row.micro_batch} (gradient accumulation to the paper's batch "
                f"{row.batch_size}): memory only" if row.micro_batch else "")
        for init in INITS:
            job = LMFinetune(row.lm(p, init), row.train_config(p), p.tiny, p.threads,
                             row=("pythia", row.name), note=note)
            entries.append(Entry((("task", row.name), ("init", init)), row.ref(root), job))
    return GridPreset(name, tuple(entries), seeds=p.seeds, note=p.note)


PRESETS = {name: partial(_grid, name) for name in SETTINGS}


def table(ds: xr.Dataset):
    """Mean test accuracy (%) per init x task, beside Table 2's Pythia 70M rows, then the gain of
    the Pile-pretrained weights over random init, paired by seed: mean, 95% interval, seeds
    ahead."""
    rows = [("pretrained", {"init": "pretrained"}, "Pythia 70M"),
            ("random init", {"init": "random"}, "Pythia 70M (Rand Init)")]
    gains = spt_gains(ds, [("pretrained - random init", "pretrained", "random")])
    return with_gains(compare_table(ds, rows, TABLE2), gains)


STUDY = Study(NAME, "Table 2's Pythia rows: Pythia 70M pretrained on the Pile vs. random init",
              ("task", "init", "seed"), PRESETS, table)
