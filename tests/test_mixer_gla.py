"""GLA's mixer and kernel: the chunked form against the loop over time (outputs and gradients,
padded, chunks that do and don't divide L, gates that forget hard), the mixer both ways against
its loop path, padding, causality, and a classifier built from GLAConfig."""

import pytest
import torch
import torch.nn.functional as F
from mixer_checks import causal_or_both_ways, padded_batch, padding_safe, same_outputs_and_grads, with_paths

from spt.data.task import TaskSpec
from spt.kernels.gla import gla, gla_ref
from spt.kernels.library import fla_one_config
from spt.mixer_config import GLAConfig
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models.mixers.stack import mixer_layer
from spt.models.model import classifier_model

D = 16


def _inputs(L, batch=3, H=2, K=4, V=3, seed=0, gate_scale=1.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    return dict(q=r(batch, L, H, K), k=r(batch, L, H, K), v=r(batch, L, H, V),
                g=F.logsigmoid(r(batch, L, H, K)) * gate_scale)


def _lengths_valid(L, lengths):
    return torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("L, chunk", [(1, 16), (24, 8), (37, 8), (37, 5), (40, 64)])
def test_chunked_kernel_equals_the_loop_padded_with_gradients(L, chunk):
    x = {n: t.requires_grad_() for n, t in _inputs(L, seed=L + chunk).items()}
    valid = _lengths_valid(L, (L, max(1, L - 7), max(1, L // 3)))
    fast = gla(**x, valid=valid, chunk=chunk)
    ref = gla_ref(**x, valid=valid)
    torch.testing.assert_close(fast, ref)
    w = torch.randn(fast.shape, dtype=fast.dtype, generator=torch.Generator().manual_seed(1))
    g_fast = torch.autograd.grad((fast * w).sum(), tuple(x.values()))
    g_ref = torch.autograd.grad((ref * w).sum(), tuple(x.values()))
    for name, a, b in zip(x, g_fast, g_ref):
        torch.testing.assert_close(a, b, msg=name)


def test_hard_forgetting_stays_finite_and_exact():
    """Gates of exp(-60) per step: factoring exp(G_t) exp(-G_s) would overflow within a chunk."""
    x = {n: t.requires_grad_() for n, t in _inputs(40, seed=3, gate_scale=60.0).items()}
    fast = gla(**x, chunk=16)
    torch.testing.assert_close(fast, gla_ref(**x))
    grads = torch.autograd.grad(fast.sum(), tuple(x.values()))
    assert all(torch.isfinite(t).all() for t in grads)


def test_a_pad_leaves_the_state_as_it_found_it():
    """Pads (even inside a row) neither decay nor feed the state: the real positions read what
    the row without the pads reads, whatever the pads hold."""
    x = _inputs(20, seed=4)
    valid = torch.ones(3, 20, dtype=torch.bool)
    valid[:, 6:9] = False
    for t in x.values():
        t[:, 6:9] = 7.0
    kept = {n: t[:, valid[0]] for n, t in x.items()}
    torch.testing.assert_close(gla(**x, valid=valid, chunk=4)[:, valid[0]], gla_ref(**kept))


def test_one_step_by_hand():
    """L = 1: o = (q . k) v * K^-0.5 per head."""
    x = _inputs(1, H=1, K=4, V=2, seed=5)
    expected = (x["q"] * x["k"]).sum(-1, keepdim=True) * x["v"] / 2.0
    torch.testing.assert_close(gla(**x), expected)


def test_bad_shapes_are_named():
    x = _inputs(5)
    with pytest.raises(ValueError, match="gla: need q, k, g"):
        gla(x["q"], x["k"][..., :2], x["v"], x["g"])


@pytest.mark.parametrize("causal", [True, False])
def test_fast_path_equals_reference_padded_both_directions(causal):
    torch.manual_seed(0)
    mixer = mixer_layer(GLAConfig(d_model=D, causal=causal, n_heads=2, gate_rank=4, gate_norm=2.0))
    x, valid = padded_batch(D)
    same_outputs_and_grads(mixer, with_paths(mixer, "ref"), x, valid)


@pytest.mark.parametrize("causal", [True, False])
def test_padding_never_reaches_real_positions(causal):
    torch.manual_seed(1)
    padding_safe(mixer_layer(GLAConfig(d_model=D, causal=causal, n_heads=2, gate_rank=4)), D)


def test_causal_sees_back_bidirectional_sees_both_ways():
    causal_or_both_ways(lambda c: mixer_layer(GLAConfig(d_model=D, causal=c, n_heads=2, gate_rank=4)), D)


def test_direction_split_and_no_hints():
    """Per direction only the forget gate's projection; GLA's authors hint no parameter."""
    mixer = mixer_layer(GLAConfig(d_model=D, causal=False, n_heads=2, gate_rank=4))
    per_direction = {n for n, _ in mixer.named_parameters() if n.startswith("cores.")}
    assert per_direction == {f"cores.{k}.gk_proj.{n}" for k in (0, 1)
                             for n in ("0.weight", "1.weight", "1.bias")}
    assert not any(hasattr(p, "_optim") for p in mixer.parameters())


def test_widths_that_heads_cannot_split_are_named():
    with pytest.raises(ValueError, match="expand_k"):
        mixer_layer(GLAConfig(d_model=10, causal=True, n_heads=4, expand_k=0.5))


def test_classifier_from_config_runs_padded_and_round_trips():
    cfg = GLAConfig(d_model=32, n_layers=2)
    spec = TaskSpec("toy", seq_len=24, num_classes=3, vocab_size=12)
    torch.manual_seed(0)
    model = classifier_model(cfg, spec)
    x = torch.randint(4, 12, (2, 24))
    valid = _lengths_valid(24, (24, 15))
    logits = model(x, valid)
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()
    logits.sum().backward()
    assert model_config_from_dict(model_config_to_dict(cfg)) == cfg


@pytest.mark.gpu
def test_fla_chunk_gla_equals_spt_form_on_cuda():
    """gla at backend="library" (fla's chunk_gla, the mixer's CUDA path) against backend="torch"
    (spt's chunked form) on CUDA, outputs and gradients, padded; and the mixer on CUDA against
    its CPU path with the same weights."""
    pytest.importorskip("fla.ops.gla")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    fla_one_config()  # a check of results needs one config per kernel, not autotuning
    x = {n: t.float().cuda().requires_grad_() for n, t in
         _inputs(200, H=2, K=16, V=16, seed=6, gate_scale=0.25).items()}
    valid = _lengths_valid(200, (200, 130, 70)).cuda()
    fast = gla(**x, valid=valid, backend="library")
    ref = gla(**x, valid=valid, backend="torch")
    torch.testing.assert_close(fast, ref, atol=2e-3, rtol=2e-2)
    w = torch.randn_like(ref)
    g_fast = torch.autograd.grad((fast * w).sum(), tuple(x.values()))
    g_ref = torch.autograd.grad((ref * w).sum(), tuple(x.values()))
    for name, a, b in zip(x, g_fast, g_ref):
        torch.testing.assert_close(a, b, atol=5e-3, rtol=5e-2, msg=name)

    torch.manual_seed(2)
    mixer = mixer_layer(GLAConfig(d_model=64, causal=False, n_heads=2, gate_norm=4.0))
    u, valid = padded_batch(64, lengths=(200, 130, 70))
    on_cpu = mixer(u, valid)
    on_cuda = mixer.cuda()(u.cuda(), valid.cuda()).cpu()
    torch.testing.assert_close(on_cuda[valid], on_cpu[valid], atol=2e-3, rtol=2e-2)


def test_fla_naive_recurrent_gla_agrees():
    """fla's own pure-PyTorch recurrence (an outside reference; runs on a CPU with triton)."""
    naive = pytest.importorskip("fla.ops.gla.naive").naive_recurrent_gla
    g = torch.Generator().manual_seed(11)
    q, k = (torch.randn(2, 19, 3, 8, generator=g) for _ in range(2))
    v = torch.randn(2, 19, 3, 5, generator=g)
    gk = torch.nn.functional.logsigmoid(torch.randn(2, 19, 3, 8, generator=g)) / 4
    theirs = naive(q, k, v, gk)
    theirs = theirs[0] if isinstance(theirs, tuple) else theirs
    torch.testing.assert_close(gla(q, k, v, gk, chunk=8), theirs, atol=1e-5, rtol=1e-4)


def test_fla_one_config_keeps_each_autotuners_smallest_config(monkeypatch):
    """The GPU tests' bound on fla's first call: every fla autotuner keeps one of its own configs
    (the fewest stages, then the smallest blocks), so nothing is timed; restored afterwards."""
    pytest.importorskip("fla.ops.gla")
    import sys

    from triton.runtime.autotuner import Autotuner
    tuners = {id(o): o for name, m in list(sys.modules.items()) if name.startswith("fla.") and m
              for o in vars(m).values() if isinstance(o, Autotuner)}
    before = {k: list(o.configs) for k, o in tuners.items()}
    try:
        assert fla_one_config() == sum(len(c) > 1 for c in before.values()) > 0
        for k, o in tuners.items():
            assert len(o.configs) == 1 and o.configs[0] in before[k]
            stages = min(c.num_stages or 0 for c in before[k])
            assert (o.configs[0].num_stages or 0) == stages
        assert fla_one_config() == 0
    finally:
        for k, o in tuners.items():
            o.configs = before[k]
