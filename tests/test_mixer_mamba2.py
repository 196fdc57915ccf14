"""Mamba-2's mixer: the chunked SSD against the recurrence's loop, the mixer on both paths, and a
model built from a Mamba2Config."""

import pytest
import torch
import torch.nn.functional as F
from mixer_checks import causal_or_both_ways, padded_batch, padding_safe, same_outputs_and_grads, with_paths

from spt.data.task import TaskSpec
from spt.kernels.ssd import ssd, ssd_ref
from spt.mixer_config import Mamba2Config
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models.mixers.stack import mixer_layer
from spt.models.model import classifier_model

D = 16
KW = dict(d_state=8, head_dim=8)


def ssd_inputs(seed, batch=2, L=37, H=3, P=4, N=5, lengths=None):
    """Fresh random SSD inputs (float64, requiring grad), decays across the init's range, and a
    right-padded valid mask when lengths are given."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, L, H, P, generator=g, dtype=torch.float64)
    dt = F.softplus(torch.randn(batch, L, H, generator=g, dtype=torch.float64) - 1)
    A = -torch.empty(H, dtype=torch.float64).uniform_(1, 16, generator=g)
    B = torch.randn(batch, L, N, generator=g, dtype=torch.float64)
    C = torch.randn(batch, L, N, generator=g, dtype=torch.float64)
    Dskip = torch.randn(H, generator=g, dtype=torch.float64)
    valid = None if lengths is None else torch.arange(L)[None] < torch.tensor(lengths)[:, None]
    return [t.requires_grad_() for t in (x, dt, A, B, C, Dskip)], valid


def out_and_grads(fn, inputs, valid, **kw):
    for t in inputs:
        t.grad = None
    y = fn(*inputs, valid=valid, **kw)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype)
    if valid is not None:
        w = w * valid[:, :, None, None]
    (y * w).sum().backward()
    return y.detach(), [t.grad.clone() for t in inputs]


@pytest.mark.parametrize("chunk", [1, 8, 16, 37, 64])  # 8, 16 split L = 37 unevenly; 1 and 37 evenly
@pytest.mark.parametrize("padded", [False, True])
def test_chunked_ssd_equals_the_recurrence_outputs_and_grads(chunk, padded):
    inputs, valid = ssd_inputs(seed=chunk + 100 * padded, lengths=(37, 19) if padded else None)
    y1, g1 = out_and_grads(ssd, inputs, valid, chunk=chunk)
    y2, g2 = out_and_grads(ssd_ref, inputs, valid)
    torch.testing.assert_close(y1, y2, atol=1e-10, rtol=1e-9)
    for name, a, b in zip(("x", "dt", "A", "B", "C", "D"), g1, g2):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9, msg=name)


@pytest.mark.parametrize("fn", [ssd, ssd_ref])
def test_pads_feed_nothing_into_the_state(fn):
    """Whatever x and B hold at pads, the state (read out at every position, pads included, with
    no D term) is the same; a padded row's real outputs equal the row run alone."""
    (x, dt, A, B, C, Dskip), valid = ssd_inputs(seed=5, lengths=(37, 11))
    pads = ~valid
    with torch.no_grad():
        loud = fn(x.masked_fill(pads[..., None, None], 1e3), dt, A, B.masked_fill(pads[..., None], 1e3),
                  C, None, valid=valid)
        quiet = fn(x.masked_fill(pads[..., None, None], 0.0), dt, A, B.masked_fill(pads[..., None], 0.0),
                   C, None, valid=valid)
        alone = ssd_ref(x[1:, :11], dt[1:, :11], A, B[1:, :11], C[1:, :11], None)
    torch.testing.assert_close(loud, quiet)
    torch.testing.assert_close(loud[1, :11], alone[0])


def test_long_decays_stay_finite():
    """Strong decays over long chunks (sums of log decays near -1e4) give finite outputs and grads."""
    (x, dt, A, B, C, Dskip), _ = ssd_inputs(seed=6, L=300, H=2)
    dt = (dt.detach() * 30).requires_grad_()
    y = ssd(x.float(), dt.float(), A.float(), B.float(), C.float(), Dskip.float(), chunk=256)
    y.square().sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(dt.grad).all() and torch.isfinite(x.grad).all()


def test_bad_shapes_name_the_input():
    (x, dt, A, B, C, Dskip), _ = ssd_inputs(seed=7)
    with pytest.raises(ValueError, match="ssd: dt has shape"):
        ssd(x, dt[:, :-1], A, B, C, Dskip)


@pytest.mark.parametrize("causal", [True, False])
def test_fast_path_equals_reference_padded_both_directions(causal):
    torch.manual_seed(0)
    mixer = mixer_layer(Mamba2Config(d_model=D, causal=causal, **KW))
    x, valid = padded_batch(D)
    same_outputs_and_grads(mixer, with_paths(mixer, "ref"), x, valid)


@pytest.mark.parametrize("causal", [True, False])
def test_padding_never_reaches_real_positions(causal):
    torch.manual_seed(1)
    padding_safe(mixer_layer(Mamba2Config(d_model=D, causal=causal, **KW)), D)


def test_causal_sees_back_bidirectional_sees_both_ways():
    causal_or_both_ways(lambda c: mixer_layer(Mamba2Config(d_model=D, causal=c, **KW)), D)


def test_no_weight_decay_on_A_D_and_dt_bias():
    mixer = mixer_layer(Mamba2Config(d_model=D, causal=False, **KW))
    hinted = {n for n, p in mixer.named_parameters() if getattr(p, "_optim", {}).get("weight_decay") == 0.0}
    assert hinted == {f"cores.{k}.{n}" for k in (0, 1) for n in ("A_log", "D", "dt_bias")}


def test_init_follows_the_paper():
    """H = E*D / head_dim heads, A in -[1, 16], softplus(dt_bias) in [dt_min, dt_max], D = 1."""
    torch.manual_seed(2)
    cfg = Mamba2Config(d_model=64, causal=True, d_state=8, expand=2, head_dim=4, dt_min=0.01,
                       dt_max=0.05)
    core = mixer_layer(cfg).cores[0]
    A = -torch.exp(core.A_log)
    dt = F.softplus(core.dt_bias)
    assert A.shape == (32,) and (A <= -1).all() and (A >= -16).all() and A.std() > 1
    assert (dt >= 0.01 - 1e-6).all() and (dt <= 0.05 + 1e-6).all()
    assert (core.D == 1).all()


def test_default_shape_is_mamba_ssms():
    """mamba_ssm/modules/mamba2.py: d_state 128, headdim 64, expand 2, d_conv 4, ngroups 1; its
    in_proj makes 2 * d_inner + 2 * d_state + nheads channels, its conv d_inner + 2 * d_state."""
    cfg = Mamba2Config()
    assert (cfg.d_state, cfg.head_dim, cfg.expand, cfg.d_conv) == (128, 64, 2, 4)
    mixer = mixer_layer(Mamba2Config(d_model=64, causal=True))
    assert mixer.cores[0].n_heads == 2
    assert mixer.in_proj.out_features == 2 * 128 + 2 * 128 + 2
    assert mixer.cores[0].conv.conv.in_channels == 128 + 2 * 128


def test_head_dim_must_divide_the_inner_width():
    with pytest.raises(ValueError, match="head_dim=12 must divide"):
        mixer_layer(Mamba2Config(d_model=D, causal=True, head_dim=12))


@pytest.mark.gpu
def test_cuda_kernel_equals_spt_form():
    """On CUDA, the cores at backend="library" (mamba-ssm's mamba_chunk_scan_combined) match the
    same weights at backend="torch" (spt's chunked SSD) (outputs at real positions and input
    gradients, padded, both directions)."""
    pytest.importorskip("mamba_ssm.ops.triton.ssd_combined")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    for causal in (True, False):
        torch.manual_seed(3)
        mixer = with_paths(mixer_layer(Mamba2Config(d_model=D, causal=causal, **KW)).cuda(), "torch")
        library = with_paths(mixer, "library")
        x, valid = padded_batch(D)
        x_torch = x.cuda().requires_grad_()
        x_lib = x.cuda().requires_grad_()
        y_torch = mixer(x_torch, valid.cuda())
        y_lib = library(x_lib, valid.cuda())
        w = (torch.randn(y_torch.shape) * valid[..., None]).cuda()
        (y_torch * w).sum().backward()
        (y_lib * w).sum().backward()
        torch.testing.assert_close(y_lib[valid.cuda()], y_torch.detach()[valid.cuda()], atol=1e-3,
                                   rtol=1e-3)
        torch.testing.assert_close(x_lib.grad, x_torch.grad, atol=1e-3, rtol=1e-3)


def test_classifier_of_a_mamba2_config_runs_and_round_trips():
    spec = TaskSpec("toy", seq_len=16, num_classes=3, vocab_size=10)
    cfg = Mamba2Config(d_model=32, n_layers=2)
    torch.manual_seed(0)
    model = classifier_model(cfg, spec).eval()
    tokens = torch.randint(4, 10, (2, 16))
    valid = torch.arange(16)[None] < torch.tensor([16, 9])[:, None]
    tokens[~valid] = 0
    with torch.no_grad():
        logits = model(tokens, valid)
        alone = model(tokens[1:, :9])
    assert logits.shape == (2, 3)
    torch.testing.assert_close(logits[1:], alone, atol=1e-5, rtol=1e-5)
    assert model_config_from_dict(model_config_to_dict(cfg)) == cfg
