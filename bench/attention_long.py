"""Benchmark: attention at L = 1K, 4K, 16K, 64K: dense flash vs neighbour-block local vs a dense
boolean mask (the approach of the paper's public code), all in one run.

    python bench/attention_long.py                  # B=1, 8 heads of 16 (PathX width 128), W=4096
    python bench/attention_long.py --smoke          # L = 64, 128, W = 32 on CPU: checks it works

One measurement = forward + backward of self-attention on q, k, v (B, H, L, D) in bf16 on CUDA
(float32 on CPU), timed over --repeat calls after warm-up, with peak memory
(torch.cuda.max_memory_allocated over the call, inputs excluded):

* ``dense``      - full attention, spt.models.attention.full_attention (flash-attn if installed,
                   else SDPA, which picks its flash kernel for unmasked bf16 inputs): O(L^2) time.
* ``local``      - neighbour-block local attention, spt.models.attention.local_attention, block W:
                   each query sees 3W keys, O(L·W) time and memory.
* ``bool-mask``  - the same neighbour-block pattern given to SDPA as a dense (L, L) boolean
                   attn_mask, as the paper's public code does: the mask costs L^2 bytes and rules
                   out the flash kernel, and all L^2 scores are computed.

Ratios are against ``bool-mask`` (the reference): speed-up = its time / this time, memory = this
peak / its peak. Sizes that run out of memory are skipped with the reason printed. At small L the
three outputs are also checked against each other (local == bool-mask).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spt.models.attention import FLASH_AVAILABLE, full_attention, local_attention  # noqa: E402

METHODS = ("dense", "local", "bool-mask")


def neighbour_mask(L: int, W: int, device) -> torch.Tensor:
    """(L, L) bool: query i may see key j iff their blocks of W are neighbours (|bi - bj| <= 1)."""
    b = torch.arange(L, device=device) // W
    return (b[:, None] - b[None, :]).abs() <= 1


def run(method: str, q, k, v, W: int):
    if method == "dense":
        return full_attention(q, k, v, backend="auto")
    if method == "local":
        return local_attention(q, k, v, W, backend="auto")
    mask = neighbour_mask(q.shape[-2], W, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def measure(method: str, L: int, args, device, dtype) -> dict:
    g = torch.Generator(device=device).manual_seed(0)
    shape = (args.batch, args.heads, L, args.head_dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, generator=g).requires_grad_()
               for _ in range(3))
    dy = torch.randn(shape, device=device, dtype=dtype, generator=g)

    def call():
        y = run(method, q, k, v, args.block)
        torch.autograd.grad(y, (q, k, v), dy)
        return y

    for _ in range(args.warmup):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    mem = (torch.cuda.max_memory_allocated() - base) / 2 ** 30 if device.type == "cuda" else math.nan
    return {"ms": 1e3 * sorted(times)[len(times) // 2], "mem_gb": mem}


def check_equal(L: int, args, device) -> float:
    """max |local - bool-mask| on float32 inputs (they compute the same function)."""
    g = torch.Generator(device=device).manual_seed(1)
    q, k, v = (torch.randn(1, 2, L, 16, device=device, generator=g) for _ in range(3))
    a = run("local", q, k, v, args.block)
    b = run("bool-mask", q, k, v, args.block)
    return float((a - b).abs().max())


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    ap.add_argument("--block", type=int, default=4096, help="local block W (paper: 4096)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="L = 64, 128 and W = 32 on CPU")
    a = ap.parse_args(argv)
    if a.smoke:
        a.lengths, a.block, a.repeat, a.warmup = [64, 128], 32, 2, 1
    device = torch.device("cuda" if torch.cuda.is_available() and not a.smoke else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'}, {dtype}; "
          f"B={a.batch} H={a.heads} D={a.head_dim} W={a.block}; flash-attn installed: "
          f"{FLASH_AVAILABLE}; reference = bool-mask")
    print(f"{'L':>7} {'method':<10} {'fwd+bwd ms':>11} {'peak GB':>8} {'speed-up':>9} {'mem ratio':>9}")
    results: dict = {}
    for L in a.lengths:
        err = check_equal(min(L, 4 * a.block), a, device)
        if err > 1e-4:
            raise AssertionError(f"local attention differs from the boolean-mask reference by "
                                 f"{err:.2e} at L={L}")
        for m in METHODS:
            try:
                results[(L, m)] = measure(m, L, a, device, dtype)
            except torch.cuda.OutOfMemoryError as e:
                results[(L, m)] = None
                print(f"{L:7d} {m:<10} skipped: out of memory ({str(e).splitlines()[0][:80]})")
                torch.cuda.empty_cache()
        ref = results[(L, "bool-mask")]
        for m in METHODS:
            r = results[(L, m)]
            if r is None:
                continue
            speed = f"{ref['ms'] / r['ms']:8.2f}x" if ref else "      n/a"
            memr = f"{r['mem_gb'] / ref['mem_gb']:8.2f}x" if ref and ref["mem_gb"] > 0 else "      n/a"
            print(f"{L:7d} {m:<10} {r['ms']:11.2f} {r['mem_gb']:8.2f} {speed} {memr}", flush=True)
    return results


if __name__ == "__main__":
    main()
