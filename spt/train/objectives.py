"""Training objectives: self-pretraining (masked / causal denoising) and supervised finetuning.

Each objective turns a padded batch ``{"inputs", "valid", "label"}`` into a loss and a dict of
*summed* statistics (tensors on the model's device, so no host sync per step);
:meth:`metrics` turns accumulated statistics into numbers. ``score`` names the validation metric
used for checkpoint selection, ``higher_is_better`` its direction.

Masked denoising (bidirectional models): in each sequence exactly ``max(1, round(ratio * n))`` of
the ``n`` real positions are masked (padding is never masked). Token inputs get the ``<mask>`` id
(:data:`spt.data.task.MASK_ID`); continuous inputs are zeroed and a mask channel is set. The loss
(CE over the vocabulary, or L1 over the values) is taken over masked positions only.

Causal denoising (unidirectional models): position t predicts the input at t+1; the prediction made
at the last real position (which has no successor) and at padding is ignored.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ..config import ObjectiveConfig
from ..data.task import MASK_ID, TaskSpec


def sample_mask(valid: torch.Tensor, ratio: float, generator: Optional[torch.Generator] = None):
    """(B, L) bool: for each row exactly max(1, round(ratio * n_valid)) valid positions, uniformly.

    Rows with no valid position get no masked position.
    """
    n_valid = valid.sum(1, keepdim=True)
    k = (n_valid.float() * ratio).round().clamp_min(1).long().minimum(n_valid)
    scores = torch.rand(valid.shape, generator=generator, device=valid.device)
    scores = scores.masked_fill(~valid, 2.0)  # padding sorts last, never chosen
    rank = scores.argsort(dim=1).argsort(dim=1)
    return rank < k


def _r2_stats(pred: torch.Tensor, target: torch.Tensor) -> dict:
    """Summed statistics for R^2 = 1 - SSE / SST (flattened values)."""
    return {"sse": ((pred - target) ** 2).sum(), "sum_y": target.sum(), "sum_y2": (target ** 2).sum(),
            "n_values": torch.tensor(float(target.numel()), device=target.device)}


def _r2(s: dict) -> float:
    n = float(s["n_values"])
    if n == 0:
        return float("nan")
    sst = float(s["sum_y2"]) - float(s["sum_y"]) ** 2 / n
    return 1.0 - float(s["sse"]) / sst if sst > 0 else float("nan")


class Denoising:
    """Self-pretraining objective (masked or causal) for a task.

    step(model, batch, generator) -> (loss, stats); model returns (B, L, V) logits or (B, L, C).
    """

    def __init__(self, cfg: ObjectiveConfig, spec: TaskSpec):
        if cfg.loss == "ce" and not spec.is_tokens:
            raise ValueError(f"ObjectiveConfig.loss='ce' needs a token task; {spec.name!r} is "
                             f"continuous: use loss='l1'")
        if cfg.loss == "l1" and spec.is_tokens:
            raise ValueError(f"ObjectiveConfig.loss='l1' needs continuous inputs; {spec.name!r} is a "
                             f"token task: use loss='ce'")
        self.cfg, self.spec = cfg, spec
        # Checkpoints are selected on the validation denoising loss. The paper (App. C.1) names
        # masked-token accuracy / R^2; on pixel data most masked targets are background, and
        # accuracy then peaks at the trivial "always background" model of the first epoch.
        self.score = "loss"
        self.higher_is_better = False

    def corrupt(self, batch: dict, generator: Optional[torch.Generator] = None):
        """-> (model inputs, masked (B, L) bool or None, targets, predict_at (B, L) bool)."""
        x, valid = batch["inputs"], batch["valid"]
        if self.cfg.kind == "masked":
            masked = sample_mask(valid, self.cfg.mask_ratio, generator)
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
        inputs, masked, targets, at = self.corrupt(batch, generator)
        out = model(inputs, batch["valid"], masked)
        pred, tgt = out[at], targets[at]  # (n, V) / (n, C)
        n = at.sum().clamp_min(1)
        if self.cfg.loss == "ce":
            losses = F.cross_entropy(pred.float(), tgt, reduction="none")
            stats = {"loss_sum": losses.sum(), "n": n.float(),
                     "correct": (pred.argmax(-1) == tgt).sum().float()}
            return losses.sum() / n, stats
        err = (pred.float() - tgt.float()).abs().mean(-1)
        stats = {"loss_sum": err.sum(), "n": n.float(), **_r2_stats(pred.float(), tgt.float())}
        return err.sum() / n, stats

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
    """

    def __init__(self, spec: TaskSpec):
        self.spec = spec
        self.score = "r2" if spec.is_regression else "accuracy"
        self.higher_is_better = True

    def step(self, model, batch: dict, generator: Optional[torch.Generator] = None):
        out = model(batch["inputs"], batch["valid"]).float()
        y = batch["label"]
        n = torch.tensor(float(y.shape[0]), device=out.device)
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
