"""Training objectives: self-pretraining (masked / causal denoising) and supervised finetuning.

Each objective turns a padded batch ``{"inputs", "valid", "label"}`` into a loss and a dict of
*summed* statistics (tensors on the model's device, so no host sync per step; no boolean indexing
either: shapes never depend on data, so ``torch.compile`` keeps one graph). ``valid`` may be None
for a batch without padding (the models' fast path);
:meth:`metrics` turns accumulated statistics into numbers. ``score`` names the validation metric
used for checkpoint selection by default (``TrainConfig.select`` overrides it), ``higher_is_better``
its direction, ``metric_names`` the keys :meth:`metrics` returns; ``epoch_data`` gives the items
the objective reads in one pass over a dataset.

Masked denoising (bidirectional models): in each sequence exactly ``max(1, round(ratio * n))`` of
the ``n`` real positions are masked (padding is never masked). Token inputs get the ``<mask>`` id
(:data:`spt.data.task.MASK_ID`); continuous inputs are zeroed and a mask channel is set. The loss
(CE over the vocabulary, or L1 over the values) is taken over masked positions only.

Which positions are masked: in training and evaluation each item brings its own mask
(:meth:`Denoising.epoch_data`, :func:`mask_positions`): drawn by a random generator seeded with
(seed, epoch, dataset index) when the item is read, and padded with the batch (``"masked"``). An
example's mask therefore does not depend on how a global batch is cut over ranks or padded. A batch
without ``"masked"`` (a direct call) draws its masks from the step's generator on the device.

Causal denoising (unidirectional models): position t predicts the input at t+1; the prediction made
at the last real position (which has no successor) and at padding is ignored.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from ..config import ObjectiveConfig
from ..data.task import MASK_ID, TaskSpec


def mask_positions(n: int, ratio: float, seed: int, epoch: int, index: int) -> torch.Tensor:
    """(n,) bool: k = max(1, round(ratio * n)) of a sequence's n positions (none when n = 0).

    The k positions are uniform among the n and depend on (seed, epoch, index) only: numpy's
    generator seeded with them draws them.
    """
    k = min(n, max(1, round(ratio * n)))
    chosen = np.random.default_rng([seed, epoch, index]).permutation(n)[:k]
    masked = np.zeros(n, dtype=bool)
    masked[chosen] = True
    return torch.from_numpy(masked)


class MaskedItems(Dataset):
    """`dataset` whose item i also holds "masked" (L_i,) bool: :func:`mask_positions` of its L_i
    positions for (seed, epoch, i). :func:`~spt.data.collate.pad_collate` pads it with the batch."""

    def __init__(self, dataset, ratio: float, seed: int, epoch: int):
        if seed < 0 or epoch < 0:
            raise ValueError(f"masks are drawn from (seed, epoch, index), which must be >= 0: got "
                             f"seed={seed} (TrainConfig.seed), epoch={epoch}")
        self.dataset, self.ratio, self.seed, self.epoch = dataset, ratio, seed, epoch

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict:
        item = self.dataset[i]
        n = len(item["inputs"])
        return {**item, "masked": mask_positions(n, self.ratio, self.seed, self.epoch, int(i))}


def sample_mask(valid: torch.Tensor, ratio: float,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """(B, L) bool: for each row exactly max(1, round(ratio * n_valid)) valid positions, uniformly
    drawn from `generator`; rows with no valid position get none.

    No host sync: each position's rank in a random order of its row (padding ordered last) is
    compared with the row's count.
    """
    n_valid = valid.sum(1, keepdim=True)
    k = (n_valid.float() * ratio).round().clamp_min(1).long().minimum(n_valid)  # (B, 1)
    scores = torch.rand(valid.shape, generator=generator, device=valid.device, dtype=torch.float64)
    rank = scores.masked_fill(~valid, 2.0).argsort(dim=1).argsort(dim=1)     # padding: last
    return rank < k


def _r2_stats(pred: torch.Tensor, target: torch.Tensor, n_values=None) -> dict:
    """Summed statistics for R^2 = 1 - SSE / SST over the values of pred / target.

    n_values : how many values count (a tensor, for inputs zeroed off the scored positions);
               default: all of them.
    """
    if n_values is None:
        n_values = torch.full((), float(target.numel()), device=target.device)  # no host copy
    return {"sse": ((pred - target) ** 2).sum(), "sum_y": target.sum(),
            "sum_y2": (target ** 2).sum(), "n_values": n_values.float()}


def _r2(s: dict) -> float:
    n = float(s["n_values"])
    if n == 0:
        return float("nan")
    sst = float(s["sum_y2"]) - float(s["sum_y"]) ** 2 / n
    return 1.0 - float(s["sse"]) / sst if sst > 0 else float("nan")


def position_losses(out: torch.Tensor, targets: torch.Tensor, at: torch.Tensor, ce: bool):
    """-> (losses (B, L), pred, tgt): the loss at each position where `at` (B, L) is True and 0
    elsewhere; CE of out (B, L, V) against ids targets (B, L) when `ce`, else the mean L1 over the
    channels of out and targets (B, L, C). pred and tgt are out (as float) and targets with the
    other positions zeroed (masked_fill: no gradient, or NaN, leaks from them)."""
    off = ~at[..., None]
    pred = out.float().masked_fill(off, 0.0)
    if ce:
        tgt = targets.masked_fill(~at, 0)
        losses = F.cross_entropy(pred.flatten(0, 1), tgt.flatten(), reduction="none")
        return losses.view(at.shape).masked_fill(~at, 0.0), pred, tgt
    tgt = targets.float().masked_fill(off, 0.0)
    return (pred - tgt).abs().mean(-1), pred, tgt


def _valid(batch: dict) -> torch.Tensor:
    """batch["valid"] (B, L) bool; all True when the batch has none (no padding)."""
    valid = batch.get("valid")
    if valid is None:
        x = batch["inputs"]
        valid = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    return valid


class Denoising:
    """Self-pretraining objective (masked or causal) for a task.

    step(model, batch, generator) -> (loss, stats); model returns (B, L, V) logits or (B, L, C).
    """

    def __init__(self, cfg: ObjectiveConfig, spec: TaskSpec):
        if cfg.loss == "ce" and not (spec.is_tokens or spec.levels):
            raise ValueError(f"ObjectiveConfig.loss='ce' needs a token task or quantised values "
                             f"(TaskSpec.levels); {spec.name!r} is continuous: use loss='l1'")
        if cfg.loss == "l1" and spec.is_tokens:
            raise ValueError(f"ObjectiveConfig.loss='l1' needs continuous inputs; {spec.name!r} is a "
                             f"token task: use loss='ce'")
        self.cfg, self.spec = cfg, spec
        # By default checkpoints are selected on the validation denoising loss (TrainConfig.select
        # overrides it; the paper presets select as the paper does). The paper (App. C.1) names
        # masked-token accuracy / R^2; on pixel data most masked targets are background, and
        # accuracy then peaks at the trivial "always background" model of the first epoch.
        self.score = "loss"
        self.higher_is_better = False
        self.metric_names = ("loss", "accuracy") if cfg.loss == "ce" else ("loss", "r2")

    def epoch_data(self, dataset, seed: int, epoch: int):
        """The items this objective reads in pass `epoch` of a run seeded `seed`: masked denoising
        gives every item its mask (:class:`MaskedItems`); causal denoising needs none."""
        if self.cfg.kind != "masked":
            return dataset
        return MaskedItems(dataset, self.cfg.mask_ratio, seed, epoch)

    def corrupt(self, batch: dict, generator: Optional[torch.Generator] = None):
        """-> (model inputs, masked (B, L) bool or None, targets, predict_at (B, L) bool).

        batch["valid"] may be None (or absent): no padding. batch["masked"] (B, L), when present,
        says which positions are masked (:meth:`epoch_data`); otherwise `generator` draws them.
        """
        x, valid = batch["inputs"], _valid(batch)
        if self.cfg.kind == "masked":
            masked = batch.get("masked")
            if masked is None:
                masked = sample_mask(valid, self.cfg.mask_ratio, generator)
            elif masked.shape != valid.shape:
                raise ValueError(f"batch['masked'] has shape {tuple(masked.shape)}, expected "
                                 f"{tuple(valid.shape)}: one row per example, one column per "
                                 f"position of 'inputs'")
            if self.spec.is_tokens:
                corrupted = x.masked_fill(masked, MASK_ID)
            else:
                corrupted = x.masked_fill(masked[..., None], 0.0)
            return corrupted, masked, x, masked
        # causal: predict x[t+1] at t; only where t+1 is a real position
        targets = torch.roll(x, shifts=-1, dims=1)
        predict_at = torch.zeros_like(valid)
        predict_at[:, :-1] = valid[:, 1:]
        return x, None, targets, predict_at

    def step(self, model, batch: dict, generator: Optional[torch.Generator] = None):
        """-> (mean loss over scored positions, summed stats). No host sync and no
        data-dependent shapes: off-target positions are zeroed (masked_fill), never dropped."""
        inputs, masked, targets, at = self.corrupt(batch, generator)
        if self.cfg.loss == "ce" and not self.spec.is_tokens:  # CE over intensity levels
            targets = self.spec.level_of(targets[..., 0])        # (B, L, 1) values -> (B, L)
        out = model(inputs, batch.get("valid"), masked)       # (B, L, V) or (B, L, C)
        n = at.sum().clamp_min(1).float()
        losses, pred, tgt = position_losses(out, targets, at, self.cfg.loss == "ce")
        stats = {"loss_sum": losses.sum(), "n": n}
        if self.cfg.loss == "ce":
            stats["correct"] = ((pred.argmax(-1) == tgt) & at).sum().float()
        else:
            stats.update(_r2_stats(pred, tgt, n_values=at.sum() * tgt.shape[-1]))
        return losses.sum() / n, stats

    def metrics(self, s: dict) -> dict:
        n = max(float(s["n"]), 1.0)
        out = {"loss": float(s["loss_sum"]) / n}
        if self.cfg.loss == "ce":
            out["accuracy"] = float(s["correct"]) / n
        else:
            out["r2"] = _r2(s)
        return out


class Supervised:
    """Finetuning / from-scratch objective: CE + accuracy (classification) or MSE + R^2 (regression).

    step(model, batch) -> (loss, stats); model returns (B, num_classes) logits or (B, 1).
    For a pair task (spec.pair) the batch also holds "inputs2" and "valid2" (or valid2 None),
    passed to the model as ``model(inputs, valid, inputs2=..., valid2=...)`` (a dual encoder).
    """

    def __init__(self, spec: TaskSpec):
        self.spec = spec
        self.score = "r2" if spec.is_regression else "accuracy"
        self.metric_names = ("loss", "r2") if spec.is_regression else ("loss", "accuracy")
        self.higher_is_better = True

    def epoch_data(self, dataset, seed: int, epoch: int):
        """The items read in a pass over `dataset`: the items themselves."""
        return dataset

    def _forward(self, model, batch: dict) -> torch.Tensor:
        if not self.spec.pair:
            return model(batch["inputs"], batch.get("valid"))
        if "inputs2" not in batch:
            raise ValueError(f"task {self.spec.name!r} is a pair task but the batch has no "
                             f"'inputs2': its items must hold both sequences (see spt.data.pairs)")
        return model(batch["inputs"], batch.get("valid"), inputs2=batch["inputs2"],
                     valid2=batch.get("valid2"))

    def step(self, model, batch: dict, generator: Optional[torch.Generator] = None):
        return self.label_loss(self._forward(model, batch), batch["label"])

    def label_loss(self, out: torch.Tensor, y: torch.Tensor):
        """-> (mean loss, summed stats) of the model's output `out` (B, n_out) for labels y (B,)."""
        out = out.float()
        n = torch.full((), float(y.shape[0]), device=out.device)  # a fill, not a host copy
        if self.spec.is_regression:
            pred = out[:, 0]
            sq = (pred - y.float()) ** 2
            return sq.mean(), {"loss_sum": sq.sum(), "n": n, **_r2_stats(pred, y.float())}
        losses = F.cross_entropy(out, y, reduction="none")
        stats = {"loss_sum": losses.sum(), "n": n, "correct": (out.argmax(-1) == y).sum().float()}
        return losses.mean(), stats

    def metrics(self, s: dict) -> dict:
        n = max(float(s["n"]), 1.0)
        out = {"loss": float(s["loss_sum"]) / n}
        if self.spec.is_regression:
            out["r2"] = _r2(s)
        else:
            out["accuracy"] = float(s["correct"]) / n
        return out
