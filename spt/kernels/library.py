"""The field's GPU kernels, and the paths of spt's recurrences that may call them.

Every recurrence of :mod:`spt.kernels` (:func:`~spt.kernels.scan.linear_scan`,
:func:`~spt.kernels.scan.selective_scan`, :func:`~spt.kernels.ssd.ssd`,
:func:`~spt.kernels.gla.gla`, :func:`~spt.kernels.delta_rule.gated_delta_rule`) takes
``backend=`` from :data:`RECURRENCE_PATHS` (words of :mod:`spt.kernels.paths`):

    "torch"   : spt's own chunked / parallel plain-torch form (any device and dtype): the
                reference, and the default
    "library" : the library kernel (mamba-ssm's or fla's); a ValueError when it cannot run here
    "ref"     : the loop over time (the function's ``*_ref``), the tests' oracle

Which one a layer runs is its recurrence core's path (:func:`spt.kernels.paths.set_paths`,
measured by ``TrainConfig.paths="auto"``). Nothing here is imported at spt's import: a package
is imported the first time the path "library" asks for it.
"""
from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Callable, Optional, Sequence

import torch

from .paths import check_path

RECURRENCE_PATHS = ("torch", "library", "ref")


@lru_cache(maxsize=None)
def _load(module: str, name: str) -> Optional[Callable]:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def check_backend(where: str, backend: str, choices: Sequence[str] = RECURRENCE_PATHS) -> str:
    """`backend` when it is one of `choices`; else a ValueError from `where` listing them."""
    return check_path(where, backend, choices)


def library_kernel(where: str, backend: str, x: torch.Tensor, module: str, name: str,
                   install: str) -> Optional[Callable]:
    """The library kernel ``module.name`` that the path "library" asks `where` to run on inputs
    like `x`; None for spt's own paths ("torch", "ref"). `install` is the pip requirement that
    provides it, named in the errors of "library"."""
    check_backend(where, backend)
    if backend != "library":
        return None
    if not x.is_cuda:
        raise ValueError(f"{where}: the path 'library' runs {module}.{name} (pip install "
                         f"{install}), a CUDA kernel, but the inputs are on {x.device}; move them "
                         f"to a GPU, or use the path 'torch' (spt's own form)")
    fn = _load(module, name)
    if fn is None:
        raise ValueError(f"{where}: the path 'library' needs {module}.{name}, which does not "
                         f"import here; install it (pip install {install}), or use the path "
                         f"'torch' (spt's own form)")
    return fn


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
