"""Data for the `smoke` presets: small, generated offline, made once and cached.

The smoke presets run every study on a laptop CPU in seconds to a minute, with data that needs no
network: the embedded digits scans (a stand-in for LRA Image / sCIFAR), generated ListOps with
short expressions, generated Pathfinder images at 32x32 (the release's smallest resolution), and a
synthetic regression in BIDMC's .ts format (:func:`write_synthetic_bidmc`).
Numbers from smoke runs check the pipeline; they are not the paper's results.

    root = smoke_data_root()   # ~/.cache/spt/smoke-data-v1 (or $SPT_SMOKE_DATA), created on first use

and the smoke sizes: the paper's models shrunk (:func:`shrink`), a few epochs at lr 2e-3
(:func:`smoke_train`), both at once for an arm (:func:`smoke_arm`), and the smoke tasks
(:func:`smoke_listops`, :func:`smoke_digits`).
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
from pathlib import Path

from ...atomic import NotWritableError, atomic_write
from ...config import TrainConfig, replace
from ...data.listops import FOLDER as LISTOPS_FOLDER
from ...data.listops import write_listops
from ...data.pathfinder import pathfinder_dir
from ...data.pathfinder_generator import write_pathfinder
from .arms import Arm, TaskRef

VERSION = 1
# short expressions: 10-100 symbols, depth <= 3, <= 5 arguments
LISTOPS_KNOBS = dict(max_depth=3, max_args=5, min_length=10, max_length=100)
LISTOPS_SPLITS = (600, 150, 150)
PATHFINDER_IMAGES = 600


def default_smoke_root() -> Path:
    env = os.environ.get("SPT_SMOKE_DATA")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "spt" / \
        f"smoke-data-v{VERSION}"


class _written_once:
    """Around writing the generated data into `root`: a folder that cannot be written (a read-only
    home, a full disk) is an error naming SPT_SMOKE_DATA, the one setting that moves it."""

    def __init__(self, root: Path):
        self.root = root

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            raise NotWritableError(self.root, (
                f"cannot write the generated smoke data into {self.root} ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else e.strerror}). Set SPT_SMOKE_DATA to a "
                f"writable folder (e.g. export SPT_SMOKE_DATA=/tmp/spt-smoke-data) or make "
                f"{self.root.parent} writable, then rerun")) from None
        return False


# the laptop presets' generated ListOps (study 13): the smoke knobs, more examples
LAPTOP_LISTOPS_SPLITS = (1000, 200, 500)


def laptop_listops(root=None) -> TaskRef:
    """Generated ListOps for the laptop presets (LAPTOP_LISTOPS_SPLITS, the smoke knobs: depth <= 3,
    10-100 symbols, read at 128 tokens), written once under `root` (default: next to the smoke
    data, laptop-listops-v1)."""
    root = Path(root) if root is not None else default_smoke_root().parent / "laptop-listops-v1"
    folder = root / LISTOPS_FOLDER
    if not (folder / "basic_test.tsv").is_file():
        print(f"spt: writing the laptop presets' ListOps once into {root} (seconds)", file=sys.stderr)
        n_train, n_val, n_test = LAPTOP_LISTOPS_SPLITS
        with _written_once(root):
            write_listops(folder, n_train, n_val, n_test, seed=1, force=True, **LISTOPS_KNOBS)
    return TaskRef("listops", root=str(root), options=(("seq_len", 128),))


def smoke_data_root(root=None) -> Path:
    """A data root holding generated ListOps and Pathfinder-32 (written on first use)."""
    root = Path(root) if root is not None else default_smoke_root()
    listops = root / LISTOPS_FOLDER
    pf = pathfinder_dir(root, 32)
    if not (listops / "basic_test.tsv").is_file() or not (pf / "metadata").is_dir():
        print(f"spt: writing the smoke presets' data once into {root} (generated ListOps, "
              f"Pathfinder-32 and BIDMC-format files, shared by every smoke study, whichever "
              f"tasks it uses; under a minute)", file=sys.stderr)
    with _written_once(root):
        if not (listops / "basic_test.tsv").is_file():
            n_train, n_val, n_test = LISTOPS_SPLITS
            write_listops(listops, n_train, n_val, n_test, seed=0, force=True, **LISTOPS_KNOBS)
        if not (pf / "metadata").is_dir():
            write_pathfinder(pf, PATHFINDER_IMAGES, 32, seed=0, force=True)
        write_synthetic_bidmc(root)
    return root


SYNTHETIC_BIDMC = dict(n_train=240, n_test=60, length=128)


def write_synthetic_bidmc(root) -> Path:
    """BIDMC-format (.ts) regression files with a learnable synthetic signal, for smoke runs.

    Two channels of length 128: a noisy sinusoid and its square; the target is the sinusoid's
    frequency mapped to each vital sign's usual range (RR 5-30, HR 60-120, SpO2 85-100). Read by
    the real BIDMC reader (spt.data.bidmc); the numbers mean nothing clinically.
    """
    import numpy as np

    folder = Path(root) / "bidmc"
    if (folder / "BIDMC32SpO2_TEST.ts").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    n_all = SYNTHETIC_BIDMC["n_train"] + SYNTHETIC_BIDMC["n_test"]
    L = SYNTHETIC_BIDMC["length"]
    freq = rng.uniform(1.0, 8.0, n_all)
    t = np.arange(L) / L
    wave = np.sin(2 * np.pi * freq[:, None] * t + rng.uniform(0, 2 * np.pi, (n_all, 1)))
    x = np.stack([wave + 0.1 * rng.normal(size=wave.shape), wave ** 2], axis=2)
    for target, (lo, hi) in {"RR": (5, 30), "HR": (60, 120), "SpO2": (85, 100)}.items():
        y = lo + (hi - lo) * (freq - 1.0) / 7.0
        for split, rows in (("TRAIN", slice(0, SYNTHETIC_BIDMC["n_train"])),
                            ("TEST", slice(SYNTHETIC_BIDMC["n_train"], n_all))):
            head = ["#synthetic stand-in written by spt.studies.machinery.smoke (not BIDMC data)",
                    f"@problemName BIDMC32{target}", "@timeStamps false", "@missing false",
                    "@univariate false", "@dimensions 2", "@equalLength true",
                    f"@seriesLength {L}", "@targetLabel true", "@data"]
            lines = [":".join(",".join(f"{v:.4f}" for v in x[i, :, c]) for c in range(2))
                     + f":{y[i]:.3f}" for i in range(n_all)[rows]]
            text = "\n".join(head + lines) + "\n"
            atomic_write(folder / f"BIDMC32{target}_{split}.ts", lambda tmp: tmp.write_text(text))
    return folder


# ------------------------------------------------------------------------------------ smoke sizes
SMOKE_EPOCHS = 2


def shrink(model, **sizes):
    """The paper's model reduced to smoke size (its config's smoke_shape, then `sizes`), keeping its
    kind, positions, pooling, causality."""
    base = {**model.smoke_shape, **sizes}
    if getattr(model, "n_ssm", None):  # shared (A, B) copies that still divide the width
        base["n_ssm"] = math.gcd(model.n_ssm, base["d_model"])
    return replace(model, **base)


SMOKE_LR = 2e-3


def smoke_train(cfg: TrainConfig, epochs: int = SMOKE_EPOCHS, **changes) -> TrainConfig:
    """Paper optimisation settings with a smoke budget: few epochs, batch <= 32, no progress bar,
    and lr 2e-3 (the paper's rates, down to 5e-5, move a tiny model nowhere in 2 epochs)."""
    return replace(cfg, **{"epochs": epochs, "batch_size": min(cfg.batch_size, 32),
                           "progress": False, "patience": None, "lr": SMOKE_LR, **changes})


def fit_len(model, seq_len: int):
    """Set the model's max_len to the task's sequence length (and drop local attention blocks that
    no longer divide it)."""
    if getattr(model, "local_block", None) and model.local_block >= seq_len:
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
