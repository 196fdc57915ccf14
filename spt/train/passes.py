"""One pass over a dataset: the batches of a training epoch, the DataLoader that reads them, moving
a batch to the device, and :func:`evaluate` (a full pass without gradients)."""
from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from ..config import TrainConfig
from ..data.collate import pad_collate
from . import distributed as D


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int,
                  group: int = 1) -> list[list[int]]:
    """The shuffled batches of one epoch; depends only on (n, batch_size, seed, epoch, group).

    group : items that travel together, items ``group * i ... group * i + group - 1`` (a pair
            task's two documents, :class:`spt.data.pairs.DocumentsDataset`): the groups are
            shuffled and a batch holds `batch_size` groups, ``batch_size * group`` items, as the
            authors' AAN loader batches pairs and its collate stacks both documents of each.
    """
    if n % group:
        raise ValueError(f"epoch_batches: {n} items do not split into groups of {group}")
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    perm = torch.randperm(n // group, generator=g).tolist()
    if group == 1:
        return [perm[i:i + batch_size] for i in range(0, n, batch_size)]
    return [[group * p + k for p in perm[i:i + batch_size] for k in range(group)]
            for i in range(0, n // group, batch_size)]


def item_group(dataset) -> int:
    """How many consecutive items of `dataset` a batch takes together (its ``group``; 1 if none)."""
    return int(getattr(dataset, "group", 1))


def _loader_generator(seed: int) -> torch.Generator:
    """A DataLoader draws its workers' base seed from its generator, or else from the global RNG;
    giving it its own keeps the global RNG (dropout) identical in a resumed run."""
    return torch.Generator().manual_seed(seed)


class NonFiniteInputError(ValueError):
    """An example of a dataset holds NaN or infinity in its inputs or its label."""


def check_finite_inputs(batch: dict, indices, split: str) -> None:
    """Refuse a collated batch whose float inputs or labels hold NaN or infinity, naming the split
    and the example's index (its position in the split's dataset), before any of it reaches a
    model or a loss. indices : the dataset positions of the batch's rows, in order.

    Checked on the CPU copy only (the DataLoader's output, before :func:`to_device`): no device
    sync. Token inputs (integers) and tensors a dataset already put on a device are not checked."""
    for key, what in (("inputs", "inputs"), ("inputs2", "second document"), ("label", "label")):
        v = batch.get(key)
        if v is None or not v.is_floating_point() or v.device.type != "cpu":
            continue
        # a NaN or infinity makes the sum non-finite: one cheap reduction for the common case
        # (a sum that overflows only sends the batch to the exact test below)
        if bool(torch.isfinite(v.sum())):
            continue
        finite = torch.isfinite(v)
        if bool(finite.all()):
            continue
        row = int((~finite).reshape(len(v), -1).any(1).nonzero()[0])
        raise NonFiniteInputError(
            f"example {indices[row]} of the {split} split (its dataset[{indices[row]}]) holds NaN "
            f"or infinity in its {what}: fix or drop that example in the data (training and "
            f"evaluation need finite numbers); stopped before it reached the model, and nothing "
            f"written so far was changed")


def to_device(batch: dict, device) -> dict:
    """Move a collated batch to `device`. A batch without padding gets ``valid=None``, decided here
    once per batch on the CPU copy (no device sync): attention then takes its no-mask fast path
    (flash-attn, or SDPA without a mask) without ever reading the mask on the device."""
    out = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    for key in ("valid", "valid2"):  # valid2: the second document of a pair task
        v = batch.get(key)
        if v is not None and v.device.type == "cpu" and bool(v.all()):
            out[key] = None
    return out


def autocast(device: torch.device, cfg: TrainConfig):
    return torch.autocast(device.type, dtype=torch.bfloat16,
                          enabled=cfg.amp and device.type == "cuda")


def loader(dataset, batches: list[list[int]], cfg: TrainConfig, device, seed: int) -> DataLoader:
    """A DataLoader over fixed batches of indices; pinned memory and prefetching on CUDA."""
    workers = cfg.num_workers
    return DataLoader(dataset, batch_sampler=batches, collate_fn=pad_collate, num_workers=workers,
                      pin_memory=cfg.pin_memory and device.type == "cuda",
                      prefetch_factor=cfg.prefetch_factor if workers else None,
                      generator=_loader_generator(seed))


@torch.no_grad()
def evaluate(model, objective, dataset, cfg: TrainConfig, device=None, seed: int = 12345,
             env: D.DistEnv = D.SINGLE, split: str = "evaluated") -> dict:
    """Metrics of `model` on `dataset` (deterministic: fixed masking seed, no dropout). split :
    the dataset's name in the error for a non-finite example (:func:`check_finite_inputs`).

    Under torchrun each rank evaluates a contiguous part and the summed statistics are
    all-reduced, so every rank returns the same metrics.
    """
    device = device or next(model.parameters()).device
    if len(dataset) == 0:
        raise ValueError("evaluate() got an empty dataset")
    was_training = model.training
    model.eval()
    bs = cfg.eval_batch_size or 4 * cfg.batch_size  # no gradients: bigger batches fit
    parts = D.eval_shards(len(dataset), bs, env)
    items = objective.epoch_data(dataset, seed, 0)  # masks: a function of (seed, index), any rank
    batches = loader(items, [ix for ix, _ in parts], cfg, device, seed)
    gen = torch.Generator(device=device).manual_seed(seed + 7919 * env.rank)
    totals: dict = {}
    for batch, (ix, w) in zip(batches, parts):
        check_finite_inputs(batch, ix, split)
        with autocast(device, cfg):
            _, stats = objective.step(model, to_device(batch, device), gen)
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v.detach().float() * w
    model.train(was_training)
    return objective.metrics(D.all_reduce_sums(totals, env))
