"""Claims on study cells, so that two runs into one results folder divide the cells between them
(or wait for each other) and never compute a cell twice.

A run claims one cell at a time, when it is about to compute it: ``<cell>.claim`` beside the
cell's result file, a lock file of :mod:`spt.locks` (holder's host, pid and start time; refreshed
every minute while held; stale when that process is gone, or, for another host, when it has not
been refreshed for ten minutes). The claim goes once the result file is in place, or when the cell
fails or the run is interrupted. The same lock names an executed notebook while a run writes it.
"""
from __future__ import annotations

from pathlib import Path

from ... import locks


def claim_file(result: Path) -> Path:
    return Path(result).with_suffix(".claim")


def try_claim(result: Path) -> bool:
    """Claim the cell whose result file is `result`; False if another live run holds it."""
    return locks.acquire(claim_file(result))


def release(result: Path) -> None:
    """Give the claim back (a claim another run has taken over is left to it)."""
    locks.release(claim_file(result))


def holder(result: Path) -> str:
    """Who holds the claim on `result`, in words (:func:`spt.locks.describe`)."""
    return locks.describe(claim_file(result))
