"""Gated DeltaNet: the chunked gated delta rule against the loop over time (and fla's naive loop
when fla imports), the mixer's fast path against its reference, padding, causality, the weight
decay hints, the model config, and fla's CUDA kernel against spt's form on a GPU."""

import pytest
import torch
import torch.nn.functional as F
from mixer_checks import causal_or_both_ways, padded_batch, padding_safe, same_outputs_and_grads, with_paths

from spt.data.task import TaskSpec
from spt.kernels.delta_rule import gated_delta_rule, gated_delta_rule_ref
from spt.kernels.library import fla_one_config
from spt.mixer_config import GatedDeltaNetConfig
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models.mixers.stack import mixer_layer
from spt.models.model import classifier_model

D = 16
SMALL = dict(n_heads=2, head_dim=0)  # heads of D / 2 (the authors' heads of 256 are for D ~ 2048)


def rule_inputs(B=2, L=37, H=3, K=8, V=16, seed=0, requires_grad=False):
    """q, k (L2-normalised), v, g (log decays, some strong), beta in (0, 1)."""
    g_ = torch.Generator().manual_seed(seed)
    q = torch.randn(B, L, H, K, generator=g_)
    k = F.normalize(torch.randn(B, L, H, K, generator=g_), dim=-1)
    v = torch.randn(B, L, H, V, generator=g_)
    g = -torch.rand(B, L, H, generator=g_) * torch.tensor([0.1, 1.0, 8.0])
    beta = torch.rand(B, L, H, generator=g_)
    return [t.requires_grad_(requires_grad) for t in (q, k, v, g, beta)]


def values_and_grads(fn, inputs, valid=None):
    o = fn(*inputs, valid=valid)
    w = torch.randn(o.shape, generator=torch.Generator().manual_seed(3))
    if valid is not None:
        w = w * valid[..., None, None]
    grads = torch.autograd.grad((o * w).sum(), inputs)
    return o.detach(), grads


@pytest.mark.parametrize("chunk", [1, 8, 16, 64])  # 37 positions: chunks that do and don't divide L
def test_chunked_rule_equals_the_loop_outputs_and_grads(chunk):
    inputs = rule_inputs(requires_grad=True)
    o1, g1 = values_and_grads(lambda *a, valid: gated_delta_rule(*a, valid=valid, chunk=chunk), inputs)
    o2, g2 = values_and_grads(gated_delta_rule_ref, inputs)
    torch.testing.assert_close(o1, o2, atol=1e-5, rtol=1e-4)
    for a, b, name in zip(g1, g2, ("q", "k", "v", "g", "beta")):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)


def test_loop_is_the_papers_recurrence_written_out():
    """Two steps by hand, K = V = 1 direction each: S_1 = b1 v1 k1^T, S_2 = S_1 a2 (I - b2 k2 k2^T)
    + b2 v2 k2^T, o_t = S_t q_t / sqrt(K)."""
    K = 2
    q = torch.tensor([[[[1.0, 2.0]], [[3.0, -1.0]]]])                 # (1, 2, 1, 2)
    k = F.normalize(torch.tensor([[[[1.0, 1.0]], [[1.0, 0.0]]]]), dim=-1)
    v = torch.tensor([[[[2.0]], [[-1.0]]]])
    g = torch.log(torch.tensor([[[0.5], [0.25]]]))
    beta = torch.tensor([[[0.5], [0.8]]])
    k1, k2 = k[0, 0, 0], k[0, 1, 0]
    S1 = 0.5 * 2.0 * k1[None]
    S2 = S1 @ (0.25 * (torch.eye(K) - 0.8 * torch.outer(k2, k2))) + 0.8 * -1.0 * k2[None]
    want = torch.stack([S1 @ q[0, 0, 0], S2 @ q[0, 1, 0]]) / K ** 0.5
    got = gated_delta_rule_ref(q, k, v, g, beta)
    torch.testing.assert_close(got[0, :, 0], want)
    torch.testing.assert_close(gated_delta_rule(q, k, v, g, beta), got)


@pytest.mark.parametrize("chunk", [8, 64])
def test_padded_positions_leave_the_state_alone(chunk):
    """With valid, real positions equal each row run alone, whatever the pads hold, and outputs
    and grads equal the loop's."""
    q, k, v, g, beta = rule_inputs()
    valid = torch.arange(37)[None] < torch.tensor([37, 20])[:, None]
    loud = [torch.where(valid.reshape(2, 37, *[1] * (t.dim() - 2)), t, torch.full_like(t, 3.0))
            for t in (q, k, v, g, beta)]
    o = gated_delta_rule(*loud, valid=valid, chunk=chunk)
    alone = gated_delta_rule(*(t[1:, :20] for t in (q, k, v, g, beta)), chunk=chunk)
    torch.testing.assert_close(o[1, :20], alone[0], atol=1e-5, rtol=1e-4)
    inputs = [t.requires_grad_(True) for t in loud]
    o1, g1 = values_and_grads(lambda *a, valid: gated_delta_rule(*a, valid=valid, chunk=chunk),
                              inputs, valid)
    o2, g2 = values_and_grads(gated_delta_rule_ref, inputs, valid)
    torch.testing.assert_close(o1[valid], o2[valid], atol=1e-5, rtol=1e-4)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
        assert not a[~valid].any(), "pads must get no gradient from real positions' outputs"


def test_strong_decay_stays_finite():
    q, k, v, g, beta = rule_inputs(L=70)
    o = gated_delta_rule(q, k, v, g * 1e3, beta, chunk=64)
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, gated_delta_rule_ref(q, k, v, g * 1e3, beta), atol=1e-5, rtol=1e-4)


def test_rule_equals_fla_naive_forms():
    """fla's pure-PyTorch loop (naive_recurrent_gated_delta_rule, arguments q, k, v, beta, g) and
    its chunk form (naive_chunk_gated_delta_rule, arguments q, k, v, g, beta) on the CPU."""
    naive = pytest.importorskip("fla.ops.gated_delta_rule.naive")
    q, k, v, g, beta = rule_inputs()
    loop, _ = naive.naive_recurrent_gated_delta_rule(q, k, v, beta, g)
    chunked, _ = naive.naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=16)
    ours = gated_delta_rule_ref(q, k, v, g, beta)
    torch.testing.assert_close(ours, loop, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours, chunked, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(gated_delta_rule(q, k, v, g, beta, chunk=16), loop, atol=1e-5,
                               rtol=1e-4)


@pytest.mark.parametrize("causal", [True, False])
def test_kernel_branch_calls_fla_as_its_signature_says(causal, monkeypatch):
    """The library branch of gated_delta_rule, run on the CPU with fla's naive chunk form standing
    in for chunk_gated_delta_rule (same keywords q, k, v, g, beta, scale, output_final_state;
    (B, L, H, .) layout; returns (o, state)): the mixer's outputs and gradients equal the loop's
    (backend "ref"), padded."""
    naive = pytest.importorskip("fla.ops.gated_delta_rule.naive")
    torch.manual_seed(0)
    mixer = mixer_layer(GatedDeltaNetConfig(d_model=D, causal=causal, **SMALL))
    ref = with_paths(mixer, "ref")
    from spt.kernels import delta_rule
    asked = []

    def kernel(where, backend, x, module, name, install):
        if backend == "ref":
            return None
        asked.append(f"{module}:{name}")
        return naive.naive_chunk_gated_delta_rule

    monkeypatch.setattr(delta_rule, "library_kernel", kernel)
    x, valid = padded_batch(D)
    same_outputs_and_grads(mixer, ref, x, valid)
    assert asked and set(asked) == {"fla.ops.gated_delta_rule:chunk_gated_delta_rule"}


@pytest.mark.parametrize("causal", [True, False])
def test_fast_path_equals_reference_padded_both_directions(causal):
    torch.manual_seed(0)
    mixer = mixer_layer(GatedDeltaNetConfig(d_model=D, causal=causal, **SMALL))
    x, valid = padded_batch(D)
    same_outputs_and_grads(mixer, with_paths(mixer, "ref"), x, valid)


@pytest.mark.parametrize("causal", [True, False])
def test_padding_never_reaches_real_positions(causal):
    torch.manual_seed(1)
    padding_safe(mixer_layer(GatedDeltaNetConfig(d_model=D, causal=causal, **SMALL)), D)


def test_causal_sees_back_bidirectional_sees_both_ways():
    causal_or_both_ways(lambda c: mixer_layer(GatedDeltaNetConfig(d_model=D, causal=c, **SMALL)), D)


def test_no_weight_decay_on_A_log_and_dt_bias():
    mixer = mixer_layer(GatedDeltaNetConfig(d_model=D, causal=False, **SMALL))
    hinted = {n for n, p in mixer.named_parameters() if getattr(p, "_optim", {}).get("weight_decay") == 0.0}
    assert hinted == {f"cores.{k}.{n}" for k in (0, 1) for n in ("A_log", "dt_bias")}


def test_widths_and_initial_decays():
    """head_dim 0 gives K = D / H, V = expand_v K; decays start in (0, 1) with A in (0, 16]."""
    mixer = mixer_layer(GatedDeltaNetConfig(d_model=32, causal=True, n_heads=4, head_dim=0,
                                            expand_v=2))
    assert mixer.q_proj.out_features == 32 and mixer.v_proj.out_features == 64
    wide = mixer_layer(GatedDeltaNetConfig(d_model=32, causal=True, n_heads=4, head_dim=16))
    assert wide.k_proj.out_features == 64
    core = mixer.cores[0]
    assert (core.A_log.exp() <= 16).all()
    dt = F.softplus(core.dt_bias)
    assert ((dt > 0.9e-3) & (dt < 0.11)).all()
    with pytest.raises(ValueError, match="n_heads=3 must divide d_model=32"):
        mixer_layer(GatedDeltaNetConfig(d_model=32, causal=True, n_heads=3, head_dim=0))


def test_default_shape_is_flas():
    """fla/layers/gated_deltanet.py: head_dim 256, expand_v 2, conv_size 4, conv_bias False, and
    num_heads * head_dim = 0.75 * hidden_size (its defaults: hidden 2048, 6 heads); with n_heads 0
    the width sets the count, at least one head of 256."""
    from spt.mixer_authors import gated_deltanet_heads
    assert gated_deltanet_heads(2048, 0, 256) == (6, 256)
    assert gated_deltanet_heads(1024, 0, 256) == (3, 256)
    assert gated_deltanet_heads(72, 0, 256) == (1, 256)
    assert gated_deltanet_heads(32, 4, 0) == (4, 8)
    cfg = GatedDeltaNetConfig(d_model=2048)
    assert (cfg.head_dim, cfg.n_heads, cfg.expand_v, cfg.d_conv, cfg.conv_bias) == (256, 0, 2, 4, False)
    # one head of 256: key width 256, value width 512
    mixer = mixer_layer(GatedDeltaNetConfig(d_model=64, causal=True))
    assert mixer.k_proj.out_features == 256 and mixer.v_proj.out_features == 512
    core = mixer.cores[0]
    assert core.q_conv.conv.bias is None and core.q_conv.conv.kernel_size == (4,)
    biased = mixer_layer(GatedDeltaNetConfig(d_model=64, causal=True, **{**SMALL, "conv_bias": True}))
    assert biased.cores[0].q_conv.conv.bias is not None
    with pytest.raises(ValueError, match="n_heads or head_dim"):
        GatedDeltaNetConfig(n_heads=0, head_dim=0)


def test_output_norm_normalises_each_head_then_gates():
    """fla's FusedRMSNormGated: RMSNorm(o) * weight * SiLU(gate) per head (Mamba-2 gates first)."""
    from spt.models.mixers.common import GatedRMSNorm
    norm = GatedRMSNorm(4, norm_before_gate=True)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    o, z = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    want = o / o.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * norm.weight * F.silu(z)
    torch.testing.assert_close(norm(o, z), want)


def test_model_builds_runs_padded_and_its_config_round_trips():
    cfg = GatedDeltaNetConfig(d_model=32, n_layers=2, head_dim=8)
    spec = TaskSpec("toy", seq_len=24, num_classes=3, vocab_size=12)
    torch.manual_seed(0)
    model = classifier_model(cfg, spec).eval()
    x = torch.randint(4, 12, (2, 24))
    valid = torch.arange(24)[None] < torch.tensor([24, 15])[:, None]
    y = model(x, valid)
    assert y.shape == (2, 3) and torch.isfinite(y).all()
    x2 = x.clone()
    x2[1, 15:] = 5
    torch.testing.assert_close(model(x2, valid), y)
    assert model_config_from_dict(model_config_to_dict(cfg)) == cfg


@pytest.mark.gpu
def test_fla_cuda_kernel_equals_spt_form():
    """The cores with backend="library" (fla's chunk_gated_delta_rule) agree with the same mixer
    at backend="torch" (spt's chunked form) on CUDA (outputs and gradients, padded, both
    directions), within a relative error of 5e-3 (fla's Triton kernels may multiply in TF32)."""
    pytest.importorskip("fla.ops.gated_delta_rule")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    fla_one_config()  # a check of results needs one config per kernel, not autotuning
    torch.manual_seed(0)
    for causal in (True, False):
        mixer = mixer_layer(GatedDeltaNetConfig(d_model=64, causal=causal, **SMALL)).cuda()
        library, spt_form = with_paths(mixer, "library"), with_paths(mixer, "torch")
        x, valid = padded_batch(64, lengths=(200, 131, 64))
        y1, gx1, g1 = _outputs_and_grads(library, x.cuda(), valid.cuda())
        y2, gx2, g2 = _outputs_and_grads(spt_form, x.cuda(), valid.cuda())
        _relative_close(y1[valid], y2[valid], "output")
        _relative_close(gx1, gx2, "input gradient")
        assert g1.keys() == g2.keys()
        for name in g2:
            _relative_close(g1[name], g2[name], name)


def _relative_close(a, b, what, tol=5e-3):
    err = ((a - b).norm() / b.norm().clamp(min=1e-12)).item()
    assert err < tol, f"{what}: relative error {err:.2e} >= {tol}"


def _outputs_and_grads(mixer, x, valid):
    """mixer_checks.outputs_and_grads on the mixer's device: (y, dy/dx, {name: grad}) on the CPU."""
    x = x.clone().requires_grad_(True)
    y = mixer(x, valid)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(7)).to(y.device)
    (y * w * valid[..., None]).sum().backward()
    return (y.detach().cpu(), x.grad.cpu(),
            {n: p.grad.cpu() for n, p in mixer.named_parameters() if p.grad is not None})
