"""When two configurations make the same run: the one rule behind resuming a training run from its
``last.pt`` (:mod:`spt.train.engine`) and reusing a study cell's result file
(:mod:`spt.studies.machinery.cells`).

Two configurations (JSON-like dicts, nested) are the same run when they are equal after
:func:`identity`:

* JSON form: tuples are lists, keys sorted, other values as ``str``;
* the fields named in ``ignore`` are left out of every dict, at any depth: by default
  :data:`spt.config.EXECUTION_FIELDS` (where and how fast a run executes: device, workers,
  progress bar, compile, implementation paths, ...), which never change a result, and
  :data:`spt.compat.RETIRED_FIELDS` (such settings as older files stored them);
* a field of :data:`spt.compat.LATER_TRAIN_FIELDS` holding the value that files written before
  it existed ran with is left out, so an older file matches the configuration that made it.

Resuming also ignores ``max_time`` (:data:`RESUMABLE_FIELDS`): a run stopped by its time budget may
continue with a larger one, while a finished result made under another budget is another result.
"""
from __future__ import annotations

import json

from .compat import LATER_TRAIN_FIELDS, RETIRED_FIELDS
from .config import EXECUTION_FIELDS

# what never separates two runs: where and how fast they execute, now and as older files stored it
NOT_IDENTITY = EXECUTION_FIELDS | RETIRED_FIELDS

# TrainConfig fields a run may resume with other values of: those that change only where and how
# fast it runs, and max_time (a run stopped by its budget may resume with a larger one).
RESUMABLE_FIELDS = NOT_IDENTITY | {"max_time"}


def identity(config, ignore=NOT_IDENTITY):
    """The form of `config` that decides whether two configurations are the same run (above)."""
    return _strip(json.loads(json.dumps(config, sort_keys=True, default=str)), frozenset(ignore))


def _strip(config, ignore: frozenset):
    if isinstance(config, dict):
        return {k: _strip(v, ignore) for k, v in config.items() if k not in ignore
                and not (k in LATER_TRAIN_FIELDS and v == LATER_TRAIN_FIELDS[k])}
    if isinstance(config, list):
        return [_strip(v, ignore) for v in config]
    return config


def differences(saved, now, ignore=NOT_IDENTITY) -> list[tuple[str, object, object]]:
    """(dotted path, saved value, current value) of every field where `saved` and `now` are not
    the same run; empty when they are."""
    return _diff(identity(saved, ignore), identity(now, ignore), "")


def _diff(a, b, prefix: str) -> list:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [(prefix.rstrip("."), a, b)]
