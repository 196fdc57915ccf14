"""Benchmark: Mamba-2's mixer on CPU, forward + backward, the chunked SSD against its loop over time.

    python bench/mixer_mamba2.py                        # d_model 64, batch 2, L = 1K and 4K
    python bench/mixer_mamba2.py --L 16384 --no-ref --repeat 3

One measurement: Mamba2(d_model) (causal and two-way), y = mixer(x) for x (batch, L, d_model), then
backward of a random projection of y. "fast" runs spt.kernels.ssd.ssd (the block decomposition),
"ref" the same weights through ssd_ref (the recurrence, one step at a time). Time is the median of
--repeat calls after one warm-up call, in this process; the ratio is ref / fast from the same run.
On a machine shared with other jobs, OMP_NUM_THREADS=1 gives steadier numbers than oversubscribed
threads.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from spt.kernels.ssd import ssd_ref
from spt.models.mixers.mamba2 import Mamba2


def fwd_bwd_ms(mixer, x, g, repeat):
    def step():
        mixer.zero_grad(set_to_none=True)
        (mixer(x) * g).sum().backward()

    step()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        step()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--L", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--no-ref", action="store_true", help="time the chunked SSD only")
    a = p.parse_args()
    print(f"Mamba2 mixer, CPU, d_model={a.d_model}, batch={a.batch}, torch threads "
          f"{torch.get_num_threads()}; forward + backward ms (median of {a.repeat})")
    print(f"{'L':>7} {'causal':>7} {'fast ms':>9} {'ref ms':>9} {'ref/fast':>9}")
    for L in a.L:
        for causal in (True, False):
            torch.manual_seed(0)
            fast = Mamba2(a.d_model, causal=causal)
            x = torch.randn(a.batch, L, a.d_model, requires_grad=True)
            g = torch.randn(a.batch, L, a.d_model)
            t_fast = fwd_bwd_ms(fast, x, g, a.repeat)
            t_ref = float("nan")
            if not a.no_ref:
                ref = copy.deepcopy(fast)
                for core in ref.cores:
                    core.scan = ssd_ref
                t_ref = fwd_bwd_ms(ref, x, g, a.repeat)
            print(f"{L:>7} {str(causal):>7} {t_fast:>9.1f} {t_ref:>9.1f} {t_ref / t_fast:>9.1f}")


if __name__ == "__main__":
    main()
