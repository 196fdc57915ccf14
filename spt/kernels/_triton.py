"""Optional Triton import and the backend choice shared by the fast kernels.

Triton is never required: without it (or without CUDA) every public kernel falls back to its
chunked plain-torch path. On CPU, Triton kernels run only in Triton's interpreter
(``TRITON_INTERPRET=1`` set before triton is imported), which the tests use; the interpreter is
float32-only here (it silently returns zeros for bfloat16).

Backends of every public kernel function:
    "auto"   : "triton" when triton imports and the inputs are complex64 CUDA tensors, else "torch".
    "triton" : the Triton kernels (CUDA, or CPU under TRITON_INTERPRET=1; complex64 only).
    "torch"  : the chunked plain-torch path: memory bounded in L, any device and dtype.
    "ref"    : the plain-torch reference that materialises the full (.., N, L) matrix.
"""
from __future__ import annotations

import os

import torch

try:  # pragma: no cover - exercised by whichever environment runs the tests
    import triton
    import triton.language as tl
    HAS_TRITON = True
except Exception:  # ImportError, or a broken install: fall back to the torch paths
    triton = None
    tl = None
    HAS_TRITON = False

BACKENDS = ("auto", "triton", "torch", "ref")


def interpreting() -> bool:
    """True when Triton kernels run in the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def resolve_backend(backend: str, t: torch.Tensor) -> str:
    """The concrete backend ("triton" | "torch" | "ref") for inputs like `t` (complex tensor)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        ok = HAS_TRITON and t.is_cuda and t.dtype == torch.complex64
        return "triton" if ok else "torch"
    if backend == "triton":
        if not HAS_TRITON:
            raise RuntimeError("backend='triton' needs the triton package (pip install triton); "
                               "use backend='auto' to fall back to the torch path")
        if not t.is_cuda and not interpreting():
            raise RuntimeError("backend='triton' on CPU runs only in Triton's interpreter: set "
                               "TRITON_INTERPRET=1 before importing triton, or use backend='torch'")
        if t.dtype != torch.complex64:
            raise TypeError(f"the Triton kernels compute in float32 (complex64 inputs); got {t.dtype}")
    return backend


def block_sizes(rows: int, cols: int) -> tuple[int, int]:
    """Triton block sizes for a (rows = state size N, cols = L or frequencies) sum."""
    return min(32, triton.next_power_of_2(rows)), min(128, triton.next_power_of_2(cols))
