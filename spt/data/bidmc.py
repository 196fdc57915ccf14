"""BIDMC vital signs (Monash TSER archive): regress respiratory rate, heart rate or SpO2 from
4,000 steps of PPG and ECG (2 channels).

On disk: ``ROOT/bidmc/`` holding ``BIDMC32{RR,HR,SpO2}_{TRAIN,TEST}.ts`` (directly or in a
``BIDMC32XX/`` subfolder). The ``.ts`` format: ``@tag value`` header lines (``#`` comments), then
after ``@data`` one example per line, channels separated by ``:``, values by ``,``, the target
last: ``v,v,...,v:v,v,...,v:target``. Only ``@timeStamps false`` files are read (all of BIDMC's).

Items: inputs FloatTensor (4000, 2) as stored (no input normalisation, as S4); label FloatTensor
() = the target mapped to [-1, 1] by :class:`LabelScaler` fitted on the TRAIN file's range (paper
C.3); ``dataset.label_scaler.inverse`` maps predictions back to breaths / beats per minute or %.
R^2 is unchanged by this affine map. Splits: the official TEST file is ``test``; the archive has no
validation split, so a fixed-seed 1/7 of TRAIN is held out as ``val`` (S4's 0.6 / 0.1 / 0.3
proportions without re-shuffling train and test together).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .cache import cached_arrays
from .digits import TensorSequenceDataset
from .errors import DataFormatError, DataMissingError
from .fractions import holdout_splits
from .task import SPLITS, Task, TaskSpec, no_examples_in, split_task, too_few_to_hold_out

TARGETS = ("RR", "HR", "SpO2")
BIDMC_DIR = Path("bidmc")
SEQ_LEN = 4000
VAL_FRACTION, VAL_SEED = 1 / 7, 1234
FORMAT_VERSION = 1


@dataclass(frozen=True)
class LabelScaler:
    """Affine map of [lo, hi] (the training targets' range) onto [-1, 1], and back."""

    lo: float
    hi: float

    def __call__(self, y):
        return 2.0 * (y - self.lo) / max(self.hi - self.lo, 1e-12) - 1.0

    def inverse(self, z):
        return (z + 1.0) / 2.0 * (self.hi - self.lo) + self.lo


class RegressionDataset(TensorSequenceDataset):
    """TensorSequenceDataset with float labels (already scaled) and the scaler that made them."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor, label_scaler: LabelScaler):
        super().__init__(inputs, labels)
        self.label_scaler = label_scaler

    def select(self, positions) -> "RegressionDataset":
        """The rows at `positions` (used by :func:`spt.data.fractions.nested_subset`)."""
        idx = torch.as_tensor(positions, dtype=torch.long)
        return RegressionDataset(self.inputs[idx], self.labels[idx], self.label_scaler)


def read_ts(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(x (N, L, C) float32, y (N,) float64) from a regression .ts file; errors name path:line."""
    header, rows, targets, shape = {}, [], [], None
    with open(path, encoding="latin-1") as f:
        in_data = False
        for lineno, line in enumerate(f, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if not in_data:
                if not line.startswith("@"):
                    raise DataFormatError(f"{path}:{lineno}: expected an @tag or @data line")
                tag, _, value = line[1:].partition(" ")
                if tag.lower() == "data":
                    in_data = True
                    if header.get("timestamps", "false") != "false":
                        raise DataFormatError(f"{path}: @timeStamps true is not supported")
                    if header.get("targetlabel") != "true":
                        raise DataFormatError(f"{path}: no '@targetLabel true'; not a "
                                              f"regression .ts file")
                else:
                    header[tag.lower()] = value.strip().lower()
                continue
            *channels, target = line.split(":")
            try:
                values = [np.array(c.split(","), dtype=np.float32) for c in channels]
                y = float(target)
            except ValueError as e:
                raise DataFormatError(f"{path}:{lineno}: not a number ({e})") from None
            lens = [len(v) for v in values]
            if not channels or len(set(lens)) != 1 or (shape and (len(lens), lens[0]) != shape):
                want = f"{shape[0]} channels of {shape[1]}" if shape else "channels of equal"
                raise DataFormatError(f"{path}:{lineno}: expected {want} values, got channel "
                                      f"lengths {lens}")
            shape = (len(lens), lens[0])
            if not np.isfinite(y) or not all(np.isfinite(v).all() for v in values):
                raise DataFormatError(f"{path}:{lineno}: missing or non-finite values")
            rows.append(np.stack(values, 1))
            targets.append(y)
    if not rows:
        raise DataFormatError(f"{path}: no @data rows (the file is empty or cut short); fetch it "
                              f"again (`spt data prepare bidmc`)")
    return np.stack(rows), np.asarray(targets)


def _find(data_dir: Path, name: str, root) -> Path:
    for p in (data_dir / name, data_dir / name.split("_")[0] / name):
        if p.is_file():
            return p
    raise DataMissingError(f"{name} not found in {data_dir}. Run `spt data prepare bidmc "
                           f"--root {root}`.")


def bidmc_splits(n_train: int, n_test: int) -> list[np.ndarray]:
    """Rows of train / val / test, the TRAIN file's rows first: val = a fixed-seed VAL_FRACTION
    (1/7) of TRAIN, test = the TEST file."""
    return holdout_splits(n_train, n_test, VAL_FRACTION, VAL_SEED)


def load_bidmc(root, target: str = "HR", folder: Optional[Path] = None) -> Task:
    """BIDMC32 `target` in {RR, HR, SpO2}: inputs (4000, 2), labels scaled to [-1, 1]."""
    if target not in TARGETS:
        raise ValueError(f"bidmc target must be one of {TARGETS}, got {target!r}")
    data_dir = Path(folder) if folder is not None else Path(root) / BIDMC_DIR
    files = {s: _find(data_dir, f"BIDMC32{target}_{s.upper()}.ts", root) for s in ("train", "test")}

    def build(w):
        (xtr, ytr), (xte, yte) = read_ts(files["train"]), read_ts(files["test"])
        if xtr.shape[1:] != xte.shape[1:]:
            raise DataFormatError(f"{files['test']}: examples of shape {xte.shape[1:]} differ from "
                                  f"{files['train']}'s {xtr.shape[1:]}")
        w.put("x", np.concatenate([xtr, xte]))
        w.put("y", np.concatenate([ytr, yte]))
        return {"n_train": len(xtr), "lo": float(ytr.min()), "hi": float(ytr.max())}

    arrays, extra = cached_arrays(data_dir, f"bidmc-{target}", FORMAT_VERSION, files.values(),
                                  build)
    x = torch.from_numpy(np.array(arrays["x"], dtype=np.float32))
    scaler = LabelScaler(extra["lo"], extra["hi"])
    y = torch.from_numpy(scaler(np.asarray(arrays["y"], np.float64)).astype(np.float32))
    parts = bidmc_splits(extra["n_train"], len(y) - extra["n_train"])
    ds = [RegressionDataset(x[torch.from_numpy(i)], y[torch.from_numpy(i)], scaler) for i in parts]
    why = {"train": no_examples_in(files["train"]), "test": no_examples_in(files["test"]),
           "val": too_few_to_hold_out(VAL_FRACTION, extra["n_train"], f"the rows of {files['train']}")}
    spec = TaskSpec(name="bidmc", seq_len=x.shape[1], num_classes=None, d_input=x.shape[2],
                    mask_ratio=0.25, description=f"BIDMC32{target}: regress {target} from "
                    f"{x.shape[1]} steps of PPG + ECG; labels scaled to [-1, 1] on train")
    return split_task(spec, dict(zip(SPLITS, ds)), why,
                      f"rerun `spt data prepare bidmc --root {root or 'ROOT'}`")
