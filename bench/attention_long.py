"""Benchmark: attention at L = 1K ... 64K: dense flash vs neighbour-block local (gather and flex
paths) vs a dense boolean mask (the approach of the paper's public code), all in one run.

    python bench/attention_long.py                  # B=1, 8 heads of 16 (PathX width 128), W=4096
    python bench/attention_long.py --csv out.csv    # ... and every row into a CSV file
    python bench/attention_long.py --smoke          # L = 64, 128, W = 32 on CPU: checks it works

One measurement = forward + backward of self-attention on q, k, v (B, H, L, D) in bf16 on CUDA
(float32 on CPU): the median of --repeat calls after warm-up (which also compiles), the methods'
calls interleaved, with peak memory (torch.cuda.max_memory_allocated over a method's calls,
inputs excluded). --forward times forward only.

* ``dense``      - full attention, spt.kernels.attention.full_attention at the path "library"
                   (flash-attn) where it runs, else "torch" (SDPA, which picks its flash kernel
                   for unmasked bf16 inputs): O(L^2) time.
* ``local``      - neighbour-block local attention, spt.kernels.attention.local_attention, block W,
                   the path "torch" (gathered blocks): each query sees 3W keys, O(L·W) time and
                   memory.
* ``local-flex`` - the same function at the path "flex": FlexAttention with a block-sparse
                   mask (compiled on CUDA; eager, all scores computed, on the CPU, where torch has
                   no backward for it: fwd+bwd rows there say so and run nothing).
* ``bool-mask``  - the same neighbour-block pattern given to SDPA as a dense (L, L) boolean
                   attn_mask, as the paper's public code does (and local attention's path
                   "dense"): the mask costs L^2 bytes and rules out the flash kernel, and all L^2
                   scores are computed.

Columns: ``vs dense`` = dense time / this time; ``ideal`` = the scores dense attention computes /
the scores the neighbour pattern allows (the speed-up a kernel that skips exactly the refused
scores would get); ``of ideal`` = vs dense / ideal; ``vs bool`` = bool-mask time / this time and
``mem/bool`` = this peak / bool-mask's peak. Where the pattern is dense (L <= 2W) local attention
is dense attention: a line checks that it costs no more (within 10%, timing noise). At each L the
local outputs are checked against bool-mask's (forward, at min(L, 4W)). A method that fails at one
L (out of memory, a compile error) prints the error in its row and the run goes on.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spt.kernels import attention as A  # noqa: E402
from spt.kernels.local_flex import flex_takes  # noqa: E402

METHODS = ("dense", "local", "local-flex", "bool-mask")
LOCAL = ("local", "local-flex")
COLUMNS = ("L", "method", "causal", "ms", "peak_gb", "speedup_vs_dense", "ideal_speedup",
           "fraction_of_ideal", "speedup_vs_bool_mask", "mem_vs_bool_mask", "max_err", "error")


def neighbour_mask(L: int, W: int, causal: bool, device) -> torch.Tensor:
    """(L, L) bool: query i may see key j iff their blocks of W are neighbours (|bi - bj| <= 1;
    causal: 0 <= bi - bj <= 1 and j <= i)."""
    i = torch.arange(L, device=device)
    d = i[:, None] // W - i[None, :] // W
    return (d >= 0) & (d <= 1) & (i[None, :] <= i[:, None]) if causal else d.abs() <= 1


def pattern_scores(L: int, W: int, causal: bool) -> int:
    """How many (query, key) pairs the neighbour-block pattern allows."""
    sizes = [min(W, L - s) for s in range(0, L, W)]
    total = 0
    for b, n in enumerate(sizes):
        prev = sizes[b - 1] if b else 0
        if causal:
            total += n * prev + n * (n + 1) // 2
        else:
            total += n * (prev + n + (sizes[b + 1] if b + 1 < len(sizes) else 0))
    return total


def ideal_speedup(L: int, W: int, causal: bool) -> float:
    """Scores of dense (causal) attention / scores of the neighbour pattern."""
    dense = L * (L + 1) // 2 if causal else L * L
    return dense / pattern_scores(L, W, causal)


def run(method: str, q, k, v, W: int, causal: bool = False):
    if method == "dense":
        path = "library" if A.flash_unavailable(q) is None else "torch"
        return A.full_attention(q, k, v, causal=causal, backend=path)
    if method == "local":
        return A.local_attention(q, k, v, W, causal=causal, backend="torch")
    if method == "local-flex":
        if not A.is_dense_pattern(q.shape[-2], W) and not flex_takes(q, k, v, 0.0):
            raise RuntimeError("not run: torch's flex_attention has no backward on the CPU "
                               "(local_attention runs the gather path there); try --forward")
        return A.local_attention(q, k, v, W, causal=causal, backend="flex")
    mask = neighbour_mask(q.shape[-2], W, causal, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def measure_all(L: int, args, device, dtype) -> dict:
    """{method: {"ms", "mem_gb"} or {"ms": nan, "mem_gb": nan, "error"}} at L. The timed calls
    are interleaved (one call of each method per round) so that a change of load on the machine
    falls on every method alike; the peak memory of a method is its largest over its calls."""
    g = torch.Generator(device=device).manual_seed(0)
    shape = (args.batch, args.heads, L, args.head_dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, generator=g).requires_grad_(
        not args.forward) for _ in range(3))
    dy = torch.randn(shape, device=device, dtype=dtype, generator=g)
    cuda = device.type == "cuda"

    def call(method):  # seconds and peak GiB of one call
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        t = time.perf_counter()
        if args.forward:
            with torch.no_grad():
                run(method, q, k, v, args.block, args.causal)
        else:
            y = run(method, q, k, v, args.block, args.causal)
            torch.autograd.grad(y, (q, k, v), dy)
            del y
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t
        return dt, (torch.cuda.max_memory_allocated() - base) / 2 ** 30 if cuda else math.nan

    out, times, mems = {}, {}, {}

    def attempt(method):
        try:
            dt, mem = call(method)
            times[method].append(dt)
            mems[method] = max(mems[method], mem) if mem == mem else mem
        except Exception as e:  # noqa: BLE001 - reported in the row, the run goes on
            out[method] = {"ms": math.nan, "mem_gb": math.nan, "error": _first_line(e)}
            if cuda:
                torch.cuda.empty_cache()

    for m in args.methods:
        times[m], mems[m] = [], math.nan
        for _ in range(args.warmup):  # also compiles
            if m not in out:
                attempt(m)
        times[m], mems[m] = [], -math.inf if cuda else math.nan  # warm-up calls not counted
    for _ in range(args.repeat):
        for m in args.methods:
            if m not in out:
                attempt(m)
    for m in args.methods:
        if m not in out:
            out[m] = {"ms": 1e3 * sorted(times[m])[len(times[m]) // 2], "mem_gb": mems[m]}
    return out


def max_errors(L: int, args, device, dtype) -> dict:
    """max |method - bool-mask| per local method, forward on (1, 2, L, 16) inputs in the bench's
    dtype, against bool-mask in float32; a failure gives its message instead of a number."""
    g = torch.Generator(device=device).manual_seed(1)
    q, k, v = (torch.randn(1, 2, L, 16, device=device, generator=g) for _ in range(3))
    ref = run("bool-mask", q, k, v, args.block, args.causal)
    out = {}
    for m in LOCAL:
        try:
            with torch.no_grad():
                y = run(m, *(t.to(dtype) for t in (q, k, v)), args.block, args.causal)
            out[m] = float((y.float() - ref).abs().max())
        except Exception as e:  # noqa: BLE001 - reported in the row, the run goes on
            out[m] = f"check failed: {_first_line(e)}"
    return out


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:120] if text else ''}"


def _ratio(a, b) -> float:
    return a / b if a == a and b == b and b > 0 else math.nan  # NaN-safe


def rows_for(L: int, results: dict, errors: dict, args) -> list:
    """One dict per method at L, with the ratios (NaN where a side is missing)."""
    nan = {"ms": math.nan, "mem_gb": math.nan}
    dense, bool_ = results.get((L, "dense")) or nan, results.get((L, "bool-mask")) or nan
    rows = []
    for m in args.methods:
        r = results.get((L, m)) or nan
        row = {"L": L, "method": m, "causal": args.causal, "ms": r["ms"], "peak_gb": r["mem_gb"],
               "speedup_vs_dense": _ratio(dense["ms"], r["ms"]), "ideal_speedup": math.nan,
               "fraction_of_ideal": math.nan,
               "speedup_vs_bool_mask": _ratio(bool_["ms"], r["ms"]),
               "mem_vs_bool_mask": _ratio(r["mem_gb"], bool_["mem_gb"]),
               "max_err": math.nan, "error": r.get("error", "")}
        if m in LOCAL:
            row["ideal_speedup"] = ideal_speedup(L, args.block, args.causal)
            row["fraction_of_ideal"] = _ratio(row["speedup_vs_dense"], row["ideal_speedup"])
            err = errors.get(m)
            if isinstance(err, str):
                row["error"] = "; ".join(filter(None, [row["error"], err]))
            elif err is not None:
                row["max_err"] = err
                if err > args.tolerance:
                    row["error"] = "; ".join(filter(None, [row["error"], f"differs from "
                                                          f"bool-mask by {err:.2e}"]))
        rows.append(row)
    return rows


def _fmt(x, width: int, unit: str = "") -> str:
    return f"{f'{x:.2f}{unit}' if x == x else 'n/a':>{width}}"


def print_row(row: dict) -> None:
    print(f"{row['L']:7d} {row['method']:<10} {_fmt(row['ms'], 9)} {_fmt(row['peak_gb'], 7)} "
          f"{_fmt(row['speedup_vs_dense'], 9, 'x')} {_fmt(row['ideal_speedup'], 7, 'x')} "
          f"{_fmt(row['fraction_of_ideal'], 8)} {_fmt(row['speedup_vs_bool_mask'], 8, 'x')} "
          f"{_fmt(row['mem_vs_bool_mask'], 8, 'x')}"
          + (f"  {row['error']}" if row["error"] else ""), flush=True)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+",
                    default=[1024, 2048, 4096, 8192, 16384, 32768, 65536])
    ap.add_argument("--block", type=int, default=4096, help="local block W (paper: 4096)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--causal", action="store_true", help="causal attention (all methods)")
    ap.add_argument("--forward", action="store_true", help="time the forward pass only")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    ap.add_argument("--csv", type=Path, help="also write every row to this CSV file")
    ap.add_argument("--smoke", action="store_true", help="L = 64, 128 and W = 32 on CPU")
    a = ap.parse_args(argv)
    # the docstring says it: eager flex_attention (the CPU) computes every score
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    if a.smoke:
        a.lengths, a.block, a.repeat, a.warmup = [64, 128], 32, 2, 1
    device = torch.device("cuda" if torch.cuda.is_available() and not a.smoke else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a.tolerance = 5e-2 if dtype == torch.bfloat16 else 1e-4
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'}, {dtype}, "
          f"torch {torch.__version__}; B={a.batch} H={a.heads} D={a.head_dim} W={a.block}; "
          f"{'causal' if a.causal else 'bidirectional'}; "
          f"{'forward' if a.forward else 'forward + backward'}; flash-attn installed: "
          f"{A.FLASH_AVAILABLE}")
    print(f"{'L':>7} {'method':<10} {'ms':>9} {'peak GB':>7} {'vs dense':>9} {'ideal':>7} "
          f"{'of ideal':>8} {'vs bool':>8} {'mem/bool':>8}")
    out = None
    if a.csv:
        a.csv.parent.mkdir(parents=True, exist_ok=True)
        out = open(a.csv, "w", newline="")
        writer = csv.DictWriter(out, fieldnames=COLUMNS)
        writer.writeheader()
    results: dict = {}
    checked: dict = {}
    try:
        for L in a.lengths:
            n = min(L, 4 * a.block)
            if n not in checked:
                checked[n] = max_errors(n, a, device, dtype)
            for m, r in measure_all(L, a, device, dtype).items():
                results[(L, m)] = r
            rows = rows_for(L, results, checked[n], a)
            for row in rows:
                print_row(row)
                if out:
                    writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v)
                                     for k, v in row.items()})
            if out:
                out.flush()
            if A.is_dense_pattern(L, a.block):
                said = [f"{r['method']} {1 / r['speedup_vs_dense']:.2f}x"
                        for r in rows if r["method"] in LOCAL and r["speedup_vs_dense"] > 0]
                if said:
                    worst = max(1 / r["speedup_vs_dense"] for r in rows
                                if r["method"] in LOCAL and r["speedup_vs_dense"] > 0)
                    print(f"{'':7} dense pattern (L <= 2W): cost vs dense: {', '.join(said)} "
                          f"({'ok' if worst <= 1.1 else 'SLOWER than dense'}: <= 1.10x wanted)")
    finally:
        if out:
            out.close()
    return results


if __name__ == "__main__":
    main()
