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
