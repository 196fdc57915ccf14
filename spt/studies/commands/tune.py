"""`spt tune`: measure ahead the implementation paths of every distinct model and shape of a study.

For each distinct task and model of the preset's cells (one seed: the others share its shapes) it
runs the cell's own stages, as ``spt study check`` does, at each stage's own batch and for a few
steps, with every module's paths measured on the device (:func:`spt.train.paths.tuning`: no budget,
whatever the run's length). The choices go to the cache (:mod:`spt.train.paths_cache`), where the
study's own runs find them, so its cells pay nothing to measure; a second call answers from the
cache and says so.

    rows = tune("04_data_scales", preset="smoke", device="cpu")
    spt tune 04_data_scales --preset smoke --device cpu
"""
from __future__ import annotations

from typing import Callable, Optional

from ...train import paths_cache
from ...train.paths import tuning
from .check import check


def tune(study, *, preset: str = "paper", data_root=None, device: str = "auto",
         only: Optional[str] = None, log: Callable[[str], None] = print) -> list[dict]:
    """One row per study cell, stage, module group and candidate path: kind, shape, path,
    milliseconds, difference from the reference, "chosen" / "slower" / "skipped: why", and how it
    was decided ("measured" now, "cached" earlier, "pinned" by the preset). A cell that fails is
    reported by its error row."""
    rows: list = []
    seen = [0]

    def collect(r) -> None:  # the runs each cell's check made, as it ends
        for stage, chosen in found[seen[0]:]:
            rows.extend({"cell": r.name, "stage": stage, **row} for row in chosen.rows())
        if not r.ok:
            rows.append({"cell": r.name, "stage": "", "kind": "", "shape": "", "path": "",
                         "ms": None, "vs_ref": None, "error": None, "status": r.status,
                         "how": ""})
        seen[0] = len(found)

    with tuning() as found:
        check(study, preset=preset, data_root=data_root, batch=None, device=device, only=only,
              distinct=True, log=log, after=collect)
    return rows


def tune_summary(rows: list[dict]) -> str:
    """How many groups were measured now and how many answered from the cache, and where it is."""
    groups = {(r["cell"], r["stage"], r["kind"], r["shape"], r["how"]) for r in rows if r["kind"]}
    measured = sum(g[-1] == "measured" for g in groups)
    cached = sum(g[-1] == "cached" for g in groups)
    return (f"{measured} choices measured now, {cached} answered from the cache "
            f"({paths_cache.cache_dir()}); the study's runs on this device take them")
