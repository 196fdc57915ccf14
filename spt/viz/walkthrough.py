"""Teaching figures for notebooks/10_walkthrough.ipynb: a pixel task as a sequence, and masked
denoising (what the model sees, what it must fill in, what it fills in).

    plot_sequence(task, index=0)                            # image + the flat 1-D sequence
    plot_masked_reconstructions(model, task, objective)     # original | masked | reconstruction
"""
from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure

from ..config import ObjectiveConfig
from ..data.collate import pad_collate
from ..data.task import Task
from ..train.objectives import Denoising


def _side(task: Task) -> int:
    side = int(math.isqrt(task.spec.seq_len))
    if side * side != task.spec.seq_len or task.spec.d_input != 1:
        raise ValueError(f"task {task.spec.name!r}: these figures need a square one-channel pixel "
                         f"task (seq_len a square, d_input=1); got seq_len={task.spec.seq_len}, "
                         f"d_input={task.spec.d_input}")
    return side


def plot_sequence(task: Task, index: int = 0, split: str = "train") -> Figure:
    """An image of a pixel task next to the sequence the model actually receives.

    Pixels that are vertical neighbours in the image are `side` positions apart in the sequence
    (dotted lines mark each image row), which is what makes the task long-range.
    """
    side = _side(task)
    item = getattr(task, split)[index]
    x = item["inputs"][:, 0].numpy()                         # (L,)
    fig = Figure(figsize=(11, 2.8), layout="constrained")
    a0, a1 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 4]})
    a0.imshow(x.reshape(side, side), cmap="gray_r")
    a0.set(title=f"label {int(item['label'])}", xticks=[], yticks=[])
    a1.plot(np.arange(x.size), x, lw=0.8, color="k")
    for r in range(side, x.size, side):
        a1.axvline(r, color="0.7", lw=0.5, ls=":")
    a1.set(xlabel="position in the sequence", ylabel="pixel value (standardised)",
           title=f"the same image as a sequence of {x.size} pixels (rows of {side}, dotted)")
    return fig


@torch.no_grad()
def plot_masked_reconstructions(model: torch.nn.Module, task: Task, objective: ObjectiveConfig,
                                n: int = 4, split: str = "val", seed: int = 0) -> Figure:
    """For `n` images: the original, the masked input (masked pixels shown in red), and the
    model's reconstruction (its predictions at the masked pixels, the rest as given).

    model : a pretraining model (per-position outputs (B, L, 1)), e.g. ``pretrain(...).model``.
    """
    side = _side(task)
    ds = getattr(task, split)
    batch = pad_collate([ds[i] for i in range(min(n, len(ds)))])
    gen = torch.Generator().manual_seed(seed)
    corrupted, masked, targets, at = Denoising(objective, task.spec).corrupt(batch, gen)
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = model(corrupted.to(dev), batch["valid"].to(dev), masked.to(dev)).float().cpu()
    model.train(was)
    recon = torch.where(masked[..., None], out, targets)
    lo, hi = float(targets.min()), float(targets.max())
    fig = Figure(figsize=(2.2 * batch["inputs"].shape[0], 6.6), layout="constrained")
    axes = fig.subplots(3, batch["inputs"].shape[0], squeeze=False)
    for j in range(batch["inputs"].shape[0]):
        img = targets[j, :, 0].reshape(side, side).numpy()
        m = masked[j].reshape(side, side).numpy()
        shown = np.ma.masked_array(corrupted[j, :, 0].reshape(side, side).numpy(), mask=m)
        axes[0, j].imshow(img, cmap="gray_r", vmin=lo, vmax=hi)
        axes[1, j].imshow(np.where(m, 1.0, np.nan), cmap="Reds", vmin=0, vmax=1.5)
        axes[1, j].imshow(shown, cmap="gray_r", vmin=lo, vmax=hi)
        axes[2, j].imshow(recon[j, :, 0].reshape(side, side).numpy(), cmap="gray_r", vmin=lo, vmax=hi)
        for i in range(3):
            axes[i, j].set(xticks=[], yticks=[])
    err = (out[..., 0] - targets[..., 0]).abs()[masked].mean().item()
    for i, t in enumerate(("original", f"input: {objective.mask_ratio:.0%} masked (red)",
                           "reconstruction")):
        axes[i, 0].set_ylabel(t, fontsize=8)
    fig.suptitle(f"masked denoising: mean |error| on masked pixels {err:.3f} "
                 f"(predicting the mean everywhere: "
                 f"{(targets[..., 0] - targets[..., 0][batch['valid']].mean()).abs()[masked].mean():.3f})",
                 fontsize=9)
    return fig


def plot_histories(histories: dict, metric: str = "val_accuracy") -> Figure:
    """Per-epoch `metric` and train loss of several runs.

    histories : {label: RunResult.history} (xarray Datasets over "epoch"), e.g.
                {"SPT, finetuning": ft.history, "from scratch": sc.history}.
    """
    fig = Figure(figsize=(10, 3.3), layout="constrained")
    a0, a1 = fig.subplots(1, 2)
    for k, (label, h) in enumerate(histories.items()):
        if metric not in h or "train_loss" not in h:
            raise ValueError(f"plot_histories: history {label!r} lacks {metric!r} or 'train_loss' "
                             f"(it has {sorted(h.data_vars)})")
        scale = 100 if metric.endswith("accuracy") else 1
        ls = "--" if "scratch" in label else "-"
        a0.plot(h.epoch, h[metric] * scale, ls, color=f"C{k}", label=label)
        a1.plot(h.epoch, h["train_loss"], ls, color=f"C{k}", label=label)
    a0.set(xlabel="epoch", ylabel=metric.replace("_", " ") + (" (%)" if metric.endswith("accuracy")
                                                              else ""), title=metric.replace("_", " "))
    a1.set(xlabel="epoch", ylabel="train loss", yscale="log", title="training loss")
    a0.legend(fontsize=8)
    return fig
