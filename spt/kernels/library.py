"""The field's GPU kernels, used when their package is installed and the inputs are on CUDA.

    fn = cuda_kernel("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn", x)
    y = fn(...) if fn is not None else selective_scan(...)     # spt's own CPU form otherwise

Nothing here is imported at spt's import: a package is imported the first time a CUDA input
asks for it. A missing package, or CPU inputs, give None, and the caller runs spt's own form.
"""
from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Callable, Optional

import torch


@lru_cache(maxsize=None)
def _load(module: str, name: str) -> Optional[Callable]:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def cuda_kernel(module: str, name: str, x: torch.Tensor) -> Optional[Callable]:
    """``module.name`` when `x` is on CUDA and the package imports; else None."""
    if not x.is_cuda:
        return None
    return _load(module, name)


def fla_one_config() -> int:
    """Make every autotuned Triton kernel of the fla modules imported so far try one config.

    fla's chunk kernels autotune on their first call: every config of each kernel is compiled and
    timed, which took more than 35 s per test on an H200. A check of their *results* needs any one
    valid config, so each autotuner keeps the smallest of its own list (fewest pipeline stages,
    then smallest blocks, then fewest warps: the one least likely to exceed shared memory), and a
    one-config autotuner runs it without timing. Speed work keeps the full lists (fla caches the
    chosen config per shape with ``FLA_CACHE_RESULTS=1`` and a kept ``TRITON_CACHE_DIR``).
    Import the fla ops first (e.g. ``fla.ops.gla``); returns the number of kernels narrowed.
    """
    import sys

    from triton.runtime.autotuner import Autotuner

    def size(c) -> tuple:
        blocks = sum(v for v in c.kwargs.values() if isinstance(v, int))
        return (c.num_stages or 0, blocks, c.num_warps or 0)

    narrowed = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("fla.") or module is None:
            continue
        for obj in vars(module).values():
            if isinstance(obj, Autotuner) and len(obj.configs) > 1:
                obj.configs = [min(obj.configs, key=size)]
                narrowed += 1
    return narrowed
