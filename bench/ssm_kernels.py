"""Benchmark: one SSM layer's convolution (kernel generation + FFT conv + skip), forward + backward.

    python bench/ssm_kernels.py --gpu-only --csv out.csv    # CUDA, paper sizes, about a minute
    python bench/ssm_kernels.py --smoke                     # tiny sizes on CPU, seconds
    python bench/ssm_kernels.py --device cpu --H 64 --L 4096 --batch 2 --cases dlr:1024

One measurement, in this process: a bidirectional SSMBlock of the given kind (spt.models.ssm) and
u (batch, L, H); part "layer" times y = block.conv(u) (K * u + D u, the layer's linear part),
part "kernel" K = block.kernel(L) alone, part "conv" fft_conv(u, K, skip=D) alone with K fixed;
each followed by the backward of a random projection. Paths are (kernel path, conv path), words of
spt.kernels.paths: kernel "ref" materialises the (.., N, L) matrices, "torch" is the chunked torch
path (the reference of TrainConfig.paths), "triton" the Triton kernels (CUDA), "gemm" (DLR only)
forms E = exp(Lambda l) once and runs one GEMM for all channels (spt.kernels.vandermonde); conv
"torch" is the FFT convolution differentiated by autograd, "manual" the hand-written backward with
the skip folded in (spt.kernels.fft_conv). "default" = (torch, torch) on a CPU, (triton, torch) on
CUDA; ratios are against it and against the materialised reference, measured in the same run.

Time: median of --repeat calls after two warm-up calls (synchronised on CUDA). Peak memory (CUDA):
torch.cuda.max_memory_allocated above the level before the call. GB/s: the bytes a layer fwd + bwd
must at least move (u, y and their grads, K and its grad, parameters) over the time, against the
card's copy bandwidth measured at the start. A failing row prints its error and the run goes on;
reference rows whose matrices exceed --max-ref-gb, and rows after --max-seconds, are skipped.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spt.kernels import HAS_TRITON, fft_conv, set_paths  # noqa: E402
from spt.models.ssm import SSMBlock  # noqa: E402
from spt.ssm_config import SSMConfig  # noqa: E402
from spt.train.throughput import copy_bandwidth  # noqa: E402

# (part, kernel path, conv path); the first of each part is its "default" ("fast": the Triton
# kernels on CUDA, the chunked torch path elsewhere)
PATHS = [("layer", "fast", "torch"), ("layer", "ref", "torch"), ("layer", "fast", "manual"),
         ("layer", "gemm", "torch"), ("layer", "gemm", "manual"),
         ("kernel", "fast", "-"), ("kernel", "ref", "-"), ("kernel", "gemm", "-"),
         ("conv", "-", "torch"), ("conv", "-", "manual")]
DEFAULTS = {part: next(p for p in PATHS if p[0] == part) for part in ("layer", "kernel", "conv")}
REFS = {"layer": ("layer", "ref", "torch"), "kernel": ("kernel", "ref", "-"), "conv": None}
FIELDS = ["device", "kind", "N", "L", "H", "batch", "part", "kernel", "conv", "ms", "vs_default",
          "vs_ref", "peak_mb", "gbs", "of_peak", "error"]


def ref_gb(kind: str, N: int, L: int, H: int) -> float:
    """Size of the largest materialised complex64 matrix of the reference kernel, in GB."""
    rows = 6 if kind == "s4" else 1            # S4: (C~, Q) x (B, P) products, both directions
    n = N // 2 if kind != "dlr" else N
    return rows * H * n * (L // 2 + 1 if kind == "s4" else L) * 8 / 1e9


def u_device_is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def make_step(block: SSMBlock, part: str, kernel: str, conv: str, L: int, batch: int, device):
    """A closure running one forward + backward of `part`, and the bytes it must at least move."""
    H = block.D.shape[0]
    fast = "triton" if u_device_is_cuda(device) and HAS_TRITON else "torch"
    set_paths(block, {"fft_conv": "torch" if conv == "-" else conv,
                      block.kernel.path_kind: fast if kernel in ("fast", "-") else kernel})
    u = torch.randn(batch, L, H, device=device, requires_grad=True)
    g = torch.randn(batch, L, H, device=device)
    if part == "kernel":
        gk = torch.randn(2, H, L, device=device)
        run = lambda: (block.kernel(L) * gk).sum()                       # noqa: E731
    elif part == "conv":
        k = block.kernel(L).detach().requires_grad_()
        run = lambda: (fft_conv(u, k, skip=block.D, backend=conv) * g).sum()  # noqa: E731
    else:
        run = lambda: (block.conv(u) * g).sum()                          # noqa: E731

    def step():
        block.zero_grad(set_to_none=True)
        u.grad = None
        run().backward()

    n_par = sum(p.numel() for p in block.kernel.parameters())
    return step, 4 * (4 * batch * L * H + 2 * 2 * H * L + 2 * n_par)


def measure(step, repeat: int, device) -> tuple[float, float]:
    """(median ms, peak MB above the starting level; None on CPU)."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    step()
    step()
    sync()
    peak = None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    if cuda:
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return 1e3 * sorted(times)[len(times) // 2], peak


def rows_for(kind: str, N: int, L: int, args, device, peak_bw, t_start):
    """Every path of one (kind, N, L): a list of CSV dicts (failures carry their error)."""
    torch.manual_seed(0)
    cfg = SSMConfig(kind=kind, d_model=args.H, d_state=N, max_len=L, n_layers=1, causal=False)
    block = SSMBlock(cfg).to(device)
    out = []
    for part, kernel, conv in PATHS:
        row = dict(device=device.type, kind=kind, N=N, L=L, H=args.H, batch=args.batch, part=part,
                   kernel=kernel, conv=conv, error="")
        if kernel == "gemm" and kind != "dlr":
            row["error"] = "skipped: kernel gemm needs DLR's shared Lambda"
        elif kernel == "ref" and ref_gb(kind, N, L, args.H) > args.max_ref_gb:
            row["error"] = f"skipped: reference matrices > --max-ref-gb {args.max_ref_gb}"
        elif time.perf_counter() - t_start > args.max_seconds:
            row["error"] = f"skipped: past --max-seconds {args.max_seconds}"
        else:
            try:
                step, min_bytes = make_step(block, part, kernel, conv, L, args.batch, device)
                ms, peak = measure(step, args.repeat, device)
                row.update(ms=ms, peak_mb=peak)
                if part == "layer" and peak_bw:
                    gbs = min_bytes / (ms / 1e3) / 1e9
                    row.update(gbs=gbs, of_peak=gbs / peak_bw)
            except Exception as e:  # noqa: BLE001 - one failing row must not end the run
                row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        out.append(row)
    ms = {(r["part"], r["kernel"], r["conv"]): r.get("ms") for r in out}
    for row in out:                                        # ratios measured in this same run
        default, ref = ms.get(DEFAULTS[row["part"]]), ms.get(REFS[row["part"]])
        if "ms" in row:
            row["vs_default"] = default / row["ms"] if default else None
            row["vs_ref"] = ref / row["ms"] if ref else None
        print(format_row(row), flush=True)
    return out


def format_row(r: dict) -> str:
    def num(key, fmt):
        v = r.get(key)
        return format(v, fmt) if isinstance(v, float) else format("", fmt.split(".")[0] + "s")

    line = (f"{r['kind']:4s} {r['N']:5d} {r['L']:6d} {r['part']:6s} {r['kernel']:5s} {r['conv']:8s} "
            f"{num('ms', '9.2f')} {num('vs_default', '7.2f')} {num('vs_ref', '7.2f')} "
            f"{num('peak_mb', '8.0f')} {num('gbs', '7.0f')} {num('of_peak', '7.1%')}")
    return line + (f"  {r['error']}" if r["error"] else "")


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu-only", action="store_true", help="CUDA paths only (fails without CUDA)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on CPU: checks the script")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda")
    ap.add_argument("--H", type=int, default=256)
    ap.add_argument("--L", type=int, nargs="+", default=[16384, 4096, 1024],
                    help="lengths, in this order (the longest first: --max-seconds skips the last)")
    ap.add_argument("--cases", nargs="+", default=["s4:64", "s4d:64", "dlr:1024"],
                    help="kind:N pairs (DLR's paper state size is 1024)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--max-ref-gb", type=float, default=4.0)
    ap.add_argument("--max-seconds", type=float, default=55.0,
                    help="rows that would start later than this are skipped")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--csv", type=Path, default=None, help="write every row to this CSV file")
    args = ap.parse_args(argv)
    if args.smoke:
        args.device, args.H, args.L, args.batch, args.repeat = "cpu", 8, [61], 2, 1
        args.cases = ["s4:8", "s4d:8", "dlr:16"]
    if args.gpu_only:
        if not torch.cuda.is_available():
            raise SystemExit("--gpu-only: no CUDA device here (use --device cpu or --smoke)")
        args.device = "cuda"
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device if args.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    print(f"SSM layer conv, fwd+bwd, bidirectional, H={args.H}, batch={args.batch}, device "
          f"{device.type}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    peak_bw = None
    if device.type == "cuda":
        peak_bw = copy_bandwidth(torch.device("cuda")) / 1e9
        print(f"GPU: {torch.cuda.get_device_name()}, measured copy bandwidth {peak_bw:.0f} GB/s")
    head = (f"{'kind':4s} {'N':>5s} {'L':>6s} {'part':6s} {'kern':5s} {'conv':8s} {'ms':>9s} "
            f"{'vs_def':>7s} {'vs_ref':>7s} {'peak MB':>8s} {'GB/s':>7s} {'of peak':>7s}")
    print(head + "\n" + "-" * len(head))
    t_start, rows = time.perf_counter(), []
    out = open(args.csv, "w", newline="") if args.csv else None
    writer = csv.DictWriter(out, fieldnames=FIELDS) if out else None
    if writer:
        writer.writeheader()
    try:
        for L in args.L:
            for case in args.cases:
                kind, N = case.split(":")
                new = rows_for(kind, int(N), L, args, device, peak_bw, t_start)
                rows += new
                if writer:                       # written as they come: a killed run keeps them
                    writer.writerows(new)
                    out.flush()
    finally:
        if out:
            out.close()
    print("vs_def = time of the part's default path (fast, torch) / this time; vs_ref = the "
          f"reference's time / this time. Total {time.perf_counter() - t_start:.0f} s.")
    return rows


if __name__ == "__main__":
    main()
