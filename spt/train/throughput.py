"""Measuring training throughput: tokens/s, model FLOPs utilisation (MFU) and peak memory.

Used by ``bench/train_throughput.py`` and ``bench/pathx256_step.py``. One measured step is exactly
what :func:`spt.train.engine.fit` does per batch: bf16 autocast on CUDA, the objective's loss,
backward, gradient clipping, AdamW step, at the implementation paths ``TrainConfig.paths`` gives
(:mod:`spt.train.paths`: "auto" measures, a mapping pins, "reference" takes the references); with
the step's path "graphs" the forward and backward run through
:class:`~spt.train.graphs.GraphedStep` (captured and replayed on CUDA), as fit() runs them then.

FLOPs of a step are counted, not guessed: ``torch.utils.flop_counter.FlopCounterMode`` records the
matmuls and the attention (SDPA) of one forward + backward as executed; attention is counted
through SDPA even when flash-attn runs (flash-attn's kernel is invisible to the counter). FFTs are
not matmuls: for SSM layers we add 2.5·N·log2(N) real FLOPs per length-N real FFT, three FFTs per
channel and layer forward (input, kernel, inverse) and twice that backward. MFU is
(FLOPs per step / step time) / peak, with the peak *measured* in the same process by a large
bf16 matmul (:func:`peak_matmul_flops`).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..config import ObjectiveConfig, TrainConfig
from ..data.task import N_SPECIAL, TaskSpec
from ..models.attention import Attention
from ..models.model import count_parameters, pretraining_model
from ..models.ssm import SSMBlock
from .graphs import WARMUP as GRAPH_WARMUP
from .graphs import GraphedStep
from .objectives import Denoising
from .optim import build_optimizer
from .paths import Chosen, choose
from .run_setup import set_grad_checkpointing


@dataclass
class StepReport:
    """One configuration's measured training step.

    tokens_per_s : batch * seq_len / step_s.   flops_per_step : counted model FLOPs (fwd + bwd).
    mfu          : achieved FLOP/s over peak_flops (the same run's measured matmul peak).
    peak_mem_gb  : torch.cuda.max_memory_allocated during the timed steps (nan on CPU).
    host_syncs   : host-device synchronisations seen in one forward + backward (CUDA only).
    losses       : the training loss of every step, warm-up steps included (the same model,
                   batch and seeds give the same sequence eagerly and captured).
    graphs       : whether the step ran through GraphedStep (the step's path "graphs").
    paths        : {kind: path, "step": path} it ran (:meth:`spt.train.paths.Chosen.kinds`).
    """

    name: str
    params: int
    batch: int
    seq_len: int
    step_s: float
    tokens_per_s: float
    flops_per_step: float
    mfu: float
    peak_mem_gb: float
    peak_flops: float
    host_syncs: list = dataclasses.field(default_factory=list)
    losses: list = dataclasses.field(default_factory=list)
    graphs: bool = False
    paths: dict = dataclasses.field(default_factory=dict)

    def row(self) -> str:
        return (f"{self.name:<28} {self.params / 1e6:7.2f}M {self.batch:5d} {self.seq_len:7d} "
                f"{self.step_s * 1e3:9.1f} {self.tokens_per_s:12.0f} "
                f"{self.flops_per_step / 1e12:9.3g} {100 * self.mfu:6.1f}% {self.peak_mem_gb:8.2f}")

    @staticmethod
    def header() -> str:
        return (f"{'config':<28} {'params':>8} {'batch':>5} {'L':>7} {'step ms':>9} "
                f"{'tokens/s':>12} {'TFLOP/st':>9} {'MFU':>7} {'mem GB':>8}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_matmul_flops(device: torch.device, n: Optional[int] = None, iters: int = 20) -> float:
    """Measured FLOP/s of an n x n matmul: bf16 on CUDA (n = 8192), float32 on CPU (n = 512)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    n = n or (8192 if device.type == "cuda" else 512)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync(device)
    t = time.perf_counter()
    for _ in range(iters):
        a @ b
    _sync(device)
    return 2 * n ** 3 * iters / (time.perf_counter() - t)


def copy_bandwidth(device: torch.device, n: Optional[int] = None, iters: int = 10) -> float:
    """Measured bytes per second (read + written) of a device-to-device copy of n float32 values
    (CUDA: 2^28, 1 GiB; CPU: 2^20)."""
    n = n or (2 ** 28 if device.type == "cuda" else 2 ** 20)
    x = torch.empty(n, device=device)
    y = torch.empty_like(x)
    for _ in range(2):
        y.copy_(x)
    _sync(device)
    t = time.perf_counter()
    for _ in range(iters):
        y.copy_(x)
    _sync(device)
    return 2 * x.numel() * x.element_size() * iters / (time.perf_counter() - t)


def synthetic_spec(name: str, seq_len: int, objective: ObjectiveConfig, d_input: int = 1) -> TaskSpec:
    """A task spec with the right kind of inputs for `objective`: 256 byte/pixel tokens (+ the
    special tokens) for CE, `d_input` continuous channels for L1."""
    if objective.loss == "ce":
        return TaskSpec(name=name, seq_len=seq_len, num_classes=10, vocab_size=256 + N_SPECIAL)
    return TaskSpec(name=name, seq_len=seq_len, num_classes=10, d_input=d_input)


def synthetic_batch(spec: TaskSpec, batch: int, device: torch.device, seed: int = 0) -> dict:
    """Random full-length inputs (no padding): {"inputs", "valid": None, "label"} on `device`;
    valid=None is what the engine passes for a batch without padding (attention's fast path)."""
    g = torch.Generator().manual_seed(seed)
    L = spec.seq_len
    if spec.is_tokens:
        x = torch.randint(N_SPECIAL, spec.vocab_size, (batch, L), generator=g)
    else:
        x = torch.randn(batch, L, spec.d_input, generator=g)
    return {"inputs": x.to(device), "valid": None,
            "label": torch.zeros(batch, dtype=torch.long, device=device)}


def _fft_flops(model: torch.nn.Module, batch: int, L: int) -> float:
    blocks = [m for m in model.modules() if isinstance(m, SSMBlock)]
    if not blocks:
        return 0.0
    N = 2 * L
    one = 2.5 * N * math.log2(N)
    per_block = sum((3 * batch + b.kernel.n_dir) * b.kernel.H * one for b in blocks)
    return 3.0 * per_block  # forward + backward (~2x forward)


def count_step_flops(model, objective, batch: dict, device: torch.device) -> float:
    """FLOPs of one forward + backward (matmuls and attention counted, FFTs estimated)."""
    from torch.utils.flop_counter import FlopCounterMode
    attn = [m for m in model.modules() if isinstance(m, Attention)]
    saved = [m.path for m in attn]
    # flash-attn's kernel is not seen by the counter, SDPA's is; FlexAttention and the dense mask
    # would count every score: local attention is counted on its gather path ("torch")
    for m in attn:
        m.path = "ref" if m.path == "ref" else "torch"
    gen = torch.Generator(device=device).manual_seed(0)
    try:
        with FlopCounterMode(display=False) as fc:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss, _ = objective.step(model, batch, gen)
            loss.backward()
    finally:
        for m, path in zip(attn, saved):
            m.path = path
    model.zero_grad(set_to_none=True)
    return float(fc.get_total_flops()) + _fft_flops(model, batch["inputs"].shape[0],
                                                    batch["inputs"].shape[1])


def host_syncs_per_step(model, objective, batch: dict, device: torch.device) -> list[str]:
    """The host-device synchronisations of one training forward + backward on CUDA, as reported by
    ``torch.cuda.set_sync_debug_mode("warn")`` (one message each; empty on CPU, where there are
    none to find). Use it to find a ``.item()`` / boolean indexing / ``bool(tensor)`` in a step."""
    if device.type != "cuda":
        return []
    import warnings
    gen = torch.Generator(device=device).manual_seed(0)
    torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss, _ = objective.step(model, batch, gen)
            loss.backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    model.zero_grad(set_to_none=True)
    return [str(w.message).splitlines()[0] + f" ({w.filename}:{w.lineno})" for w in caught]


def measure_training_step(name: str, model_cfg, objective: ObjectiveConfig, spec: TaskSpec,
                          batch_size: int, device: torch.device, *, steps: int = 10,
                          warmup: int = 3, train_cfg: Optional[TrainConfig] = None,
                          peak_flops: Optional[float] = None, flops: Optional[float] = None,
                          min_time: float = 0.0, find_syncs: bool = True) -> StepReport:
    """Build the pretraining model of `model_cfg`, run `warmup` + `steps` training steps on a
    synthetic full-length batch and report time, tokens/s, FLOPs, MFU and peak memory.

    train_cfg.paths: the implementation paths, set as fit() sets them (:func:`spt.train.paths.
    choose`, measuring what a pinned mapping leaves open, with no budget); with the step's path
    "graphs" the step runs through GraphedStep, and on CUDA the warm-up is at least WARMUP + 1
    steps, so every timed step replays the captured graph.
    flops      : FLOPs per step when already counted (another measurement of the same model);
                 None: counted here.
    min_time   : go on stepping past `steps` until this many seconds have passed (at most
                 100 x steps), so that fast steps are timed over many.
    find_syncs : list the host-device syncs of one step (StepReport.host_syncs; CUDA only).
    """
    cfg = train_cfg or TrainConfig(device=str(device))
    model, obj, batch, chosen = _training_setup(model_cfg, objective, spec, batch_size, device, cfg)
    if flops is None:
        flops = count_step_flops(model, obj, batch, device)
    syncs = host_syncs_per_step(model, obj, batch, device) if find_syncs else []
    step, graphed, losses = _training_step(model, obj, batch, cfg, device, chosen)
    if graphed is not None and device.type == "cuda":
        warmup = max(warmup, GRAPH_WARMUP + 1)
    torch.manual_seed(cfg.seed)  # dropout: the same draws whether or not FLOPs were counted here
    try:
        dt = _seconds_per_step(step, device, warmup, steps, min_time)
    finally:
        if graphed is not None:
            graphed.close()
    mem = torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else math.nan
    peak = peak_flops or peak_matmul_flops(device)
    return StepReport(name=name, params=count_parameters(model), batch=batch_size,
                      seq_len=spec.seq_len, step_s=dt, tokens_per_s=batch_size * spec.seq_len / dt,
                      flops_per_step=flops, mfu=flops / dt / peak, peak_mem_gb=mem,
                      peak_flops=peak, host_syncs=syncs,
                      losses=torch.stack(losses).tolist(), graphs=graphed is not None,
                      paths=chosen.kinds())


def _training_setup(model_cfg, objective: ObjectiveConfig, spec: TaskSpec, batch_size: int,
                    device: torch.device, cfg: TrainConfig) -> tuple:
    """(model, Denoising objective, batch, Chosen): the pretraining model of `model_cfg` built
    after torch.manual_seed(0), in training mode with cfg's activation checkpointing; a synthetic
    batch (:func:`synthetic_batch`: inputs (batch_size, seq_len) tokens or (batch_size, seq_len,
    d_input) values); and the implementation paths chosen on it as fit() chooses them."""
    torch.manual_seed(0)
    model = pretraining_model(model_cfg, spec, objective).to(device)
    set_grad_checkpointing(model, cfg.grad_checkpointing)
    model.train()
    obj = Denoising(objective, spec)
    batch = synthetic_batch(spec, batch_size, device)
    chosen = choose(model, obj, batch, cfg, device, torch.Generator(device=device).manual_seed(0),
                    total_steps=None)
    return model, obj, batch, chosen


def _training_step(model, obj, batch: dict, cfg: TrainConfig, device: torch.device,
                   chosen: Chosen) -> tuple[Callable[[], None], Optional[GraphedStep], list]:
    """(step, graphed, losses): `step()` is one of fit()'s optimiser steps on `batch`: forward
    and backward (eagerly under autocast, or through `graphed`, the GraphedStep built when the
    step's path is "graphs", else None), its loss appended to `losses` as a () float32 tensor,
    gradient clipping, the AdamW step and the gradients cleared."""
    opt = build_optimizer(model, cfg)
    fwd = torch.compile(model) if cfg.compile else model
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    graphed = (GraphedStep(model, fwd, obj, cfg, device, gen)
               if chosen.paths.get("step") == "graphs" else None)
    losses: list = []

    def step():
        if graphed is None:
            with torch.autocast(device.type, dtype=torch.bfloat16,
                                enabled=cfg.amp and device.type == "cuda"):
                loss, _ = obj.step(fwd, batch, gen)
            loss.backward()
        else:
            loss, _ = graphed(batch)
            graphed.prepare_step()
        losses.append(loss.detach().float().clone())
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        if graphed is None:
            opt.zero_grad(set_to_none=True)
        else:
            graphed.zero_grad()

    return step, graphed, losses


def _seconds_per_step(step: Callable[[], None], device: torch.device, warmup: int, steps: int,
                      min_time: float) -> float:
    """Mean seconds of one call of `step`, after `warmup` untimed calls: `steps` timed calls, and
    more until `min_time` seconds have passed (at most 100 x steps). The device's peak memory
    statistics are reset after the warm-up, so they cover the timed calls."""
    for _ in range(warmup):
        step()
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    n, t = 0, time.perf_counter()
    while n < steps or (time.perf_counter() - t < min_time and n < 100 * steps):
        step()
        n += 1
    _sync(device)
    return (time.perf_counter() - t) / n
