"""Task-dependent initialisation (TDI) of the first S4 / S4D layer by power-spectrum matching.

What: before training, the first SSM block's state-space parameters are fitted so that the power
spectrum of its convolution kernel has the shape of the power spectrum of the inputs that block
sees on the task's training examples. Every other block keeps its default initialisation.
``SSMConfig(task_init="spectrum")`` asks for it; :func:`apply_task_init_` does it (called by
:func:`spt.train.runs.pretrain` and :func:`spt.train.runs.train_from_scratch` right after the
model is built).

Why: Chen & Chen 2025, "Aligning Inductive Bias for Data-Efficient Generalization in State Space
Models" (arXiv 2509.20789). Their analysis says an LTI SSM learns the modes with a large frequency
response |H(w)| first, so a layer whose response already carries the task's spectral energy should
need less data. Their "TDI" minimises a loss between the model's and the task's power spectra
(their Eq. 4) before training, on the first S4 layer only.

THIS IS OUR READING, NOT THEIR ALGORITHM. The paper's body could not be read (see the project notes
on the paper): its estimator (reviewers call it a "cross-power spectrum", so it may involve the
labels), its loss, which parameters it sets and its optimiser are not known. Every choice below
marked (ours) is ours.

Equations. u (N, L, H) are the first block's inputs (what its convolution receives: the input
encoder's output, through the block's norm when pre-norm, padded positions zeroed), L the padded
length. The layer convolves by FFT on a 2L-point grid (:func:`spt.kernels.fft_conv`), so both
spectra live on the frequencies w_f = pi f / L, f = 1 .. L (F = L bins):

    P_u(f) = mean_{n, h} |rfft(u[n, :, h] - mean_t u[n, :, h], 2L)_f|^2 ,   P_u <- P_u / sum_f P_u
    P_K(f) = mean_h      |rfft(k_h, 2L)_f|^2 ,                              P_K <- P_K / sum_f P_K
    loss   = mean_f (log(P_K(f) + eps) - log(P_u(f) + eps))^2

* P_u (ours): the inputs' power spectrum averaged over examples and channels, each sequence
  centred over its real positions (so bin 0, the mean, is ~0 and is left out of both spectra: the
  kernel's gain at w = 0 stays free), zero-padded to 2L as the layer's convolution pads it,
  normalised to sum 1 (only the shape is matched; the layer's gain is left as drawn). Labels are
  not used (the paper's "cross-power spectrum" may use them; we do not know how).
* P_K (ours): k_h is the layer's whole 2L-point circular filter for channel h as fft_conv builds
  it: the forward kernel at lags 0 .. L-1 and, for a bidirectional layer, the backward kernel at
  lags -1 .. -L. |rfft(k_h)|^2 is then exactly the gain the layer's convolution applies to each
  frequency bin of its zero-padded input: neither the forward kernel alone nor an average of the
  two directions' spectra, but the response of their sum, which is what the layer applies. The
  skip term D u (a flat response) is not part of the kernel and is not fitted. A capped reach
  (``SSMConfig.reach``) is applied first, as the layer applies it.
* The loss (ours) is the log-spectral distance: it weighs a factor of 2 equally at every
  frequency, where an L2 distance of the normalised spectra would only see the few bins holding
  most of the power. eps (default 1e-6, against a flat level of 1/F) keeps empty bins finite.
* What is fitted (ours): log dt (H,), log(-Re Lambda) and Im Lambda ((H, N/2) for S4D, (n_ssm or H,
  N/2) for S4): the step size and the poles e^{dt Lambda} place each mode's centre frequency
  (dt Im Lambda) and bandwidth (dt Re Lambda), which is what shapes |H(w)|. B, C (S4's stored
  C-tilde), S4's P, the skip D and every other parameter stay as drawn: C and B are random per
  channel and mix the modes differently in each channel, and we keep that diversity (fitting them
  could make all channels one filter); the scale they set does not enter normalised spectra.
* The optimiser (ours): Adam, lr 1e-2, 200 steps, full batch, from the config's own init; no
  randomness beyond the given inputs, so the fit is deterministic.
* The inputs (ours): the first ``n_examples`` = 256 training examples in dataset order (a pair
  task: both documents of each pair, as the dual encoder feeds them to its one backbone), with the
  backbone's input dropout skipped and a BatchNorm's statistics taken from each chunk of 32
  examples, as from a training batch (on a copy: the model's running statistics are not touched).

Shapes: inputs (N, L, H) float, valid (N, L) bool, kernel (n_dir, H, L) with n_dir 1 (causal) or
2 (bidirectional), spectra (L,).
"""
from __future__ import annotations

import copy
from typing import Optional

import torch
import torch.nn as nn

from ..data.collate import pad_collate
from ..data.task import Task
from ..ssm_config import SSMConfig
from .model import stack_pair
from .ssm import ConvBlock, cap_reach

FITTED = ("log_dt", "log_neg_re", "im")  # the S4 / S4D kernel parameters the fit changes
_CHUNK = 32  # examples per FFT / encoder call (bounds memory on long sequences)


def _normalise(p: torch.Tensor) -> torch.Tensor:
    return p / p.sum().clamp_min(torch.finfo(p.dtype).tiny)


def input_spectrum(inputs: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The normalised power spectrum of a layer's inputs, (N, L, H) -> (L,).

    Each sequence u[n, :, h] is centred over its real positions (``valid`` (N, L) bool, None: all
    real) and zeroed at padding, then |rfft(., n=2L)|^2 at bins 1 .. L is averaged over examples
    and channels and normalised to sum 1 (module docstring: P_u). Computed in float64.
    """
    if inputs.dim() != 3:
        raise ValueError(f"input_spectrum: inputs must be (N, L, H), got {tuple(inputs.shape)}")
    N, L, _ = inputs.shape
    if valid is None:
        valid = torch.ones(N, L, dtype=torch.bool, device=inputs.device)
    total = torch.zeros(L, dtype=torch.float64, device=inputs.device)
    for i in range(0, N, _CHUNK):
        u = inputs[i:i + _CHUNK].to(torch.float64)
        w = valid[i:i + _CHUNK, :, None].to(torch.float64)
        mean = (u * w).sum(1, keepdim=True) / w.sum(1, keepdim=True).clamp_min(1.0)
        spec = torch.fft.rfft(((u - mean) * w).transpose(1, 2), n=2 * L)    # (n, H, L+1)
        total += spec[..., 1:].abs().square().sum((0, 1))
    return _normalise(total)


def kernel_spectrum(kernel: torch.Tensor) -> torch.Tensor:
    """The normalised power spectrum of a layer's kernel, (n_dir, H, L) -> (L,).

    The kernel's 2L-point circular filter (forward lags 0 .. L-1; a backward kernel, if any, at lags
    -1 .. -L, as :func:`spt.kernels.fft_conv` lays it out), |rfft|^2 at bins 1 .. L averaged over
    channels, normalised to sum 1 (module docstring: P_K). Differentiable; in the kernel's dtype.
    """
    if kernel.dim() != 3 or kernel.shape[0] not in (1, 2):
        raise ValueError(f"kernel_spectrum: kernel must be (1 or 2, H, L), got "
                         f"{tuple(kernel.shape)}")
    L = kernel.shape[-1]
    k = kernel[0] if kernel.shape[0] == 1 else torch.cat([kernel[0], kernel[1].flip(-1)], -1)
    return _normalise(torch.fft.rfft(k, n=2 * L)[..., 1:].abs().square().mean(0))


def spectral_loss(kernel_spec: torch.Tensor, target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The log-spectral distance mean_f (log(P_K + eps) - log(P_u + eps))^2 (ours, see above)."""
    return (torch.log(kernel_spec + eps) - torch.log(target.to(kernel_spec.dtype) + eps)).square().mean()


def match_spectrum_(block: nn.Module, inputs: torch.Tensor, steps: int = 200, lr: float = 1e-2, *,
                    valid: Optional[torch.Tensor] = None, eps: float = 1e-6) -> dict:
    """Fit one S4 / S4D block's log_dt, log_neg_re and im so that its kernel's power spectrum has
    the shape of its inputs' (the module docstring; every choice ours). In place.

    block  : an :class:`spt.models.ssm.SSMBlock` of kind "s4" or "s4d".
    inputs : (N, L, H) what the block's convolution receives; valid (N, L) bool or None.
    steps, lr : Adam's steps and learning rate. Only the three fitted parameters change (their
    ``.grad`` is left None); every other parameter of the block is untouched.
    Returns {"loss_before": float, "loss_after": float} (the spectral loss at the start and end).
    """
    kernel = getattr(block, "kernel", None)
    if not isinstance(block, ConvBlock) or not all(hasattr(kernel, n) for n in FITTED):
        raise TypeError(f"match_spectrum_ fits an S4 / S4D block (kernel parameters {FITTED}); "
                        f"got {type(block).__name__} with kernel {type(kernel).__name__}")
    if steps < 0 or not lr > 0:
        raise ValueError(f"match_spectrum_: steps must be >= 0 and lr > 0, got {steps}, {lr}")
    L = inputs.shape[1]
    params = [getattr(kernel, n) for n in FITTED]
    p0 = params[0]
    target = input_spectrum(inputs, valid).to(device=p0.device, dtype=p0.dtype)

    def loss() -> torch.Tensor:
        return spectral_loss(kernel_spectrum(cap_reach(kernel(L), block.reach)), target, eps)

    with torch.no_grad():
        before = loss().item()
    opt = torch.optim.Adam(params, lr=lr)
    for _ in range(steps):
        grads = torch.autograd.grad(loss(), params)
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
    for p in params:
        p.grad = None
    with torch.no_grad():
        after = loss().item()
    return {"loss_before": before, "loss_after": after}


@torch.no_grad()
def first_layer_inputs(model: nn.Module, task: Task,
                       n_examples: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """What the model's first SSM block convolves, on the first `n_examples` training examples.

    The examples are collated with :func:`spt.data.collate.pad_collate` (a pair task's two
    documents stacked as the dual encoder stacks them), run through the backbone's input encoder
    (and position table, if any; its input dropout is skipped), then through the block's norm when
    pre-norm (a copy of it in training mode: a BatchNorm normalises each chunk of examples with its
    own statistics, as in training, and the model's running statistics are untouched). Padded
    positions are zeroed, as the block's convolution zeroes them.
    Returns inputs (N, L, H) float32 and valid (N, L) bool, on the model's device.
    """
    n = min(n_examples, len(task.train))
    if n < 1:
        raise ValueError(f"task_init: task {task.spec.name!r} has no training examples to fit to")
    batch = pad_collate([task.train[i] for i in range(n)])
    inputs, valid = batch["inputs"], batch["valid"]
    if "inputs2" in batch:
        inputs, valid = stack_pair(inputs, valid, batch["inputs2"], batch["valid2"])
    backbone = model.backbone
    block = backbone.layers.blocks[0]
    norm = copy.deepcopy(block.norm).train() if block.prenorm else None
    device = next(model.parameters()).device
    inputs, valid = inputs.to(device), valid.to(device)
    out = []
    for i in range(0, inputs.shape[0], _CHUNK):
        v = valid[i:i + _CHUNK]
        x = backbone.encoder(inputs[i:i + _CHUNK])
        if backbone.positions is not None:
            x = backbone.positions(x)
        if norm is not None:
            x = norm(x, v)
        out.append(x.float() * v[..., None])
    return torch.cat(out), valid


def apply_task_init_(model: nn.Module, model_cfg, task: Task, n_examples: int = 256,
                     steps: int = 200) -> Optional[dict]:
    """The task-dependent initialisation ``model_cfg.task_init`` asks for, in place.

    "spectrum" (an :class:`~spt.ssm_config.SSMConfig` of kind "s4" / "s4d"): fit the first SSM block
    (``model.backbone.layers.blocks[0]``) to its inputs on the first `n_examples` training examples
    (:func:`first_layer_inputs`, :func:`match_spectrum_` with `steps` Adam steps; our reading of
    Chen & Chen 2025, see the module docstring). Returns match_spectrum_'s {"loss_before",
    "loss_after"}.
    None (and every other model config): nothing to do; returns None.
    """
    if not isinstance(model_cfg, SSMConfig) or model_cfg.task_init is None:
        return None
    inputs, valid = first_layer_inputs(model, task, n_examples)
    return match_spectrum_(model.backbone.layers.blocks[0], inputs, steps, valid=valid)
