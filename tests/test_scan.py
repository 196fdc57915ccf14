"""The linear scan and Mamba's selective scan (spt.kernels.scan): the pairwise fast path against the
loop over time written from the recurrence, outputs and gradients, padded batches and both
directions; and against mambapy's parallel scan, an independent implementation."""
import pytest
import torch

from spt.kernels.scan import linear_scan, linear_scan_ref, selective_scan, selective_scan_ref


def test_a_hand_computed_recurrence():
    a = torch.tensor([[0.5, 0.5, 0.0, 2.0]])
    b = torch.tensor([[1.0, 1.0, 3.0, 1.0]])
    # h = 1, 0.5*1 + 1, 0*1.5 + 3, 2*3 + 1
    assert torch.equal(linear_scan(a, b), torch.tensor([[1.0, 1.5, 3.0, 7.0]]))
    assert torch.equal(linear_scan(a, b, h0=torch.tensor([2.0])),
                       torch.tensor([[2.0, 2.0, 3.0, 7.0]]))


@pytest.mark.parametrize("L", [1, 2, 7, 64, 130, 33])
def test_linear_scan_matches_the_loop_with_gradients(L):
    g = torch.Generator().manual_seed(L * 7)
    a = torch.rand(2, L, 3, 4, generator=g, dtype=torch.float64).requires_grad_()
    b = torch.randn(2, L, 3, 4, generator=g, dtype=torch.float64).requires_grad_()
    h0 = torch.randn(2, 3, 4, generator=g, dtype=torch.float64).requires_grad_()
    w = torch.randn(2, L, 3, 4, generator=g, dtype=torch.float64)
    fast = linear_scan(a, b, h0)
    ref = linear_scan_ref(a, b, h0)
    torch.testing.assert_close(fast, ref)
    grads = torch.autograd.grad((fast * w).sum(), (a, b, h0))
    grads_ref = torch.autograd.grad((ref * w).sum(), (a, b, h0))
    for x, y in zip(grads, grads_ref):
        torch.testing.assert_close(x, y)


def _inputs(L=37, D=5, N=6, batch=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    return dict(u=r(batch, L, D), delta=torch.nn.functional.softplus(r(batch, L, D)),
                A=-torch.exp(r(D, N)), B=r(batch, L, N), C=r(batch, L, N), D=r(D), z=r(batch, L, D))


@pytest.mark.parametrize("reverse", [False, True])
def test_selective_scan_matches_mambas_loop_padded_both_directions(reverse):
    x = _inputs(seed=1 + reverse)
    valid = torch.ones(3, 37, dtype=torch.bool)
    valid[1, 30:] = False
    valid[2, 5:] = False
    leaves = {k: v.requires_grad_() for k, v in x.items()}
    fast = selective_scan(**leaves, valid=valid, reverse=reverse)
    ref = selective_scan_ref(**leaves, valid=valid, reverse=reverse)
    torch.testing.assert_close(fast, ref)
    w = torch.randn(fast.shape, dtype=fast.dtype)
    g_fast = torch.autograd.grad((fast * w).sum(), tuple(leaves.values()))
    g_ref = torch.autograd.grad((ref * w).sum(), tuple(leaves.values()))
    for name, p, q in zip(leaves, g_fast, g_ref):
        torch.testing.assert_close(p, q, msg=name)


@pytest.mark.parametrize("reverse", [False, True])
def test_real_positions_never_see_the_padding(reverse):
    x = _inputs(L=20, seed=3)
    valid = torch.ones(3, 20, dtype=torch.bool)
    valid[:, 12:] = False
    y = selective_scan(**x, valid=valid, reverse=reverse)
    noisy = dict(x, u=x["u"].clone(), B=x["B"].clone())
    noisy["u"][:, 12:] = 1e3
    noisy["B"][:, 12:] = -7.0
    y2 = selective_scan(**noisy, valid=valid, reverse=reverse)
    torch.testing.assert_close(y[:, :12], y2[:, :12])
    assert not torch.allclose(y[:, 12:], y2[:, 12:])  # the pads' own outputs did change


def test_reverse_is_the_forward_scan_of_the_flipped_sequence():
    x = _inputs(L=16, seed=4)
    flipped = {k: (v.flip(1) if v.dim() == 3 else v) for k, v in x.items()}
    torch.testing.assert_close(selective_scan(**x, reverse=True),
                               selective_scan(**flipped).flip(1))


def test_float32_stays_close_to_float64():
    x = _inputs(L=300, seed=5)
    ref = selective_scan_ref(**x)
    y = selective_scan(**{k: v.float() for k, v in x.items()})
    assert (y.double() - ref).abs().max() < 1e-4 * ref.abs().max()


def test_mambapys_parallel_scan_agrees():
    pscan = pytest.importorskip("mambapy.pscan").pscan
    g = torch.Generator().manual_seed(6)
    a = torch.rand(2, 48, 3, 4, generator=g)
    b = torch.randn(2, 48, 3, 4, generator=g)
    torch.testing.assert_close(linear_scan(a, b), pscan(a, b), rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="differ in shape"):
        linear_scan(torch.ones(1, 4, 2), torch.ones(1, 4, 3))


def test_complex_recurrences_and_their_gradients():
    """LRU's diagonal complex recurrence: the scan and its hand-written backward are complex-safe."""
    g = torch.Generator().manual_seed(3)
    a = torch.complex(torch.rand(2, 21, 5, generator=g, dtype=torch.float64),
                      torch.rand(2, 21, 5, generator=g, dtype=torch.float64) * 0.5).requires_grad_()
    b = torch.randn(2, 21, 5, generator=g, dtype=torch.complex128).requires_grad_()
    w = torch.randn(2, 21, 5, generator=g, dtype=torch.complex128)
    fast, ref = linear_scan(a, b), linear_scan_ref(a, b)
    torch.testing.assert_close(fast, ref)
    grads = torch.autograd.grad((fast * w).real.sum(), (a, b))
    grads_ref = torch.autograd.grad((ref * w).real.sum(), (a, b))
    for x, y in zip(grads, grads_ref):
        torch.testing.assert_close(x, y)


def test_gradcheck_of_the_autograd_function():
    g = torch.Generator().manual_seed(4)
    a = torch.rand(1, 6, 2, generator=g, dtype=torch.float64).requires_grad_()
    b = torch.randn(1, 6, 2, generator=g, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(linear_scan, (a, b))
