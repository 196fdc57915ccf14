"""Checks every mixer of spt.models.mixers must pass, shared by the tests/test_mixer_*.py files.

    same_outputs_and_grads(mixer, fast_to_ref, x, valid)   fast path == the *_ref path
    with_paths(mixer, "ref")                               a copy at other paths (set_paths)
    padding_safe(mixer, d)                                 real positions ignore what follows them
    causal_or_both_ways(cls, d, **kw)                      causal=True sees back; False both ways
"""
from __future__ import annotations

import copy

import torch

from spt.kernels.paths import set_paths
from spt.models.user_layers import check_causal


def with_paths(module, spec):
    """A deep copy of `module` whose modules run at the paths `spec` gives
    (:func:`spt.kernels.paths.set_paths`: "ref" is every recurrence's loop over time)."""
    out = copy.deepcopy(module)
    set_paths(out, spec)
    return out


def outputs_and_grads(mixer, x, valid):
    """(y, dy/dx, {name: grad}) for a fixed random weighting of the real positions' outputs."""
    mixer.zero_grad()
    x = x.clone().requires_grad_(True)
    y = mixer(x, valid)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(7))
    if valid is not None:
        w = w * valid[..., None]
    (y * w).sum().backward()
    grads = {n: p.grad.clone() for n, p in mixer.named_parameters() if p.grad is not None}
    return y.detach(), x.grad.clone(), grads


def same_outputs_and_grads(fast, ref, x, valid, atol=1e-4, rtol=1e-3):
    """Two mixers with the same parameters (fast and reference paths) agree on outputs at real
    positions, input gradients and every parameter's gradient."""
    y1, gx1, g1 = outputs_and_grads(fast, x, valid)
    y2, gx2, g2 = outputs_and_grads(ref, x, valid)
    keep = torch.ones(y1.shape[:2], dtype=torch.bool) if valid is None else valid
    torch.testing.assert_close(y1[keep], y2[keep], atol=atol, rtol=rtol)
    torch.testing.assert_close(gx1, gx2, atol=atol, rtol=rtol)
    assert g1.keys() == g2.keys() and g1, "both paths must reach the same parameters"
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], atol=atol, rtol=rtol, msg=name)


def padded_batch(d, lengths=(24, 17, 9), seed=0):
    """x (B, L, d) random, valid (B, L) right-padded to the given lengths."""
    g = torch.Generator().manual_seed(seed)
    L = max(lengths)
    x = torch.randn(len(lengths), L, d, generator=g)
    valid = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]
    return x, valid


def padding_safe(mixer, d, lengths=(24, 17, 9)):
    """Each row's outputs at its real positions equal the row run alone at its own length: pad
    values and the amount of padding never reach a real position (both directions)."""
    mixer.eval()
    x, valid = padded_batch(d, lengths)
    x = torch.where(valid[..., None], x, torch.full_like(x, 100.0))  # loud pads
    with torch.no_grad():
        y = mixer(x, valid)
        for b, n in enumerate(lengths):
            alone = mixer(x[b:b + 1, :n], None)
            torch.testing.assert_close(y[b, :n], alone[0], atol=1e-4, rtol=1e-4)


def causal_or_both_ways(make, d):
    """make(causal) builds the mixer: causal=True must be causal, causal=False must not be."""
    torch.manual_seed(0)
    assert check_causal(make(True), d, length=32)
    torch.manual_seed(0)
    assert not check_causal(make(False), d, length=32)
