"""ALiBi (TransformerConfig.positions="alibi"): the bias against hand-written matrices, every
attention path against the plain reference with that bias, and a model built with it."""
import pytest
import torch
from test_attention import block_mask, lengths_to_valid

from spt.config import ObjectiveConfig, TransformerConfig
from spt.data.task import TaskSpec
from spt.kernels import attention as A
from spt.kernels.attention import alibi_bias, attention_ref, full_attention
from spt.kernels.paths import set_paths
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models import classifier_model, count_parameters, pretraining_model
from spt.models.attention import Attention
from spt.models.positions import alibi_slopes

# |i - j| for L = 4, written out
DIST4 = torch.tensor([[0., 1., 2., 3.],
                      [1., 0., 1., 2.],
                      [2., 1., 0., 1.],
                      [3., 2., 1., 0.]])


def test_slopes_and_bias_by_hand():
    torch.testing.assert_close(alibi_slopes(2), torch.tensor([1 / 16, 1 / 256]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([1 / 4, 1 / 16, 1 / 64, 1 / 256]))
    torch.testing.assert_close(alibi_slopes(8)[[0, 7]], torch.tensor([2 ** -1, 2 ** -8]))
    pos = torch.arange(4)
    want2 = torch.tensor([[[0, -1 / 16, -2 / 16, -3 / 16],
                           [-1 / 16, 0, -1 / 16, -2 / 16],
                           [-2 / 16, -1 / 16, 0, -1 / 16],
                           [-3 / 16, -2 / 16, -1 / 16, 0]],
                          [[0, -1 / 256, -2 / 256, -3 / 256],
                           [-1 / 256, 0, -1 / 256, -2 / 256],
                           [-2 / 256, -1 / 256, 0, -1 / 256],
                           [-3 / 256, -2 / 256, -1 / 256, 0]]])
    torch.testing.assert_close(alibi_bias(alibi_slopes(2), pos, pos), want2)
    want4 = torch.stack([-DIST4 / 4, -DIST4 / 16, -DIST4 / 64, -DIST4 / 256])
    torch.testing.assert_close(alibi_bias(alibi_slopes(4), pos, pos), want4)
    # query and key positions may differ (the neighbour-block path's gathered keys)
    torch.testing.assert_close(alibi_bias(alibi_slopes(4), torch.tensor([2]), torch.tensor([-1, 5])),
                               torch.tensor([[[-3 / 4, -3 / 4]], [[-3 / 16, -3 / 16]],
                                             [[-3 / 64, -3 / 64]], [[-3 / 256, -3 / 256]]]))


def _bias(H: int, L: int) -> torch.Tensor:
    """-m_h |i - j| written independently of spt: (H, L, L) float64."""
    m = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)], dtype=torch.float64)
    i = torch.arange(L, dtype=torch.float64)
    return -m[:, None, None] * (i[:, None] - i[None, :]).abs()


def _qkv(B, H, L, D, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, L, D, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", ["torch", "ref", "dense"])
@pytest.mark.parametrize("padded", [False, True])
def test_full_attention_with_alibi_equals_the_reference(causal, backend, padded):
    B, H, L, D = 3, 4, 11, 8
    q, k, v = _qkv(B, H, L, D, seed=int(causal) + 2 * int(padded))
    valid = lengths_to_valid([11, 7, 3], L) if padded else None
    want = attention_ref(q, k, v, valid, causal, bias=_bias(H, L))
    got = full_attention(q, k, v, valid, causal, backend=backend, slopes=alibi_slopes(H))
    real = torch.ones(B, L, dtype=torch.bool) if valid is None else valid
    real = real[:, None, :, None]
    torch.testing.assert_close(got * real, want * real)
    # the bias matters: without it the output is another one
    plain = attention_ref(q, k, v, valid, causal)
    assert not torch.allclose(got * real, plain * real)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", ["torch", "ref", "dense"])
@pytest.mark.parametrize("local_block,reach", [(4, None), (5, None), (None, 3), (None, 0)])
def test_local_and_banded_attention_with_alibi_equal_the_dense_reference(causal, backend,
                                                                        local_block, reach):
    B, H, L, d = 3, 2, 13, 16
    torch.manual_seed(7)
    att = Attention(d, H, causal=causal, local_block=local_block, reach=reach,
                    alibi=True).double().eval()
    set_paths(att, {"attention": backend})
    x = torch.randn(B, L, d, dtype=torch.float64)
    valid = lengths_to_valid([13, 9, 2], L)
    q, k, v = att.qkv(x).view(B, L, 3, H, d // H).permute(2, 0, 3, 1, 4)
    if reach is None:
        allowed = block_mask(L, local_block, causal)
    else:
        i = torch.arange(L)
        allowed = ((i[:, None] - i[None, :]).abs() <= reach) & (~torch.tensor(causal)
                                                                 | (i[None, :] <= i[:, None]))
    want = attention_ref(q, k, v, valid, allowed=allowed, bias=_bias(H, L))
    want = att.out(want.transpose(1, 2).reshape(B, L, d))
    got = att(x, valid)
    real = valid[..., None]
    torch.testing.assert_close(got * real, want * real)


TOK = TaskSpec("tok", seq_len=32, num_classes=3, vocab_size=12)


def _cfg(**kw):
    base = dict(d_model=16, n_layers=2, n_heads=4, d_ff=32, dropout=0.0, max_len=32)
    return TransformerConfig(**{**base, **kw})


@pytest.mark.parametrize("causal", [False, True])
def test_an_alibi_model_builds_trains_and_has_no_position_parameters(causal):
    torch.manual_seed(0)
    cfg = _cfg(positions="alibi", causal=causal)
    model = classifier_model(cfg, TOK)
    assert model.backbone.positions is None
    assert not any("position" in name for name, _ in model.named_parameters())
    assert count_parameters(model) == count_parameters(classifier_model(_cfg(positions="none",
                                                                             causal=causal), TOK))
    x = torch.randint(0, 12, (2, 20))
    valid = lengths_to_valid([20, 14], 20)
    out = model(x, valid)
    assert out.shape == (2, 3) and torch.isfinite(out).all()
    out.sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    pretraining_model(cfg, TOK, ObjectiveConfig("causal" if causal else "masked", loss="ce"))
    # the same weights without the bias load strictly (no extra state) and compute another function
    plain = classifier_model(_cfg(positions="none", causal=causal), TOK)
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain(x, valid), out)


@pytest.mark.parametrize("causal", [False, True])
def test_at_init_an_alibi_layer_favours_near_keys(causal):
    """The same input at every position gives the same score to every key, so the weights are the
    softmax of the bias: each head's weight falls strictly with the distance |i - j|."""
    torch.manual_seed(0)
    H, L = 4, 12
    att = classifier_model(_cfg(positions="alibi", causal=causal), TOK).backbone.layers.blocks[0].attn
    x = torch.randn(1, 1, 16).expand(1, L, 16)
    q, k, _ = att.qkv(x).view(1, L, 3, H, 4).permute(2, 0, 3, 1, 4)
    eye = torch.eye(L).expand(1, H, L, L)  # values = one-hot positions: the output is the weights
    w = full_attention(q, k, eye, causal=causal, backend="torch", slopes=alibi_slopes(H))[0]
    i = 6
    for h in range(H):
        left = w[h, i, : i + 1].flip(0)  # distance 0, 1, ..., i to the left
        assert (left[1:] < left[:-1]).all(), h
        if not causal:
            right = w[h, i, i:]
            assert (right[1:] < right[:-1]).all(), h
            torch.testing.assert_close(w[h, i, i - 3], w[h, i, i + 3])  # symmetric
        else:
            assert (w[h, i, i + 1:] == 0).all()
    # steeper heads look nearer: head 0 puts more weight on the query's own position than head 3
    assert w[0, i, i] > w[H - 1, i, i]


def test_alibi_config_round_trips_and_is_a_positions_choice():
    cfg = _cfg(positions="alibi", causal=True, local_block=8)
    d = model_config_to_dict(cfg)
    assert d["positions"] == "alibi"
    assert model_config_from_dict(d) == cfg
    with pytest.raises(ValueError, match="positions"):
        _cfg(positions="alibii")


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_fast_paths_with_alibi_match_the_reference_in_bf16(causal):
    """SDPA on CUDA and flash-attn's alibi_slopes (when installed) vs the float32 reference with
    the bias: at most ~2x the error of torch's own bf16 reference computation."""
    H, L = 4, 256
    q, k, v = (t.float().cuda() for t in _qkv(2, H, L, 64, seed=3))
    bias = _bias(H, L).float().cuda()
    ref = attention_ref(q, k, v, causal=causal, bias=bias)
    lo = [t.bfloat16() for t in (q, k, v)]
    torch_err = (attention_ref(*lo, causal=causal, bias=bias).float() - ref).abs().max()
    slopes = alibi_slopes(H, "cuda")
    for backend in ["torch"] + (["library"] if A.FLASH_AVAILABLE else []):
        out = full_attention(*lo, causal=causal, backend=backend, slopes=slopes).float()
        assert (out - ref).abs().max() <= 2 * torch_err + 1e-3, backend


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rotary"])
def test_locality_bias_adds_alibi_on_top_of_the_positions(positions):
    """locality_bias keeps the model's positions (its parameters and state load strictly both
    ways) and adds exactly ALiBi's bias: the same weights give the positions="none" + alibi layer's
    attention on a model whose only position information is that bias."""
    torch.manual_seed(0)
    biased = classifier_model(_cfg(positions=positions, locality_bias=True), TOK).eval()
    plain = classifier_model(_cfg(positions=positions), TOK).eval()
    plain.load_state_dict(biased.state_dict())
    assert count_parameters(plain) == count_parameters(biased)
    x = torch.randint(0, 12, (2, 20))
    assert not torch.allclose(plain(x), biased(x))
    # layer by layer: the biased block's attention is the plain one's with ALiBi's bias added
    att_b, att_p = biased.backbone.layers.blocks[0].attn, plain.backbone.layers.blocks[0].attn
    h = torch.randn(2, 20, 16)
    q, k, v = att_b.qkv(h).view(2, 20, 3, 4, 4).permute(2, 0, 3, 1, 4)
    if positions == "rotary":
        from spt.models.positions import apply_rotary
        q, k = apply_rotary(q), apply_rotary(k)
    pos = torch.arange(20)
    want = attention_ref(q, k, v, bias=alibi_bias(alibi_slopes(4), pos, pos))
    want = att_b.out(want.transpose(1, 2).reshape(2, 20, 16))
    torch.testing.assert_close(att_b(h), want)
    assert not torch.allclose(att_p(h), want)
    with pytest.raises(ValueError, match="locality_bias"):
        _cfg(positions="alibi", locality_bias=True)
