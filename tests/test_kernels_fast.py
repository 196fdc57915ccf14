"""Fast Vandermonde / Cauchy kernels (Triton under TRITON_INTERPRET=1, chunked torch) vs references.

Every test draws fresh random inputs; forward values and gradients are compared with the
plain-torch references computed in float64.
"""
import importlib
import math

import pytest
import torch

from spt.kernels import (
    HAS_TRITON,
    cauchy,
    cauchy_ref,
    interpreting,
    resolve_backend,
    vandermonde,
    vandermonde_ref,
)

# the CPU tensors of these tests reach the Triton kernels only through its interpreter, which
# conftest turns on where there is no GPU
needs_triton = pytest.mark.skipif(
    not HAS_TRITON or not interpreting(),
    reason="triton is not installed (pip install 'spt[dev]'), or TRITON_INTERPRET is off (a GPU "
           "machine): these kernels are tested on CPU tensors through TRITON_INTERPRET=1")


def _diag_inputs(M, H, N, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(M, H, N, dtype=torch.complex128, generator=g)
    x = torch.complex(-0.3 * torch.rand(H, N, dtype=torch.float64, generator=g),
                      3 * torch.randn(H, N, dtype=torch.float64, generator=g))
    return v.to(dtype).requires_grad_(), x.to(dtype).requires_grad_()


def _cauchy_inputs(M, H, N, J, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(M, H, N, dtype=torch.complex128, generator=g)
    w = torch.complex(-0.05 - torch.rand(H, N, dtype=torch.float64, generator=g),
                      5 * torch.randn(H, N, dtype=torch.float64, generator=g))
    j = torch.arange(J, dtype=torch.float64)
    z = torch.complex(torch.zeros_like(j), 2 * torch.tan(math.pi * j / (2 * J + 1)))
    return v.to(dtype).requires_grad_(), z.to(dtype), w.to(dtype).requires_grad_()


def _grads(out, inputs, seed):
    g = torch.Generator().manual_seed(seed + 1)
    if out.is_complex():
        G = torch.randn(out.shape, dtype=torch.complex128, generator=g).to(out.dtype)
        loss = (out * G.conj()).real.sum()
    else:
        G = torch.randn(out.shape, dtype=torch.float64, generator=g).to(out.dtype)
        loss = (out * G).sum()
    return torch.autograd.grad(loss, inputs)


def _rel(a, b):
    a, b = a.detach().to(torch.complex128), b.detach().to(torch.complex128)
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _ref64(*inputs):
    return [t.detach().to(torch.complex128).requires_grad_(t.requires_grad) for t in inputs]


# ----------------------------------------------------------------------------------- Vandermonde
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 5, 37), (1, 2, 33, 300), (2, 1, 7, 1030)])
def test_vandermonde_torch_path_matches_reference_float64(shape):
    M, H, N, L = shape
    v, x = _diag_inputs(M, H, N, torch.complex128, seed=sum(shape))
    K = vandermonde(v, x, L, backend="torch")
    Kr = vandermonde_ref(v, x, L)
    assert K.shape == (M, H, L) and K.dtype == torch.float64
    assert _rel(K, Kr) < 1e-12
    for a, b in zip(_grads(K, (v, x), 0), _grads(Kr, (v, x), 0)):
        assert _rel(a, b) < 1e-11


def test_vandermonde_torch_path_float32_close_to_float64_reference():
    v, x = _diag_inputs(2, 4, 16, torch.complex64, seed=7)
    v64, x64 = _ref64(v, x)
    K, Kr = vandermonde(v, x, 500, backend="torch"), vandermonde_ref(v64, x64, 500)
    assert K.dtype == torch.float32 and _rel(K, Kr) < 1e-4
    for a, b in zip(_grads(K, (v, x), 3), _grads(Kr, (v64, x64), 3)):
        assert _rel(a, b) < 1e-4


@needs_triton
@pytest.mark.parametrize("shape", [(1, 1, 1, 5), (2, 3, 5, 37), (1, 2, 40, 150)])
def test_vandermonde_triton_matches_reference(shape):
    assert interpreting(), "conftest sets TRITON_INTERPRET=1 before triton is imported"
    M, H, N, L = shape
    v, x = _diag_inputs(M, H, N, torch.complex64, seed=11 + sum(shape))
    v64, x64 = _ref64(v, x)
    K, Kr = vandermonde(v, x, L, backend="triton"), vandermonde_ref(v64, x64, L)
    assert K.shape == (M, H, L) and K.dtype == torch.float32
    assert _rel(K, Kr) < 1e-5
    for a, b in zip(_grads(K, (v, x), 5), _grads(Kr, (v64, x64), 5)):
        assert _rel(a, b) < 1e-4


def test_vandermonde_torch_path_chunks_channels(monkeypatch):
    mod = importlib.import_module("spt.kernels.vandermonde")
    monkeypatch.setattr(mod, "CHUNK_ELEMS", 1)            # one channel per chunk
    v, x = _diag_inputs(2, 5, 3, torch.complex128, seed=9)
    K, Kr = vandermonde(v, x, 70, backend="torch"), vandermonde_ref(v, x, 70)
    assert _rel(K, Kr) < 1e-12
    for a, b in zip(_grads(K, (v, x), 6), _grads(Kr, (v, x), 6)):
        assert _rel(a, b) < 1e-11


@pytest.mark.parametrize("backend", ["torch", "gemm"])
@pytest.mark.parametrize("chunk", [None, 7])
def test_vandermonde_shared_eigenvalues_path(monkeypatch, chunk, backend):
    """x broadcast over channels (DLR) takes a shared-E GEMM path ("torch", or "gemm" with E from
    complex multiplies); its gradient is summed."""
    if chunk is not None:
        monkeypatch.setattr(importlib.import_module("spt.kernels.vandermonde"), "CHUNK_ELEMS",
                            chunk * 6)                   # blocks of 7 positions
    g = torch.Generator().manual_seed(3)
    lam = torch.complex(-torch.rand(6, generator=g, dtype=torch.float64),
                        torch.randn(6, generator=g, dtype=torch.float64)).requires_grad_()
    v = torch.randn(2, 4, 6, dtype=torch.complex128, generator=g).requires_grad_()
    K = vandermonde(v, lam.expand(4, -1), 30, backend)
    Kr = vandermonde_ref(v, lam.expand(4, -1), 30)
    assert _rel(K, Kr) < 1e-12
    for a, b in zip(_grads(K, (v, lam), 8), _grads(Kr, (v, lam), 8)):
        assert _rel(a, b) < 1e-11


# ----------------------------------------------------------------------------------- Cauchy
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (3, 2, 5, 19), (6, 2, 32, 300)])
def test_cauchy_torch_path_matches_reference_float64(shape):
    M, H, N, J = shape
    v, z, w = _cauchy_inputs(M, H, N, J, torch.complex128, seed=sum(shape))
    out, ref = cauchy(v, z, w, backend="torch"), cauchy_ref(v, z, w)
    assert out.shape == (M, H, J) and out.dtype == torch.complex128
    assert _rel(out, ref) < 1e-12
    for a, b in zip(_grads(out, (v, w), 1), _grads(ref, (v, w), 1)):
        assert _rel(a, b) < 1e-11


def test_cauchy_torch_path_chunks_nodes(monkeypatch):
    mod = importlib.import_module("spt.kernels.cauchy")   # the package re-exports a function
    monkeypatch.setattr(mod, "CHUNK_ELEMS", 3 * 4 * 4)    # 4 nodes per chunk
    v, z, w = _cauchy_inputs(2, 3, 4, 23, torch.complex128, seed=2)
    out, ref = cauchy(v, z, w, backend="torch"), cauchy_ref(v, z, w)
    assert _rel(out, ref) < 1e-12
    for a, b in zip(_grads(out, (v, w), 2), _grads(ref, (v, w), 2)):
        assert _rel(a, b) < 1e-11


@needs_triton
@pytest.mark.parametrize("shape", [(1, 1, 1, 3), (3, 2, 5, 19), (4, 1, 40, 140)])
def test_cauchy_triton_matches_reference(shape):
    M, H, N, J = shape
    v, z, w = _cauchy_inputs(M, H, N, J, torch.complex64, seed=17 + sum(shape))
    v64, z64, w64 = _ref64(v, z, w)
    out, ref = cauchy(v, z, w, backend="triton"), cauchy_ref(v64, z64, w64)
    assert out.dtype == torch.complex64 and _rel(out, ref) < 1e-5
    for a, b in zip(_grads(out, (v, w), 4), _grads(ref, (v64, w64), 4)):
        assert _rel(a, b) < 1e-4


# ----------------------------------------------------------------------------------- backends
def test_kernel_paths_are_the_one_vocabulary():
    t = torch.zeros(1, dtype=torch.complex64)
    assert resolve_backend("torch", t) == "torch"
    assert resolve_backend("ref", t) == "ref"
    for word in ("keops", "auto"):  # "auto" is TrainConfig.paths' measured choice, not a path
        with pytest.raises(ValueError, match="path must be one of"):
            resolve_backend(word, t)


@needs_triton
def test_triton_backend_refuses_float64():
    with pytest.raises(TypeError, match="float32"):
        resolve_backend("triton", torch.zeros(1, dtype=torch.complex128))


def test_triton_backend_on_cpu_needs_the_interpreter(monkeypatch):
    import spt.kernels._triton as mod
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(mod, "HAS_TRITON", True)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        resolve_backend("triton", torch.zeros(1, dtype=torch.complex64))
    monkeypatch.setattr(mod, "HAS_TRITON", False)
    with pytest.raises(RuntimeError, match="pip install triton"):
        resolve_backend("triton", torch.zeros(1, dtype=torch.complex64))


def test_shape_errors_are_clear():
    v = torch.zeros(1, 2, 3, dtype=torch.complex64)
    with pytest.raises(ValueError, match=r"x \(H, N\)"):
        vandermonde(v, torch.zeros(2, 4, dtype=torch.complex64), 5)
    with pytest.raises(TypeError, match="complex"):
        vandermonde(v.real, torch.zeros(2, 3), 5)
    with pytest.raises(ValueError, match="cauchy"):
        cauchy(v, torch.zeros(4, dtype=torch.complex64), torch.zeros(3, 3, dtype=torch.complex64))


# ----------------------------------------------------------------------------------- precision
@pytest.mark.parametrize("op", ["vandermonde", "cauchy"])
def test_float32_fast_paths_are_at_most_twice_as_wrong_as_the_float32_reference(op):
    """Our rule for fast paths: a low-precision path may be at most ~2x as wrong as torch's own (the reference
    evaluated in float32), both measured against the float64 reference."""
    paths = ["torch"] + (["triton"] if HAS_TRITON and interpreting() else [])
    for seed in range(3):
        if op == "vandermonde":
            v, x = _diag_inputs(2, 3, 24, torch.complex64, seed=100 + seed)
            args32, L = (v.detach(), x.detach()), 200
            truth = vandermonde_ref(*(t.to(torch.complex128) for t in args32), L)
            ref32 = vandermonde_ref(*args32, L)
            fast = {p: vandermonde(*args32, L, backend=p) for p in paths}
        else:
            v, z, w = _cauchy_inputs(4, 3, 24, 100, torch.complex64, seed=200 + seed)
            args32 = (v.detach(), z, w.detach())
            truth = cauchy_ref(*(t.to(torch.complex128) for t in args32))
            ref32 = cauchy_ref(*args32)
            fast = {p: cauchy(*args32, backend=p) for p in paths}
        base = _rel(ref32, truth)
        for p, out in fast.items():
            assert _rel(out, truth) <= 2 * base + 1e-7, (op, p, seed, _rel(out, truth), base)


def test_float32_gemm_path_is_at_most_twice_as_wrong_as_the_float32_reference(monkeypatch):
    """The "gemm" path (DLR's shared Lambda), whose later blocks of positions are exp(x l0) exp(x c):
    the same rule as above, at DLR's init (|Im Lambda| up to pi, long kernels)."""
    monkeypatch.setattr(importlib.import_module("spt.kernels.vandermonde"), "CHUNK_ELEMS",
                        64 * 100)                        # 64 states: blocks of 100 positions
    for seed in range(3):
        g = torch.Generator().manual_seed(300 + seed)
        lam = torch.complex(-0.01 * torch.rand(64, generator=g, dtype=torch.float64),
                            math.pi * (2 * torch.rand(64, generator=g, dtype=torch.float64) - 1))
        v = torch.randn(2, 3, 64, dtype=torch.complex128, generator=g) / 64
        x, x32 = lam.expand(3, -1), lam.to(torch.complex64).expand(3, -1)   # stride-0 views
        truth = vandermonde_ref(v, x, 1000)
        ref32 = vandermonde_ref(v.to(torch.complex64), x32, 1000)
        fast = vandermonde(v.to(torch.complex64), x32, 1000, backend="gemm")
        assert _rel(fast, truth) <= 2 * _rel(ref32, truth) + 1e-7, seed


def test_gemm_backend_needs_shared_eigenvalues():
    v, x = _diag_inputs(1, 2, 3, torch.complex64, seed=1)
    with pytest.raises(ValueError, match="shared by all channels"):
        vandermonde(v, x, 8, backend="gemm")
