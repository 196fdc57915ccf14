"""Benchmark: today's mixers on the CPU, forward + backward tokens per second, spt's fast path
against the loop over time it is tested against, and against mambapy for Mamba.

    python bench/mixer_throughput.py                          # every mixer, L = 1K, 4K, 16K
    python bench/mixer_throughput.py --mixers mamba lru --L 1024 --threads 2

One measurement: one causal mixer of spt.mixer_config at d_model (default 64) with its authors'
default shape, x (batch, L, d_model) -> y, backward of a fixed random projection of y. Paths:
"spt" the mixer as built (its chunked / pairwise-scan CPU form), "ref" the same weights with every
recurrence run by its ``*_ref`` loop over time (spt.models.mixers.common.with_reference), and for
Mamba "mambapy" (mambapy's MambaBlock, its parallel scan: a third-party pure-PyTorch Mamba).
Time is the median of --repeat calls after one warm-up call, in one process, torch threads set by
--threads; "x ref" and "x mambapy" are spt's speed over theirs, measured in the same run. A
reference call longer than --max-ref-s (estimated from the previous length) is skipped ("-").
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from spt.mixer_config import MIXER_CONFIGS
from spt.models.mixers.common import with_reference
from spt.models.user_layers import import_layer


def build(kind: str, d_model: int):
    cls = next(c for c in MIXER_CONFIGS if c.kind == kind)
    cfg = cls(d_model=d_model)
    return import_layer(cfg.layer)(d_model, causal=True, **cfg.layer_kwargs)


def mambapy_block(d_model: int):
    try:
        from mambapy.mamba import MambaBlock, MambaConfig
    except ImportError:
        return None
    return MambaBlock(MambaConfig(d_model=d_model, n_layers=1))


def seconds(layer, x: torch.Tensor, w: torch.Tensor, repeat: int) -> float:
    """Median wall time of forward + backward."""
    times = []
    for i in range(repeat + 1):
        x.grad = None
        t0 = time.perf_counter()
        (layer(x) * w).sum().backward()
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mixers", nargs="*", default=[c.kind for c in MIXER_CONFIGS])
    ap.add_argument("--L", nargs="*", type=int, default=[1024, 4096, 16384])
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--max-ref-s", type=float, default=120.0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"CPU, {args.threads} threads, d_model={args.d_model}, batch={args.batch}, "
          f"fwd+bwd tokens/s (median of {args.repeat}); x ref, x mambapy: spt's speed over theirs")
    print(f"{'mixer':<16}{'L':>7}{'spt':>10}{'ref':>10}{'x ref':>8}{'mambapy':>10}{'x mambapy':>11}")
    for kind in args.mixers:
        torch.manual_seed(0)
        fast = build(kind, args.d_model)
        ref = with_reference(fast)
        other = mambapy_block(args.d_model) if kind == "mamba" else None
        ref_s_per_token = None
        for L in args.L:
            x = torch.randn(args.batch, L, args.d_model, requires_grad=True)
            w = torch.randn(args.batch, L, args.d_model)
            tokens = args.batch * L
            t_fast = seconds(fast, x, w, args.repeat)
            t_ref = None
            if ref_s_per_token is None or ref_s_per_token * tokens * (args.repeat + 1) < args.max_ref_s:
                t_ref = seconds(ref, x, w, 1 if L > 4096 else args.repeat)
                ref_s_per_token = t_ref / tokens
            t_other = seconds(other, x, w, args.repeat) if other is not None else None
            print(f"{kind:<16}{L:>7}{_rate(tokens, t_fast)}{_rate(tokens, t_ref)}"
                  f"{_speedup(t_ref, t_fast, 8)}{_rate(tokens, t_other)}{_speedup(t_other, t_fast, 11)}")


def _rate(tokens: int, t) -> str:
    return f"{tokens / t:>10,.0f}" if t else f"{'-':>10}"


def _speedup(t_other, t_fast: float, width: int) -> str:
    return f"{t_other / t_fast:>{width - 1}.1f}x" if t_other else f"{'-':>{width}}"


if __name__ == "__main__":
    main()
