"""Benchmark: Gated DeltaNet's mixer, forward + backward, the chunked rule against the loop over time,
in one run (CPU by default).

    python bench/gated_deltanet_cpu.py                          # d_model 64, batch 2, L = 1024, 4096
    python bench/gated_deltanet_cpu.py --lengths 1024 16384 --no-ref --chunks 32 64 128
    python bench/gated_deltanet_cpu.py --threads 1      # on a shared machine: no thread contention

One measurement = one call of mixer(x, valid=None) and backward of its sum, after one warm-up call
at L = 256, wall time in ms (--repeat calls, the best one). ``ref`` is the same mixer with
spt.kernels.delta_rule.gated_delta_rule_ref (a Python loop over the L time steps); ``chunk T`` is
gated_delta_rule with chunks of T positions. speed-up = ref's time / this time.
"""
from __future__ import annotations

import argparse
import copy
import functools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spt.kernels.delta_rule import gated_delta_rule, gated_delta_rule_ref  # noqa: E402
from spt.models.mixers.gated_deltanet import GatedDeltaNet  # noqa: E402


def with_rule(mixer, rule):
    m = copy.deepcopy(mixer)
    for core in m.cores:
        core.rule = rule
    return m


def time_ms(mixer, x, repeat):
    best = float("inf")
    for _ in range(repeat):
        xi = x.clone().requires_grad_(True)
        t = time.perf_counter()
        mixer(xi).sum().backward()
        best = min(best, time.perf_counter() - t)
    return 1e3 * best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--chunks", type=int, nargs="+", default=[64])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--causal", action="store_true", help="one direction (default: both ways)")
    p.add_argument("--no-ref", action="store_true", help="skip the loop over time")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = GatedDeltaNet(args.d_model, causal=args.causal, n_heads=args.heads)
    paths = {f"chunk {T}": with_rule(base, functools.partial(gated_delta_rule, chunk=T))
             for T in args.chunks}
    if not args.no_ref:
        paths["ref"] = with_rule(base, gated_delta_rule_ref)
    print(f"# Gated DeltaNet mixer fwd+bwd, d_model={args.d_model}, heads={args.heads}, batch="
          f"{args.batch}, causal={args.causal}, threads={torch.get_num_threads()}, best of "
          f"{args.repeat}")
    print(f"{'L':>7} {'path':>10} {'ms':>10} {'speed-up':>9}")
    for L in args.lengths:
        x = torch.randn(args.batch, L, args.d_model)
        times = {}
        for name, mixer in paths.items():
            time_ms(mixer, x[:, :256], 1)
            times[name] = time_ms(mixer, x, args.repeat)
        for name, ms in times.items():
            ratio = f"{times['ref'] / ms:9.1f}" if "ref" in times else f"{'-':>9}"
            print(f"{L:>7} {name:>10} {ms:10.1f} {ratio}")


if __name__ == "__main__":
    main()
