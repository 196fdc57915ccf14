"""The local-attention path "flex" (spt.kernels.local_flex) and "dense": the same function as the
gather path and the plain reference, outputs and gradients; flex's block-sparse tiles cover exactly
what the pattern allows.

On the CPU flex_attention runs eagerly (all scores computed, the BlockMask unused), so the tiles
are checked on their own against the tiles of the dense pattern. torch refuses its backward on the
CPU by a device check (local_attention then runs the gather path); the gradient test lifts that
check so that torch's unfused backward differentiates our mask_mod and score_mod."""
import pytest
import torch
import torch.nn.functional as F
from test_attention import lengths_to_valid, outputs_and_grads, pattern_mask, rand_qkv

from spt.kernels import attention as A
from spt.kernels.attention import alibi_bias, attention_ref, local_attention
from spt.kernels.local_flex import neighbour_block_mask, pattern_tiles
from spt.kernels.paths import set_paths
from spt.models.attention import Attention
from spt.models.positions import alibi_slopes

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,W,band,alibi", [(40, 8, None, False), (37, 8, None, True),
                                            (29, 6, None, False), (37, 8, 5, True),
                                            (30, 3, 3, False), (23, 1, 0, True)])
def test_flex_equals_gather_equals_the_reference(monkeypatch, causal, alibi, L, W, band):
    import torch.nn.attention.flex_attention as flex
    monkeypatch.setattr(flex, "_validate_device", lambda *a: None)  # CPU inputs with grad
    monkeypatch.setattr(A, "flex_takes", lambda *a: True)
    H = 3
    q, k, v = rand_qkv(H=H, L=L, seed=L + 7 * W + 3 * causal + alibi)
    valid = lengths_to_valid([L, L - 13], L)
    keep = valid[:, None, :, None].float()
    slopes = alibi_slopes(H) if alibi else None
    bias = alibi_bias(slopes, torch.arange(L), torch.arange(L)) if alibi else None
    runs = {lb: outputs_and_grads(lambda *t: local_attention(*t, W, valid, causal, band=band,
                                                             slopes=slopes, backend=lb),
                                  q, k, v, keep) for lb in ("flex", "torch", "dense")}
    ref = outputs_and_grads(lambda *t: attention_ref(*t, valid, allowed=pattern_mask(L, W, causal,
                                                                                    band),
                                                     bias=bias), q, k, v, keep)
    for lb, got in runs.items():
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{lb}: {m}")


def dense_tiles(allowed, tile):
    """(some, every) over tiles of the (B, L, L) bool pattern; positions past L count as refused."""
    L = allowed.shape[-1]
    n = -(-L // tile)
    t = F.pad(allowed, (0, n * tile - L, 0, n * tile - L)).view(-1, n, tile, n, tile)
    return t.any(-1).any(-2), t.all(-1).all(-2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,W,band,tile", [(64, 8, None, 4), (61, 8, None, 4), (50, 7, None, 3),
                                           (40, 16, None, 5), (45, 9, 6, 4), (33, 5, 2, 4),
                                           (20, 1, 0, 2)])
@pytest.mark.parametrize("padded", [False, True])
def test_tiles_cover_exactly_the_allowed_pairs(causal, L, W, band, tile, padded):
    """Full tiles are the tiles where every pair is allowed; partial and full tiles together hold
    every allowed pair: exactly the tiles holding one without padding, at most those holding an
    allowed pair and a valid key with it."""
    valid = lengths_to_valid([L, L - 9, 3], L) if padded else None
    partial, full = pattern_tiles(L, W, causal, band, valid, tile)
    pattern = pattern_mask(L, W, causal, band)[None]
    some, every = dense_tiles(pattern if valid is None else pattern & valid[:, None, :], tile)
    assert torch.equal(full[:, 0], every)
    assert not (partial & full).any()
    listed = (partial | full)[:, 0]
    assert not (some & ~listed).any()
    if valid is None:
        assert torch.equal(listed, some)
    else:  # listed only where the structure allows a pair and some key of the tile is valid
        s_some, _ = dense_tiles(pattern, tile)
        n = -(-L // tile)
        kv_any = F.pad(valid, (0, n * tile - L)).view(-1, n, tile).any(-1)[:, None, :]
        assert torch.equal(listed, s_some & kv_any)
    mask = neighbour_block_mask(L, W, causal, band, valid, tile)
    assert torch.equal(mask.to_dense().bool()[:, 0], listed)
    assert mask.shape[-2:] == (L, L)


def test_flex_falls_back_to_gather_where_it_cannot_run(monkeypatch):
    """dropout > 0 and CPU inputs that require grad run the gather path, and give its result."""
    calls = []
    monkeypatch.setattr(A, "local_attention_flex", lambda *a, **kw: calls.append(a) or a[0])
    q, k, v = rand_qkv(L=30)
    local_attention(q, k, v, 8, dropout_p=0.1, backend="flex")
    grad_q = q.clone().requires_grad_()
    torch.testing.assert_close(local_attention(grad_q, k, v, 8, backend="flex"),
                               local_attention(q, k, v, 8))
    assert calls == []
    local_attention(q, k, v, 8, backend="flex")
    assert len(calls) == 1


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("local_block,reach", [(8, None), (None, 4)])
def test_attention_module_on_every_local_path_equals_gather(causal, local_block, reach):
    torch.manual_seed(3)
    base = Attention(16, 2, causal=causal, local_block=local_block, reach=reach, alibi=True).eval()
    x = torch.randn(2, 35, 16)
    valid = lengths_to_valid([35, 22], 35)
    keep = valid[..., None]
    want = base(x, valid) * keep
    for path in ("flex", "dense", "ref"):
        assert set_paths(base, {"attention": path}) == {"": path}
        torch.testing.assert_close(base(x, valid) * keep, want, rtol=1e-5, atol=1e-5)


def test_a_wrong_local_path_is_a_clear_error():
    q, k, v = rand_qkv(L=30)
    with pytest.raises(ValueError, match="path must be one of"):
        local_attention(q, k, v, 8, backend="triton")
    with pytest.raises(ValueError, match="path must be one of"):
        set_paths(Attention(16, 2, local_block=8), {"attention": "triton"})


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("band", [None, 100])
def test_compiled_flex_on_cuda_matches_the_reference_in_bf16(causal, band):
    """The fused kernel with its block-sparse tiles (which the CPU never uses): outputs and
    gradients within ~2x torch's own bf16 error of the float32 reference, padded, with ALiBi,
    L not a multiple of the block nor of the tile."""
    L, W, H = 1000, 192, 4
    q, k, v = (t.cuda() for t in rand_qkv(B=2, H=H, L=L, D=32, seed=11))
    valid = lengths_to_valid([L, 613], L).cuda()
    keep = valid[:, None, :, None].float()
    slopes = alibi_slopes(H, q.device)
    bias = alibi_bias(slopes, torch.arange(L, device=q.device), torch.arange(L, device=q.device))
    allowed = pattern_mask(L, W, causal, band).cuda()

    def ref(*t):
        return attention_ref(*t, valid, allowed=allowed, bias=bias)
    want = outputs_and_grads(ref, q, k, v, keep)
    lo = [t.bfloat16() for t in (q, k, v)]
    torch_bf16 = outputs_and_grads(ref, *lo, keep)
    got = outputs_and_grads(lambda *t: local_attention(*t, W, valid, causal, band=band,
                                                       slopes=slopes, backend="flex"),
                            *lo, keep)
    for g, t, w in zip(got, torch_bf16, want):
        assert (g.float() - w).abs().max() <= 2 * (t.float() - w).abs().max() + 1e-3
