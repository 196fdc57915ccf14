"""Benchmark: the GLA and LRU mixers on CPU, forward + backward, fast path vs the loop over time.

    python bench/gla_lru.py                          # d_model 64, batch 2, L = 1024 and 4096
    python bench/gla_lru.py --L 16384 --no-ref --repeat 3

One measurement: a causal mixer at its defaults (spt.models.mixers), y = mixer(x) on a random
(batch, L, d_model) input, then the backward of a random projection of y. "fast" runs the mixer as
built (the chunked GLA kernel, the chunked linear scan); "ref" the same mixer with its cores' scan
set to the loop over time (gla_ref, linear_scan_ref), after one warm-up call of each at L = 64.
Time: the best of --repeat calls; the ratio ref / fast is measured in the same run.
"""
from __future__ import annotations

import argparse
import copy
import time

import torch

from spt.kernels.gla import gla_ref
from spt.kernels.scan import linear_scan_ref
from spt.models.mixers.gla import GLA
from spt.models.mixers.lru import LRU

MIXERS = {"gla": (GLA, gla_ref), "lru": (LRU, linear_scan_ref)}


def fwd_bwd_ms(mixer, x, repeat):
    w = torch.randn(x.shape)
    best = float("inf")
    for _ in range(repeat):
        mixer.zero_grad()
        xi = x.clone().requires_grad_()
        t = time.perf_counter()
        (mixer(xi) * w).sum().backward()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--L", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--no-ref", action="store_true", help="skip the loop over time")
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, d_model {args.d_model}, "
          f"batch {args.batch}, best of {args.repeat}")
    print(f"{'mixer':6} {'L':>6} {'fast ms':>9} {'ref ms':>9} {'ref/fast':>9}")
    for name, (cls, ref_scan) in MIXERS.items():
        torch.manual_seed(0)
        fast = cls(args.d_model, causal=True)
        ref = copy.deepcopy(fast)
        for core in ref.cores:
            core.scan = ref_scan
        for m in (fast, ref):  # warm-up: first-call allocations stay out of the table
            fwd_bwd_ms(m, torch.randn(args.batch, 64, args.d_model), 1)
        for L in args.L:
            x = torch.randn(args.batch, L, args.d_model)
            t_fast = fwd_bwd_ms(fast, x, args.repeat)
            if args.no_ref:
                print(f"{name:6} {L:>6} {t_fast:>9.0f} {'-':>9} {'-':>9}")
                continue
            t_ref = fwd_bwd_ms(ref, x, args.repeat)
            print(f"{name:6} {L:>6} {t_fast:>9.0f} {t_ref:>9.0f} {t_ref / t_fast:>9.1f}")


if __name__ == "__main__":
    main()
