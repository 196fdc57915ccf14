"""Benchmark: today's mixers, forward + backward tokens per second, spt's fast path against the
loop over time it is tested against, and against mambapy for Mamba.

    python bench/mixer_throughput.py                          # every mixer, L = 1K, 4K, 16K, CPU
    python bench/mixer_throughput.py --mixers mamba lru --L 1024 --threads 2
    python bench/mixer_throughput.py --device cuda --csv mixers.csv   # spt's own forms on a GPU
    python bench/mixer_throughput.py --smoke                  # seconds: L = 32, d_model 64, one repeat

On CUDA the mixers run spt's own chunked / scan forms unless the library kernels (mamba-ssm,
fla) are installed, in which case the mixer calls them (the "path" column says which), timed with
CUDA synchronisation; the loop-over-time reference and mambapy are left out there (minutes at
16K), and so is nothing else.

One measurement: one causal mixer of spt.mixer_config at d_model (default 64) with its authors'
default shape, x (batch, L, d_model) -> y, backward of a fixed random projection of y. Paths:
"spt" the mixer at its recurrences' path "torch" (its chunked / pairwise-scan form), or on CUDA at
"library" where the library imports, "ref" the same weights with every recurrence at the path
"ref", its loop over time (spt.kernels.paths.set_paths on a copy), and for
Mamba "mambapy" (mambapy's MambaBlock, its parallel scan: a third-party pure-PyTorch Mamba).
Time is the median of --repeat calls after one warm-up call, in one process, torch threads set by
--threads; "x ref" and "x mambapy" are spt's speed over theirs, measured in the same run. A
reference call longer than --max-ref-s (estimated from the previous length) is skipped ("-").
"""
from __future__ import annotations

import argparse
import copy
import csv
import importlib.util
import statistics
import time

import torch

from spt.kernels.paths import set_paths
from spt.mixer_config import MIXER_CONFIGS
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


# the library each mixer calls on CUDA when it is installed (spt.kernels.library)
LIBRARY = {"mamba": "mamba_ssm", "mamba2": "mamba_ssm", "gla": "fla",
           "gated_deltanet": "fla"}


def seconds(layer, x: torch.Tensor, w: torch.Tensor, repeat: int) -> float:
    """Median wall time of forward + backward (synchronised on CUDA)."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    times = []
    for i in range(repeat + 1):
        x.grad = None
        sync()
        t0 = time.perf_counter()
        (layer(x) * w).sum().backward()
        sync()
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def path_of(kind: str, device: torch.device) -> str:
    lib = LIBRARY.get(kind)
    if device.type == "cuda" and lib and importlib.util.find_spec(lib) is not None:
        return lib
    return "spt"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mixers", nargs="*", default=[c.kind for c in MIXER_CONFIGS])
    ap.add_argument("--L", nargs="*", type=int, default=[1024, 4096, 16384])
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--max-ref-s", type=float, default=120.0)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, or auto (cuda when there is one)")
    ap.add_argument("--csv", default=None, help="also write every row to this CSV file")
    ap.add_argument("--smoke", action="store_true",
                    help="L = 32, d_model 64 (every mixer's default heads fit), 1 repeat: a check")
    args = ap.parse_args(argv)
    if args.smoke:
        args.L, args.d_model, args.repeat = [32], 64, 1
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {args.threads} threads"
    print(f"{where}, d_model={args.d_model}, batch={args.batch}, fwd+bwd tokens/s (median of "
          f"{args.repeat}); x ref, x mambapy: spt's speed over theirs")
    print(f"{'mixer':<16}{'path':>10}{'L':>7}{'spt':>10}{'ref':>10}{'x ref':>8}{'mambapy':>10}"
          f"{'x mambapy':>11}")
    rows = []
    for kind in args.mixers:
        torch.manual_seed(0)
        fast = build(kind, args.d_model).to(device)
        on_cpu = device.type == "cpu"
        if path_of(kind, device) != "spt":
            set_paths(fast, "library")
        ref = None
        if on_cpu:
            ref = copy.deepcopy(fast)
            set_paths(ref, "ref")
        other = mambapy_block(args.d_model) if kind == "mamba" and on_cpu else None
        ref_s_per_token = None
        for L in args.L:
            x = torch.randn(args.batch, L, args.d_model, device=device, requires_grad=True)
            w = torch.randn(args.batch, L, args.d_model, device=device)
            tokens = args.batch * L
            try:
                t_fast = seconds(fast, x, w, args.repeat)
            except Exception as e:  # one failing row is reported and the others go on
                print(f"{kind:<16}{path_of(kind, device):>10}{L:>7}  failed: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:120] if str(e) else ''}", flush=True)
                rows.append({"mixer": kind, "path": path_of(kind, device), "L": L,
                             "error": f"{type(e).__name__}: {e}"[:300]})
                continue
            t_ref = None
            if ref is not None and (ref_s_per_token is None
                                    or ref_s_per_token * tokens * (args.repeat + 1) < args.max_ref_s):
                t_ref = seconds(ref, x, w, 1 if L > 4096 else args.repeat)
                ref_s_per_token = t_ref / tokens
            t_other = seconds(other, x, w, args.repeat) if other is not None else None
            print(f"{kind:<16}{path_of(kind, device):>10}{L:>7}{_rate(tokens, t_fast)}"
                  f"{_rate(tokens, t_ref)}{_speedup(t_ref, t_fast, 8)}{_rate(tokens, t_other)}"
                  f"{_speedup(t_other, t_fast, 11)}", flush=True)
            rows.append({"mixer": kind, "path": path_of(kind, device), "L": L,
                         "tokens_per_s": tokens / t_fast,
                         "ref_tokens_per_s": tokens / t_ref if t_ref else "",
                         "mambapy_tokens_per_s": tokens / t_other if t_other else "", "error": ""})
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            out = csv.DictWriter(f, ["mixer", "path", "L", "tokens_per_s", "ref_tokens_per_s",
                                     "mambapy_tokens_per_s", "error"])
            out.writeheader()
            out.writerows(rows)


def _rate(tokens: int, t) -> str:
    return f"{tokens / t:>10,.0f}" if t else f"{'-':>10}"


def _speedup(t_other, t_fast: float, width: int) -> str:
    return f"{t_other / t_fast:>{width - 1}.1f}x" if t_other else f"{'-':>{width}}"


if __name__ == "__main__":
    main()
