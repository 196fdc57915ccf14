"""Every paper preset, field by field, against the paper's and the authors' settings.

``spt/paper/settings.tsv`` holds the settings each paper run should have, with the
source of every value: the paper's text and tables first, the authors' released configs where the
paper defers to them. It is written by hand, never derived from spt's presets, so a preset that
drifts shows up here:

    ref = reference("02", "s4", "text", "finetune")     # {field: Reference(value, source)}
    found = compare("02", coords, stage_view)           # [Finding] where ours differs
    departures_table("02", entries)                     # the DataFrame a notebook shows

A difference is either a stated departure (:data:`spt.studies.machinery.departures.DEPARTURES`: the field,
our value and the reason) or an unstated drift, which ``tests/studies/test_paper_fidelity.py``
rejects.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

from .departures import reason_for
from .stages import StageView, stage_values
from .values import ANY, parse_value, same, show  # noqa: F401  (show: public here)

TABLE = Path(__file__).resolve().parents[2] / "paper" / "settings.tsv"

# The fields a reference line may set (units as spt.studies.machinery.stages.stage_values gives them).
FIELDS = {
    "lr": "learning rate (the supervised run's, or pretraining's)",
    "lrs": "learning rates tried as full runs, the best on validation kept",
    "batch": "examples per optimiser step (a pair task's pretraining: pairs, both documents of "
             "each read, as the paper's PT BSZ and the authors' AAN loader count them)",
    "wd": "AdamW weight decay",
    "wd_groups": "which parameters are decayed: matrices, or all without an optimiser hint",
    "warmup": "linear warmup steps",
    "schedule": "lr after warmup: constant, cosine, plateau (ReduceLROnPlateau), multistep",
    "schedule_steps": "length of the cosine in steps (none: the run's step cap)",
    "plateau_patience": "validations without improvement before the plateau schedule cuts the lr",
    "plateau_factor": "the plateau schedule's lr factor",
    "lr_milestones": "epochs at which the multistep schedule cuts the lr",
    "lr_gamma": "the multistep schedule's lr factor",
    "epochs": "epoch cap (none: bounded by steps or time)",
    "max_steps": "step cap (none: bounded by epochs or time)",
    "betas": "AdamW betas",
    "grad_clip": "gradient-norm clipping (none: off)",
    "budget_h": "wall-clock budget of the stage, hours",
    "patience": "early stopping: epochs without a better validation score (none: off)",
    "selection": "validation metric that picks the kept checkpoint",
    "dropout": "model dropout",
    "tie_dropout": "SSM dropout mask shared along the sequence (S4's tie_dropout)",
    "layers": "number of blocks",
    "width": "model width (d_model, the SSM's H)",
    "heads": "attention heads",
    "ff": "Transformer feed-forward width",
    "positions": "Transformer position encoding",
    "state": "SSM state size N",
    "n_ssm": "S4: trainable copies of (A, B) shared across the channels (the width: one each)",
    "norm": "SSM block normalisation: layer or batch",
    "prenorm": "SSM block: norm before the convolution (true) or after the residual (false)",
    "ssm_lr": "learning rate of the state-space parameters (A, B; DLR: Lambda, C), no weight decay",
    "dt_lr": "learning rate of dt, no weight decay (run: the run's lr)",
    "dt_min": "smallest initial step size dt (DLR: damping range of Lambda)",
    "dt_max": "largest initial step size dt",
    "pooling": "sequence pooling of the classifier",
    "head": "classifier head after pooling: linear or mlp",
    "causal": "unidirectional model",
    "glu": "SSM block output: Linear + GLU",
    "objective": "pretraining objective: masked or causal",
    "loss": "pretraining loss: ce or l1",
    "mask_ratio": "masked pretraining: share of positions masked",
    "seq_len": "input length read from the data",
    "tokens": "inputs as tokens (pixel intensities through an embedding)",
    "validation": "how the validation split is made",
    "budget_epochs": "epochs of the whole cell, pretraining and finetuning together",
}
STAGES = ("pretrain", "finetune", "scratch")
# the row names of the table's model column (the presets' Arm.row / StageView.row)
MODEL_KEYS = ("transformer", "transformer_causal", "transformer_rotary",
              "transformer_rotary_causal", "s4", "s4_random", "dlr", "dlr_random",
              "pythia", "mixer", "mixer_causal", "free_conv")


@dataclass(frozen=True)
class Line:
    """One line of the table: keys (a frozenset each, empty = any), settings, source."""

    number: int
    study: frozenset
    model: frozenset
    task: frozenset
    stage: frozenset
    settings: tuple  # ((field, raw value), ...)
    source: str

    @property
    def specificity(self) -> tuple:
        return tuple(bool(k) for k in (self.study, self.model, self.task, self.stage))

    def matches(self, study: str, model: str, task: str, stage: str) -> bool:
        return all(not keys or value in keys for keys, value in
                   ((self.study, study), (self.model, model), (self.task, task),
                    (self.stage, stage)))


@dataclass(frozen=True)
class Reference:
    """The paper's (or the authors') value of one field and where it comes from."""

    value: object
    source: str
    line: int


def _keys(text: str, where: str) -> frozenset:
    text = text.strip()
    if text == "*":
        return frozenset()
    keys = frozenset(k.strip() for k in text.split(","))
    if "" in keys:
        raise ValueError(f"{where}: empty name in {text!r}")
    return keys


def read_table(path: Path = TABLE) -> tuple:
    """The table's lines; a ValueError names the line of any malformed one."""
    path = Path(path)
    return _read_table(path, path.stat().st_mtime_ns)


@lru_cache(maxsize=8)
def _read_table(path: Path, mtime_ns: int) -> tuple:
    out = []
    header_seen = False
    for i, text in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip() or text.startswith("#"):
            continue
        cols = text.split("\t")
        where = f"{path}:{i}"
        if not header_seen:
            if cols[:6] != ["study", "model", "task", "stage", "settings", "source"]:
                raise ValueError(f"{where}: expected the header study/model/task/stage/settings/"
                                 f"source, got {cols}")
            header_seen = True
            continue
        if len(cols) != 6:
            raise ValueError(f"{where}: expected 6 tab-separated columns, got {len(cols)}")
        study, model, task, stage, settings, source = cols
        pairs = []
        for item in settings.split():
            field, sep, raw = item.partition("=")
            if not sep or field not in FIELDS:
                raise ValueError(f"{where}: {item!r} is not field=value with a field of "
                                 f"spt.studies.machinery.fidelity.FIELDS")
            pairs.append((field, raw))
        line = Line(i, _keys(study, where), _keys(model, where), _keys(task, where),
                    _keys(stage, where), tuple(pairs), source.strip())
        unknown = (line.model - set(MODEL_KEYS)) | (line.stage - set(STAGES))
        if unknown:
            raise ValueError(f"{where}: unknown model or stage name(s) {sorted(unknown)}")
        if not source.strip():
            raise ValueError(f"{where}: every line names its source")
        out.append(line)
    return tuple(out)


def reference(study: str, model: str, task: str, stage: str, table: Path = TABLE) -> dict:
    """{field: Reference} for one stage of one row: each field from the most specific matching
    line (specificity: study, then model, then task, then stage). Two equally specific lines
    that set one field are an error naming both."""
    best: dict = {}
    for line in read_table(Path(table)):
        if not line.matches(study, model, task, stage):
            continue
        for field, raw in line.settings:
            have = best.get(field)
            if have is None or line.specificity > have[0]:
                best[field] = (line.specificity, line, raw)
            elif line.specificity == have[0]:
                raise ValueError(f"{table}: lines {have[1].number} and {line.number} both set "
                                 f"{field} for study {study}, {model}, {task}, {stage}")
    return {f: Reference(parse_value(raw), line.source, line.number)
            for f, (_, line, raw) in best.items()}


@dataclass(frozen=True)
class Finding:
    """Where a stage differs from the reference: the field, both values, the source of theirs and
    our reason (empty when no departure states one: an unstated drift)."""

    coords: tuple
    stage: str
    row: tuple
    field: str
    ours: object
    theirs: object
    source: str
    reason: str

    @property
    def stated(self) -> bool:
        return bool(self.reason)


def compare(study: str, coords: dict, view: StageView) -> list:
    """The Findings of one stage of a paper cell (none when it matches the table)."""
    if not view.row:
        raise ValueError(f"study {study}, cell {coords}: the {view.stage} stage names no row of "
                         f"{TABLE.name} (StageView.row): a paper preset must say what it follows")
    model, task = view.row
    ref = reference(study, model, task, view.stage)
    ours = stage_values(view)
    out = []
    for field, r in ref.items():
        if field not in ours or same(ours[field], r.value):
            continue
        reason = reason_for(study, model, task, view.stage, field, ours[field])
        out.append(Finding(tuple(coords.items()), view.stage, view.row, field, ours[field],
                           r.value, r.source, reason))
    return out


def findings(study: str, cells: Iterable) -> list:
    """Findings of every stage of every (coords, [StageView]) of a preset."""
    out = []
    for coords, views in cells:
        for v in views:
            out += compare(study, dict(coords), v)
    return out


def departures_table(study: str, cells: Iterable, notes: Optional[Iterable] = None):
    """One row per distinct departure (field, stage, ours, theirs, reason) with the cells it
    concerns, then the free-text readings (`notes`: (coords, text) pairs, e.g. how a table cell
    with three numbers is read). An unstated drift says so in its reason column."""
    import pandas as pd
    groups: dict = {}
    for f in findings(study, cells):
        key = (f.stage, f.field, show(f.ours), show(f.theirs), f.reason, f.source)
        groups.setdefault(key, []).append(_cell_name(dict(f.coords)))
    rows = [{"cells": _join(cells_), "stage": stage, "field": field, "ours": ours,
             "paper": theirs, "why": reason or "UNSTATED: drifted from the paper (fix the preset "
             "or state the departure in spt/studies/machinery/departures.py)", "source": source}
            for (stage, field, ours, theirs, reason, source), cells_ in groups.items()]
    by_note: dict = {}
    for coords, text in notes or ():
        by_note.setdefault(text, []).append(_cell_name(dict(coords)))
    rows += [{"cells": _join(c), "stage": "", "field": "reading", "ours": "", "paper": "",
              "why": text, "source": ""} for text, c in by_note.items()]
    return pd.DataFrame(rows, columns=["cells", "stage", "field", "ours", "paper", "why",
                                       "source"])


def _cell_name(coords: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in coords.items() if k != "seed")


def _join(names: list, most: int = 6) -> str:
    names = list(dict.fromkeys(names))
    if len(names) <= most:
        return "; ".join(names)
    return "; ".join(names[:most]) + f"; ... ({len(names)} cells)"
