"""The S4 DPLR kernel (Cauchy + Woodbury at roots of unity) vs C̄ᵀĀᵏB̄ from the discretised matrices,
and the FFT convolution vs the direct sums."""
import pytest
import torch

from spt.kernels import (
    HAS_TRITON,
    c_to_ctilde,
    ctilde_to_c,
    direct_conv_ref,
    dplr_discrete,
    dplr_kernel,
    dplr_kernel_ref,
    fast_length,
    fft_conv,
)
from spt.models.hippo import legs_dplr


def _dplr_params(H, N2, D, seed, hippo=False):
    g = torch.Generator().manual_seed(seed)
    f64 = dict(dtype=torch.float64, generator=g)
    if hippo:
        lam, P, B = (t.expand(H, N2) for t in legs_dplr(2 * N2))
    else:
        lam = torch.complex(-0.2 - torch.rand(H, N2, **f64), -4 * torch.rand(H, N2, **f64))
        P = torch.complex(torch.randn(H, N2, **f64), torch.randn(H, N2, **f64)) * 0.5
        B = torch.complex(torch.randn(H, N2, **f64), torch.randn(H, N2, **f64))
    C = torch.complex(torch.randn(D, H, N2, **f64), torch.randn(D, H, N2, **f64))
    dt = 0.02 + 0.3 * torch.rand(H, **f64)
    return lam, P, B, C, dt


@pytest.mark.parametrize("L", [1, 2, 15, 16, 64])
@pytest.mark.parametrize("hippo", [False, True])
def test_dplr_kernel_equals_naive_powers_of_discretised_matrices(L, hippo):
    lam, P, B, C, dt = _dplr_params(H=3, N2=4, D=2, seed=L, hippo=hippo)
    Abar, _ = dplr_discrete(lam, P, B, dt)
    Ct = c_to_ctilde(C, Abar, L)                       # what S4 learns
    naive = dplr_kernel_ref(lam, P, B, C, dt, L)       # Re C^T Ā^k B̄, k < L
    for backend in ("ref", "torch"):
        K = dplr_kernel(lam, P, B, Ct, dt, L, backend)
        assert K.shape == (2, 3, L)
        assert (K - naive).abs().max() <= 1e-10 * naive.abs().max()


def test_discrete_matrices_are_the_bilinear_transform():
    lam, P, B, C, dt = _dplr_params(H=2, N2=3, D=1, seed=0)
    Abar, Bbar = dplr_discrete(lam, P, B, dt)
    lam_f, p = torch.cat([lam, lam.conj()], -1), torch.cat([P, P.conj()], -1)
    A = torch.diag_embed(lam_f) - p[..., :, None] * p.conj()[..., None, :]
    I = torch.eye(6, dtype=A.dtype)
    h = dt[:, None, None] / 2
    assert torch.allclose((I - h * A) @ Abar, I + h * A, atol=1e-12)
    Bf = torch.cat([B, B.conj()], -1)
    assert torch.allclose(((I - h * A) @ Bbar[..., None])[..., 0], dt[:, None] * Bf, atol=1e-12)


def test_ctilde_round_trip():
    lam, P, B, C, dt = _dplr_params(H=2, N2=3, D=2, seed=1)
    Abar, _ = dplr_discrete(lam, P, B, dt)
    Cf = ctilde_to_c(c_to_ctilde(C, Abar, 20), Abar, 20)
    assert torch.allclose(Cf, torch.cat([C, C.conj()], -1), atol=1e-12)


def test_dplr_kernel_float32_gradients_match_reference_path():
    lam, P, B, C, dt = (t.to(torch.complex64 if t.is_complex() else torch.float32)
                        for t in _dplr_params(H=2, N2=4, D=1, seed=5))
    params = [t.clone().requires_grad_() for t in (lam, P, B, C, dt)]
    outs = {}
    for backend in ("ref", "torch") + (("triton",) if HAS_TRITON else ()):
        K = dplr_kernel(*params, 32, backend)
        grads = torch.autograd.grad((K * torch.linspace(-1, 1, 32)).sum(), params)
        outs[backend] = (K, grads)
    K0, g0 = outs["ref"]
    for backend, (K, g) in outs.items():
        assert (K - K0).abs().max() <= 1e-4 * K0.abs().max(), backend
        for a, b in zip(g, g0):
            assert (a - b).abs().max() <= 1e-4 * b.abs().max(), backend


@pytest.mark.parametrize("D", [1, 2])
@pytest.mark.parametrize("L", [1, 7, 32])
def test_fft_conv_equals_direct_sums(D, L):
    g = torch.Generator().manual_seed(L + D)
    u = torch.randn(2, L, 3, dtype=torch.float64, generator=g)
    k = torch.randn(D, 3, L, dtype=torch.float64, generator=g)
    assert torch.allclose(fft_conv(u, k), direct_conv_ref(u, k), atol=1e-12)


def test_fft_conv_directions():
    L = 6
    u = torch.zeros(1, L, 1, dtype=torch.float64)
    u[0, 3, 0] = 1.0                                    # an impulse at position 3
    k = torch.arange(1, 2 * L + 1, dtype=torch.float64).reshape(2, 1, L)
    y = fft_conv(u, k)[0, :, 0]
    # causal part: y[t] = K0[t - 3] for t >= 3; backward part: y[t] = K1[3 - t - 1] for t < 3
    assert torch.allclose(y, torch.tensor([k[1, 0, 2], k[1, 0, 1], k[1, 0, 0],
                                           k[0, 0, 0], k[0, 0, 1], k[0, 0, 2]]))
    y1 = fft_conv(u, k[:1])[0, :, 0]
    assert torch.all(y1[:3] == 0)


def test_fft_conv_shape_errors():
    with pytest.raises(ValueError, match="does not fit"):
        fft_conv(torch.zeros(1, 5, 2), torch.zeros(1, 2, 4))
    with pytest.raises(ValueError, match="1 or 2"):
        fft_conv(torch.zeros(1, 5, 2), torch.zeros(3, 2, 5))


def test_fast_length_is_the_next_5_smooth_number():
    def smooth(m):
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        return m == 1
    for n in range(1, 600):
        assert fast_length(n) == next(m for m in range(n, 2 * n + 1) if smooth(m)), n
    assert fast_length(8002) == 8100 and fast_length(32768) == 32768 and fast_length(4000) == 4000


@pytest.mark.parametrize("backend", ["torch", "manual"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("D,L", [(1, 1), (2, 1), (1, 7), (2, 7), (2, 32), (1, 45), (2, 45)])
def test_fft_conv_backends_match_direct_sums_and_their_gradients(backend, dtype, D, L):
    """Outputs and gradients (u, k, skip) against the O(L^2) sums in float64; L = 7 and 45 make
    the manual backend's FFT length (fast_length(2L) = 15, 90) differ from 2L."""
    g = torch.Generator().manual_seed(100 * L + D)
    u, w = (torch.randn(3, L, 4, dtype=torch.float64, generator=g) for _ in range(2))
    k = torch.randn(D, 4, L, dtype=torch.float64, generator=g)
    skip = torch.randn(4, dtype=torch.float64, generator=g)
    ins64 = [t.clone().requires_grad_() for t in (u, k, skip)]
    ref = direct_conv_ref(ins64[0], ins64[1]) + ins64[0] * ins64[2]
    grads_ref = torch.autograd.grad((ref * w).sum(), ins64)
    ins = [t.to(dtype).requires_grad_() for t in (u, k, skip)]
    out = fft_conv(*ins, backend=backend)
    grads = torch.autograd.grad((out * w.to(dtype)).sum(), ins)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert out.dtype == dtype and out.shape == ref.shape
    assert (out - ref).abs().max() <= tol * ref.abs().max()
    for a, b in zip(grads, grads_ref):
        assert (a - b).abs().max() <= tol * b.abs().max()


def test_fft_conv_manual_backend_without_skip_and_with_bad_backend():
    g = torch.Generator().manual_seed(0)
    u, k = torch.randn(2, 9, 3, generator=g), torch.randn(2, 3, 9, generator=g)
    assert torch.allclose(fft_conv(u, k, backend="manual"), fft_conv(u, k), atol=1e-5)
    uu = u.clone().requires_grad_()                     # a fixed kernel: only u's gradient
    (gm,) = torch.autograd.grad(fft_conv(uu, k, backend="manual").sum(), uu)
    (ga,) = torch.autograd.grad(fft_conv(uu, k).sum(), uu)
    assert torch.allclose(gm, ga, atol=1e-5)
    with pytest.raises(ValueError, match="path must be one of"):
        fft_conv(u, k, backend="cuda")
