"""A denoising loss trained beside the labels, in the same step: Miralles-Gonzalez et al. (2025)'s
"denoising objective within a multi-task learning framework", a from-scratch run's substitute for
a separate self-pretraining pass (``TrainConfig.aux_denoise``).

In each training step every example is corrupted once (:func:`corrupt`): CORRUPT_RATIO of its real
positions (the same exact-count draw as masked pretraining, :class:`~spt.train.objectives.MaskedItems`),
of which RANDOM_SHARE become a random symbol of the task and the rest ``<mask>``. The classifier reads
the corrupted input; a second, per-position head on the same backbone output reconstructs the
original input at every real position (not only the corrupted ones). The loss is

    CE(label) + aux_denoise * mean over real positions of CE(original symbol)   (tokens)
    CE(label) + aux_denoise * mean over real positions of L1(original value)    (continuous)

Values 0.3, 1/3 and weight 1 are the authors' code's (github pablomiralles22/long-transformers,
``text_classification.py``); the paper's own values could not be read. Continuous inputs have no
"random symbol": all their corrupted positions are zeroed and flagged, as masked pretraining does
(our extension; the authors use the loss on the token tasks Text and Retrieval). A pair task
(Retrieval) corrupts and reconstructs both documents: document 2i and 2i + 1 of the pretraining
view (:func:`spt.data.pairs.documents_task`) get their positions from (seed, epoch, 2i) and
(seed, epoch, 2i + 1) (:class:`PairMaskedItems`), and the reconstruction loss averages over the
real positions of both.

Validation and test read the clean input and score the classifier alone, so the selection metric
and the reported accuracy are those of a plain supervised run.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.utils.data import Dataset

from ..data.task import MASK_ID, N_SPECIAL, TaskSpec
from ..models.model import stack_pair
from .objectives import MaskedItems, Supervised, _valid, mask_positions, position_losses

CORRUPT_RATIO = 0.3   # share of an example's real positions corrupted
RANDOM_SHARE = 1 / 3  # share of the corrupted positions given a random symbol instead of <mask>


def corrupt(x: torch.Tensor, masked: torch.Tensor, spec: TaskSpec,
            generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """The corrupted inputs: x (B, L) ids or (B, L, C) values, masked (B, L) bool -> same shape.

    Tokens: each masked position becomes, with probability RANDOM_SHARE, a symbol drawn uniformly
    from the task's own symbols (ids N_SPECIAL .. vocab_size - 1), else ``<mask>``. Values: masked
    positions are zeroed (the encoder's mask channel flags them).
    """
    if not spec.is_tokens:
        return x.masked_fill(masked[..., None], 0.0)
    draw = torch.rand(x.shape, generator=generator, device=x.device)
    random_ids = torch.randint(N_SPECIAL, spec.vocab_size, x.shape, generator=generator,
                               device=x.device, dtype=x.dtype)
    out = x.masked_fill(masked, MASK_ID)
    return torch.where(masked & (draw < RANDOM_SHARE), random_ids, out)


class PairMaskedItems(Dataset):
    """A pair task's `dataset` whose item i also holds "masked" (L1_i,) and "masked2" (L2_i,)
    bool: the corrupted positions of its two documents, :func:`mask_positions` for (seed, epoch,
    2i) and (seed, epoch, 2i + 1)."""

    def __init__(self, dataset, ratio: float, seed: int, epoch: int):
        self.dataset, self.ratio, self.seed, self.epoch = dataset, ratio, seed, epoch

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict:
        item = self.dataset[i]
        i = int(i)
        return {**item,
                "masked": mask_positions(len(item["inputs"]), self.ratio, self.seed, self.epoch,
                                         2 * i),
                "masked2": mask_positions(len(item["inputs2"]), self.ratio, self.seed,
                                          self.epoch, 2 * i + 1)}


class JointDenoising(Supervised):
    """Supervised classification plus a weighted denoising loss on the same corrupted input.

    step(model, batch, generator) -> (loss, stats). In training the model is called as
    ``model(corrupted, valid, masked, aux=True)`` and returns ((B, n_classes) logits,
    (B, L, V or C) reconstructions) (:func:`spt.models.model.joint_model`); in evaluation
    (``model.training`` False) as a plain classifier on the clean input. Reported metrics are the
    classifier's (loss = its CE) plus, on training epochs, ``denoise_loss``.
    """

    def __init__(self, spec: TaskSpec, weight: float):
        if spec.is_regression:
            raise ValueError(f"TrainConfig.aux_denoise: task {spec.name!r} is a regression task; "
                             f"the joint denoising loss is built beside a classifier. Set "
                             f"aux_denoise=0 for it")
        if weight <= 0:
            raise ValueError(f"TrainConfig.aux_denoise must be > 0 to use the joint loss, got "
                             f"{weight!r}")
        super().__init__(spec)
        self.weight = weight

    def epoch_data(self, dataset, seed: int, epoch: int):
        """Items with their corrupted positions ("masked", and "masked2" for a pair task),
        drawn from (seed, epoch, index)."""
        if self.spec.pair:
            return PairMaskedItems(dataset, CORRUPT_RATIO, seed, epoch)
        return MaskedItems(dataset, CORRUPT_RATIO, seed, epoch)

    def step(self, model, batch: dict, generator: Optional[torch.Generator] = None):
        if not model.training:
            return super().step(model, batch, generator)
        masked = batch.get("masked")
        if masked is None or (self.spec.pair and batch.get("masked2") is None):
            raise ValueError("the joint denoising loss needs each item's corrupted positions "
                             "(batch['masked'], and 'masked2' for a pair task): read the training "
                             "data through JointDenoising.epoch_data")
        x, seen = batch["inputs"], corrupt(batch["inputs"], masked, self.spec, generator)
        if self.spec.pair:
            x2 = batch["inputs2"]
            seen2 = corrupt(x2, batch["masked2"], self.spec, generator)
            logits, recon = model(seen, batch.get("valid"), masked, inputs2=seen2,
                                  valid2=batch.get("valid2"), masked2=batch["masked2"], aux=True)
            x, valid = stack_pair(x, batch.get("valid"), x2, batch.get("valid2"))
            valid = _valid({"inputs": x, "valid": valid})
        else:
            logits, recon = model(seen, batch.get("valid"), masked, aux=True)
            valid = _valid(batch)
        loss, stats = self.label_loss(logits, batch["label"])
        per_pos, _, _ = position_losses(recon, x, valid, self.spec.is_tokens)
        n_pos = valid.sum().clamp_min(1).float()
        stats.update(aux_sum=per_pos.sum(), aux_n=n_pos)
        return loss + self.weight * per_pos.sum() / n_pos, stats

    def metrics(self, s: dict) -> dict:
        out = super().metrics(s)
        if "aux_sum" in s:
            out["denoise_loss"] = float(s["aux_sum"]) / max(float(s["aux_n"]), 1.0)
        return out
