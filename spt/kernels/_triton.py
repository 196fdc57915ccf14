"""Optional Triton import and the backend choice shared by the fast kernels.

Triton is never required: without it (or without CUDA) every public kernel falls back to its
chunked plain-torch path. On CPU, Triton kernels run only in Triton's interpreter
(``TRITON_INTERPRET=1`` set before triton is imported), which the tests use; the interpreter is
float32-only here (it silently returns zeros for bfloat16).

Paths of the SSM kernel functions (``backend=``, words of :mod:`spt.kernels.paths`):
    "torch"  : the chunked plain-torch path: memory bounded in L, any device and dtype (the
               reference, and the default).
    "triton" : the Triton kernels (CUDA, or CPU under TRITON_INTERPRET=1; complex64 only).
    "ref"    : the plain-torch reference that materialises the full (.., N, L) matrix.
"""
from __future__ import annotations

import os

import torch

from .paths import check_path

try:  # pragma: no cover - exercised by whichever environment runs the tests
    import triton
    import triton.language as tl
    HAS_TRITON = True
except Exception:  # ImportError, or a broken install: fall back to the torch paths
    triton = None
    tl = None
    HAS_TRITON = False

KERNEL_PATHS = ("torch", "triton", "ref")


def interpreting() -> bool:
    """True when Triton kernels run in the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def resolve_backend(backend: str, t: torch.Tensor) -> str:
    """`backend` ("torch" | "triton" | "ref") when it can run on inputs like `t` (a complex
    tensor); errors name what is missing."""
    check_path("SSM kernel", backend, KERNEL_PATHS)
    if backend == "triton":
        if not HAS_TRITON:
            raise RuntimeError("the path 'triton' needs the triton package (pip install triton); "
                               "the path 'torch' runs everywhere")
        if not t.is_cuda and not interpreting():
            raise RuntimeError("the path 'triton' runs on CPU only in Triton's interpreter: set "
                               "TRITON_INTERPRET=1 before importing triton, or use the path 'torch'")
        if t.dtype != torch.complex64:
            raise TypeError(f"the Triton kernels compute in float32 (complex64 inputs); got {t.dtype}")
    return backend


def block_sizes(rows: int, cols: int) -> tuple[int, int]:
    """Triton block sizes for a (rows = state size N, cols = L or frequencies) sum."""
    return min(32, triton.next_power_of_2(rows)), min(128, triton.next_power_of_2(cols))
