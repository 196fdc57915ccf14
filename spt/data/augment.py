"""Label-preserving data augmentation: the "data-efficiency techniques" of Miralles-González et
al. 2025 ("On the locality bias and results in the Long Range Arena", arXiv 2501.14850), for a
baseline trained from scratch. Their code (github pablomiralles22/long-transformers) is the
source; the paper body was not read.

    from spt.data.registry import augmented
    train = augmented(task.train, task.spec, seed=cfg.seed, epoch=epoch)   # a fresh view per epoch

Item i of pass `epoch` is augmented with numpy's generator seeded by (seed, epoch, i, SALT), so it
depends on nothing else (not the batch, the worker or the order): as the masks of
:class:`spt.train.objectives.MaskedItems`, with a salt so the two draws are independent.

Which task has which is the task's own fact (its ``augmentation`` in
:data:`spt.data.registry.TASKS`); this module holds the augmentations:

* ListOps (:func:`listops_items`): the operands of every operator node in random order
  (:func:`shuffle_listops`).
* CIFAR (image, scifar): AutoAugment's CIFAR-10 policy, horizontal flip, random affine
  (:func:`augment_cifar`).
* DIGITS: the same without the flip (:func:`augment_digits`).
* PATHFINDER (pathfinder, pathx, pathx256): flips both ways, a small random rotation, shift and
  shrink (:func:`augment_pathfinder`).

Pixels are augmented as intensities in [0, 255] (:func:`to_intensities`) and written back in the
item's own encoding: token ids, [-1, 1] levels, or standardised values.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from . import image_ops as ops
from .listops import END, OPERATORS, VOCAB
from .task import N_SPECIAL, TaskSpec

SALT = 0x6175_6731  # fixed: keeps the augmentation draws apart from the masking draws

# ------------------------------------------------------------------------------------- ListOps

OPERATOR_IDS = frozenset(VOCAB[op] for op in OPERATORS)
END_ID = VOCAB[END]
DIGIT_IDS = frozenset(VOCAB[str(d)] for d in range(10))


def shuffle_listops(ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(L,) ListOps token ids -> (L,) the same expression with the operands of every operator
    node in a random order (subtrees move whole), so the value is unchanged: MIN, MAX, MED and
    SUM-mod-10 do not depend on the order of their operands.

    Tokens as :mod:`spt.data.listops` writes them (parentheses dropped): an operator id opens a
    node, the "]" id closes it. Source: Miralles-González et al. 2025's code, which shuffles every
    node of every training example (augment probability 1.0 in their ListOps configs). Raises
    ValueError on a token that is no ListOps symbol or on unbalanced brackets.
    """
    ids = np.asarray(ids)
    stack: list[list[np.ndarray]] = [[]]  # operands so far of each open node; [0]: top level
    heads: list[int] = []                  # the operator id of each open node
    for pos, t in enumerate(ids.tolist()):
        if t in OPERATOR_IDS:
            heads.append(t)
            stack.append([])
        elif t == END_ID:
            if not heads:
                raise ValueError(f"shuffle_listops: ']' at position {pos} closes no operator")
            children = stack.pop()
            order = rng.permutation(len(children))
            stack[-1].append(np.concatenate([[heads.pop()]] + [children[k] for k in order]
                                            + [[END_ID]]))
        elif t in DIGIT_IDS:
            stack[-1].append(np.array([t]))
        else:
            raise ValueError(f"shuffle_listops: token id {t} at position {pos} is not a ListOps "
                             f"symbol (ids {min(VOCAB.values())}..{max(VOCAB.values())}); pass "
                             f"unpadded ListOps items")
    if heads:
        raise ValueError(f"shuffle_listops: {len(heads)} operator(s) never closed by ']'")
    return np.concatenate(stack[0]).astype(ids.dtype) if stack[0] else ids.copy()


# ------------------------------------------------------------------------- pixels <-> intensities

def to_intensities(inputs: torch.Tensor, spec: TaskSpec):
    """An item's pixels as an image of intensities, and the way back.

    inputs : (L,) long token ids N_SPECIAL + level (levels = vocab_size - N_SPECIAL), or
             (L, C) float: values v = 2 k / (levels - 1) - 1 when spec.levels is set (Pathfinder),
             else standardised values (Image, sCIFAR, digits).
    Returns (img, back): img (H, W, C) float64 in [0, 255], H = W = sqrt(L); back(img) -> a
    tensor of the input's shape and dtype. Tokens and levels are rounded to the nearest level.

    Standardised values carry no record of the 0..255 range they came from, so each image's own
    [min, max] is taken as [0, 255] (and mapped back to it). Consequences: AutoContrast is the
    identity on a grey image; Invert / Solarize / Posterize / Equalize act relative to the
    image's own darkest and brightest pixel; fill 0 is the image's darkest value.
    """
    x = torch.as_tensor(inputs)
    n = x.shape[0]
    side = math.isqrt(n)
    if side * side != n:
        raise ValueError(f"task {spec.name!r}: an image augmentation needs square images, but an "
                         f"item has {n} pixels (not a square number)")
    if spec.is_tokens:
        top = spec.vocab_size - N_SPECIAL - 1  # the highest level
        level = x.numpy().astype(np.int64) - N_SPECIAL
        if level.min() < 0 or level.max() > top:
            raise ValueError(f"task {spec.name!r}: pixel token ids must be in {N_SPECIAL}.."
                             f"{N_SPECIAL + top}; pass unmasked, unpadded items")
        img = (level * (ops.MAX / top)).reshape(side, side, 1)

        def back(out):
            k = np.clip(np.rint(out * (top / ops.MAX)), 0, top).astype(np.int64)
            return torch.from_numpy(k.reshape(n) + N_SPECIAL).to(x.dtype)
        return img, back
    v = x.numpy().astype(np.float64).reshape(side, side, -1)
    if spec.levels is not None:
        top = spec.levels - 1
        img = np.clip((v + 1.0) * (ops.MAX / 2), 0.0, ops.MAX)

        def back(out):
            k = np.clip(np.rint(out * (top / ops.MAX)), 0, top)
            return torch.from_numpy((2.0 * k / top - 1.0).reshape(x.shape)).to(x.dtype)
        return img, back
    lo, hi = float(v.min()), float(v.max())
    span = hi - lo if hi > lo else 1.0
    img = (v - lo) * (ops.MAX / span)

    def back(out):
        return torch.from_numpy((lo + out * (span / ops.MAX)).reshape(x.shape)).to(x.dtype)
    return img, back


# --------------------------------------------------------------------------------- AutoAugment

# AutoAugment's CIFAR-10 policy (Cubuk et al. 2019, Table / appendix; as torchvision lists it):
# 25 sub-policies of two (op, probability, magnitude bin 0..9) each; None: the op has none.
CIFAR10_POLICY = (
    (("Invert", 0.1, None), ("Contrast", 0.2, 6)),
    (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
    (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
    (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)),
    (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
    (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
    (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
    (("Equalize", 0.6, None), ("Equalize", 0.5, None)),
    (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
    (("Color", 0.7, 7), ("TranslateX", 0.5, 8)),
    (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
    (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)),
    (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
    (("Solarize", 0.5, 2), ("Invert", 0.0, None)),
    (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.2, None), ("Equalize", 0.6, None)),
    (("Color", 0.9, 9), ("Equalize", 0.6, None)),
    (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)),
    (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
    (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)),
    (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)),
    (("Equalize", 0.8, None), ("Invert", 0.1, None)),
    (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
)
BINS = 10


def magnitude(op: str, level: int, side: int) -> float:
    """The unsigned magnitude of bin `level` (0..9) of `op` on a side x side image (torchvision's
    AutoAugment table): shear 0..0.3 rad, translate 0..150/331 of the side (whole pixels), rotate
    0..30 degrees, enhance factor offsets 0..0.9, posterize 8..4 bits, solarize 255..0."""
    frac = level / (BINS - 1)
    if op in ("ShearX", "ShearY"):
        return 0.3 * frac
    if op in ("TranslateX", "TranslateY"):
        return float(int(150.0 / 331.0 * side * frac))
    if op == "Rotate":
        return 30.0 * frac
    if op in ("Brightness", "Color", "Contrast", "Sharpness"):
        return 0.9 * frac
    if op == "Posterize":
        return float(8 - round(level / ((BINS - 1) / 4)))
    if op == "Solarize":
        return 255.0 * (1.0 - frac)
    raise ValueError(f"magnitude: {op!r} has no magnitude")


SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
          "Contrast", "Sharpness"}


def apply_op(img: np.ndarray, op: str, m: float) -> np.ndarray:
    """One AutoAugment op with signed magnitude m (see :func:`magnitude`); fill 0 (black), as
    torchvision's default. Shears use tan(m) as the factor (torchvision passes m as an angle)."""
    if op == "ShearX":
        return ops.affine(img, shear=(math.tan(m), 0.0))
    if op == "ShearY":
        return ops.affine(img, shear=(0.0, math.tan(m)))
    if op == "TranslateX":
        return ops.affine(img, translate=(m, 0.0))
    if op == "TranslateY":
        return ops.affine(img, translate=(0.0, m))
    if op == "Rotate":
        return ops.affine(img, angle=m)
    if op in ("Brightness", "Color", "Contrast", "Sharpness"):
        return getattr(ops, op.lower())(img, 1.0 + m)
    if op == "Posterize":
        return ops.posterize(img, int(m))
    if op == "Solarize":
        return ops.solarize(img, m)
    if op in ("AutoContrast", "Equalize", "Invert"):
        return getattr(ops, op.lower())(img)
    raise ValueError(f"apply_op: unknown op {op!r}")


def autoaugment(img: np.ndarray, rng: np.random.Generator, policy=CIFAR10_POLICY) -> np.ndarray:
    """(H, W, C) intensities -> (H, W, C): one sub-policy drawn uniformly; each of its two ops
    applied with its probability, its magnitude negated with probability 1/2 where signed.

    Source: AutoAugment, Cubuk et al. 2019, as torchvision applies it. On a grey image Color is
    the identity (a grey image has no saturation)."""
    for op, p, level in policy[rng.integers(len(policy))]:
        u, negate = rng.random(), rng.random() < 0.5
        if u <= p:
            m = 0.0 if level is None else magnitude(op, level, img.shape[1])
            img = apply_op(img, op, -m if (negate and op in SIGNED) else m)
    return img


def random_affine(img: np.ndarray, rng: np.random.Generator, degrees: float,
                  translate: float, scale: tuple[float, float]) -> np.ndarray:
    """torchvision's RandomAffine, nearest, fill 0: angle ~ U(-degrees, degrees), shift by whole
    pixels round(U(-translate * side, translate * side)) each way, zoom ~ U(scale)."""
    h, w = img.shape[:2]
    angle = rng.uniform(-degrees, degrees)
    tx = round(rng.uniform(-translate * w, translate * w))
    ty = round(rng.uniform(-translate * h, translate * h))
    return ops.affine(img, angle=angle, translate=(tx, ty), scale=rng.uniform(*scale))


# ----------------------------------------------------------------------------- per-task pipelines

def augment_cifar(img: np.ndarray, rng: np.random.Generator, flip: bool = True) -> np.ndarray:
    """(H, W, C) -> (H, W, C): AutoAugment (CIFAR-10 policy), horizontal flip (p 0.5), random
    affine (no rotation, shift <= 10% of the side, zoom in [0.9, 1.1]).

    Source: Miralles-González et al. 2025's code for LRA Image. Departures: their pipeline
    augments the RGB image and converts it to grey last; LRA Image items are grey already, so
    Color is the identity and the per-channel ops (AutoContrast, Equalize, Posterize, Solarize)
    act on the grey channel. sCIFAR items stay RGB (no grey conversion)."""
    img = autoaugment(img, rng)
    if flip and rng.random() < 0.5:
        img = ops.hflip(img)
    return random_affine(img, rng, degrees=0.0, translate=0.1, scale=(0.9, 1.1))


def augment_digits(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """:func:`augment_cifar` without the horizontal flip. Our departure (the authors ran CIFAR):
    a mirrored digit is another symbol or none, so flipping would not preserve the label."""
    return augment_cifar(img, rng, flip=False)


def augment_pathfinder(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(H, W, C) -> (H, W, C): horizontal flip (p 0.5), vertical flip (p 0.5), random affine:
    rotation in [-10, 10] degrees, shift <= 10% of the side, zoom 0.9 (always: their code gives
    scale=(0.9, 0.9)). None changes whether the two markers lie on one contour.

    Source: Miralles-González et al. 2025's code for Pathfinder. Departure: a shift can push a
    marker out of the frame (their code allows it too)."""
    if rng.random() < 0.5:
        img = ops.hflip(img)
    if rng.random() < 0.5:
        img = ops.vflip(img)
    return random_affine(img, rng, degrees=10.0, translate=0.1, scale=(0.9, 0.9))


class Pixels:
    """An image pipeline `fn(img, rng)` as an item augmentation (inputs, spec, rng) -> inputs.
    A class, not a closure, so that DataLoader workers started by "spawn" can unpickle it."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, inputs, spec: TaskSpec, rng: np.random.Generator) -> torch.Tensor:
        img, back = to_intensities(inputs, spec)
        return back(self.fn(img, rng))

    def __repr__(self):
        return f"Pixels({self.fn.__name__})"


def listops_items(inputs, spec: TaskSpec, rng: np.random.Generator) -> torch.Tensor:
    """A ListOps item's token ids with every operator's operands shuffled (:func:`shuffle_listops`)."""
    x = torch.as_tensor(inputs)
    return torch.from_numpy(shuffle_listops(x.numpy(), rng)).to(x.dtype)


# The item augmentations (inputs, spec, rng) -> inputs that tasks name in spt.data.registry.TASKS.
CIFAR = Pixels(augment_cifar)
DIGITS = Pixels(augment_digits)
PATHFINDER = Pixels(augment_pathfinder)


class AugmentedItems(Dataset):
    """`dataset` whose item i has its "inputs" augmented by `fn` (inputs, spec, rng -> inputs) with
    the generator seeded by (seed, epoch, i, SALT); every other key passes through unchanged."""

    def __init__(self, dataset, spec: TaskSpec, fn: Callable, seed: int, epoch: int):
        if seed < 0 or epoch < 0:
            raise ValueError(f"augmentations are drawn from (seed, epoch, index), which must be "
                             f">= 0: got seed={seed}, epoch={epoch}")
        self.dataset, self.spec, self.fn, self.seed, self.epoch = dataset, spec, fn, seed, epoch

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict:
        item = self.dataset[i]
        rng = np.random.default_rng([self.seed, self.epoch, int(i), SALT])
        return {**item, "inputs": self.fn(item["inputs"], self.spec, rng)}
