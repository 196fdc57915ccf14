"""Attention paths agree with the plain-torch reference; local attention equals dense attention
under the equivalent mask; padded keys are never attended."""
import pytest
import torch

from spt.kernels import attention as A
from spt.kernels.attention import attention_ref, full_attention, local_attention
from spt.models.attention import Attention


def rand_qkv(B=2, H=3, L=37, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, L, D, generator=g) for _ in range(3)]


def lengths_to_valid(lengths, L):
    return torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]


def block_mask(L, W, causal):
    """Dense (L, L) reference of neighbour-block attention: |blk(i) - blk(j)| <= 1 (and j <= i)."""
    blk = torch.arange(L) // W
    diff = blk[:, None] - blk[None, :]
    allowed = diff.abs() <= 1
    if causal:
        allowed &= (diff >= 0) & (torch.arange(L)[None, :] <= torch.arange(L)[:, None])
    return allowed


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_manual_reference(causal):
    q, k, v = rand_qkv()
    valid = lengths_to_valid([37, 20], 37)
    ref = attention_ref(q, k, v, valid, causal)
    out = full_attention(q, k, v, valid, causal, backend="torch")
    keep = valid[:, None, :, None]  # padded query rows are unused
    torch.testing.assert_close(out * keep, ref * keep, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,W", [(32, 8), (37, 8), (10, 4), (16, 16)])
def test_local_attention_equals_dense_with_block_mask(causal, L, W):
    q, k, v = rand_qkv(L=L, seed=L + W)
    valid = lengths_to_valid([L, max(1, L - 11)], L)
    dense = attention_ref(q, k, v, valid, causal=False, allowed=block_mask(L, W, causal))
    for backend in ("torch", "ref", "dense"):
        out = local_attention(q, k, v, W, valid, causal, backend=backend)
        keep = valid[:, None, :, None]
        torch.testing.assert_close(out * keep, dense * keep, rtol=1e-5, atol=1e-5)
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("local_block", [None, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_padded_keys_are_never_attended(local_block, causal):
    torch.manual_seed(0)
    attn = Attention(16, 2, causal=causal, local_block=local_block).eval()
    x = torch.randn(2, 30, 16)
    valid = lengths_to_valid([30, 19], 30)
    y1 = attn(x, valid)
    x2 = x.clone()
    x2[1, 19:] = 1e3 * torch.randn(11, 16)  # garbage in the padding
    y2 = attn(x2, valid)
    torch.testing.assert_close(y1[1, :19], y2[1, :19])
    # ... and a padded sequence gives what the unpadded one gives on its own
    y_alone = attn(x[1:2, :19], None)
    torch.testing.assert_close(y1[1:2, :19], y_alone, rtol=1e-5, atol=1e-5)


def test_local_attention_has_linear_memory_pattern():
    """Block attention solves nb problems of W x 3W, never an L x L score matrix."""
    L, W = 64, 8
    q, k, v = rand_qkv(B=1, H=1, L=L, D=4)
    seen = []
    orig = torch.nn.functional.scaled_dot_product_attention

    def spy(q_, k_, v_, attn_mask=None, **kw):
        seen.append((q_.shape, k_.shape, None if attn_mask is None else attn_mask.shape))
        return orig(q_, k_, v_, attn_mask=attn_mask, **kw)

    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        local_attention(q, k, v, W)
    finally:
        torch.nn.functional.scaled_dot_product_attention = orig
    (qs, ks, ms), = seen
    assert qs[-2] == W and ks[-2] == 3 * W
    assert ms[-1] == 3 * W and ms[-2] == 1  # a key mask broadcast over queries


def test_attention_dropout_is_only_active_in_training():
    torch.manual_seed(0)
    attn = Attention(16, 2, dropout=0.5)
    x = torch.randn(1, 12, 16)
    attn.eval()
    torch.testing.assert_close(attn(x), attn(x))
    attn.train()
    assert not torch.allclose(attn(x), attn(x))


def test_the_library_path_where_flash_attn_cannot_run_is_a_clear_error():
    q, k, v = rand_qkv()
    want = "flash-attn is not installed" if not A.FLASH_AVAILABLE else "runs on CUDA only"
    with pytest.raises(RuntimeError, match=want):
        full_attention(q, k, v, backend="library")


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_fast_paths_match_reference_in_bf16(causal):
    """flash-attn (when installed) and SDPA on CUDA vs the float32 reference: at most ~2x the error
    of torch's own bf16 reference computation."""
    q, k, v = (t.cuda() for t in rand_qkv(B=2, H=4, L=256, D=64))
    ref = attention_ref(q, k, v, causal=causal)
    lo = [t.bfloat16() for t in (q, k, v)]
    torch_err = (attention_ref(*lo, causal=causal).float() - ref).abs().max()
    backends = ["torch"] + (["library"] if A.FLASH_AVAILABLE else [])
    for backend in backends:
        out = full_attention(*lo, causal=causal, backend=backend).float()
        assert (out - ref).abs().max() <= 2 * torch_err + 1e-3, backend
    out = local_attention(*lo, 64, causal=causal).float()
    dense = attention_ref(q, k, v, allowed=block_mask(256, 64, causal).cuda())
    assert (out - dense).abs().max() <= 2 * torch_err + 1e-3


# ------------------------------------------- the path never reads the mask
@pytest.mark.parametrize("backend", ["torch", "ref", "dense"])
@pytest.mark.parametrize("causal", [False, True])
def test_padded_outputs_and_gradients_match_the_reference(backend, causal):
    """Outputs and q/k/v gradients on real positions equal attention_ref's on random padded
    inputs."""
    q, k, v = rand_qkv(L=29, seed=5)
    valid = lengths_to_valid([29, 11], 29)
    keep = valid[:, None, :, None].float()
    grads = []
    for fn in (lambda *t: full_attention(*t, valid, causal, backend=backend),
               lambda *t: attention_ref(*t, valid, causal)):
        ts = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*ts)
        (out * keep * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
        grads.append([out * keep] + [t.grad for t in ts])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "ref", "dense"])
@pytest.mark.parametrize("causal", [False, True])
def test_no_mask_is_the_same_as_an_all_true_mask(backend, causal):
    """valid=None (the engine's choice for unpadded batches) gives what an all-True mask gives."""
    q, k, v = rand_qkv(L=21, seed=6)
    ones = torch.ones(2, 21, dtype=torch.bool)
    torch.testing.assert_close(full_attention(q, k, v, None, causal, backend=backend),
                               full_attention(q, k, v, ones, causal, backend=backend),
                               rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(local_attention(q, k, v, 8, None, causal, backend=backend),
                               local_attention(q, k, v, 8, ones, causal, backend=backend),
                               rtol=1e-6, atol=1e-6)


def test_the_library_path_never_reads_the_mask(monkeypatch):
    """"library" decides flash vs SDPA from Python facts only: a padded batch's mask is handed to
    SDPA as it is, and no method that reads its values (all / any / item / bool) is called."""
    monkeypatch.setattr(A, "flash_unavailable", lambda q: None)  # as on a GPU with flash-attn ...

    def no_flash(*a, **kw):  # ... but a masked batch must never get here
        raise AssertionError("flash-attn was called with a padding mask")
    monkeypatch.setattr(A, "_flash_attn_func", no_flash)
    q, k, v = rand_qkv()
    valid = lengths_to_valid([37, 20], 37)

    class Untouchable(torch.Tensor):
        def __bool__(self):
            raise AssertionError("the mask's values were read on the host")

        def all(self, *a, **kw):
            raise AssertionError("key_valid.all() was called")

    full_attention(q, k, v, valid.as_subclass(Untouchable), backend="library")


# ------------------------------------------- where every key is a neighbour: dense attention
def pattern_mask(L, W, causal, band=None):
    """Dense (L, L) reference of local attention: the neighbour blocks of W, or |i - j| <= band."""
    if band is None:
        return block_mask(L, W, causal)
    i = torch.arange(L)
    allowed = (i[:, None] - i[None, :]).abs() <= band
    return allowed & (i[None, :] <= i[:, None]) if causal else allowed


def outputs_and_grads(fn, q, k, v, keep):
    """fn(q, k, v) and the gradients of a fixed random-weighted sum of its real rows."""
    ts = [t.clone().requires_grad_() for t in (q, k, v)]
    out = fn(*ts) * keep
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(99)).to(out.device)
    (out * w).sum().backward()
    return [out] + [t.grad for t in ts]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("L", [8, 15, 16, 17])  # W, 2W - 1, 2W, 2W + 1 (three blocks: not dense)
@pytest.mark.parametrize("backend", ["torch", "ref", "dense"])
def test_local_attention_around_the_dense_boundary_equals_the_reference(causal, alibi, L, backend):
    """Outputs and q/k/v gradients equal attention_ref under the explicit neighbour mask, padded,
    with and without ALiBi, on both sides of ceil(L / W) = 2."""
    from spt.models.positions import alibi_bias, alibi_slopes
    W, H = 8, 2
    q, k, v = rand_qkv(H=H, L=L, seed=10 * L + 2 * causal + alibi)
    valid = lengths_to_valid([L, L - 5], L)
    keep = valid[:, None, :, None].float()
    slopes = alibi_slopes(H) if alibi else None
    pos = torch.arange(L)
    bias = alibi_bias(slopes, pos, pos) if alibi else None
    got = outputs_and_grads(lambda *t: local_attention(*t, W, valid, causal, backend=backend,
                                                       slopes=slopes), q, k, v, keep)
    want = outputs_and_grads(lambda *t: attention_ref(*t, valid, allowed=pattern_mask(L, W, causal),
                                                      bias=bias), q, k, v, keep)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,W,band,dense", [(8, 8, None, True), (15, 8, None, True),
                                            (16, 8, None, True), (17, 8, None, False),
                                            (9, 8, 8, True), (10, 8, 8, False),
                                            (6, 5, 5, True), (6, 4, 4, False)])
def test_a_dense_pattern_is_full_attention_with_the_same_arguments(monkeypatch, causal, L, W,
                                                                   band, dense):
    """ceil(L / W) <= 2 (and a band reaching every key, w >= L - 1) hands the call to
    full_attention, arguments unchanged; otherwise the neighbour-block path runs."""
    seen = []
    real = A.full_attention

    def spy(*args, **kw):
        seen.append((args[3:], kw))
        return real(*args, **kw)
    monkeypatch.setattr(A, "full_attention", spy)
    q, k, v = rand_qkv(L=L, H=2)
    valid = lengths_to_valid([L, L - 1], L)
    slopes = torch.tensor([0.5, 0.25])
    out = A.local_attention(q, k, v, W, valid, causal, 0.0, "torch", band=band, slopes=slopes)
    assert (seen == [((valid, causal, 0.0, "torch", slopes), {})]) == dense
    keep = valid[:, None, :, None]
    want = attention_ref(q, k, v, valid, allowed=pattern_mask(L, W, causal, band),
                         bias=A.alibi_bias(slopes, torch.arange(L), torch.arange(L)))
    torch.testing.assert_close(out * keep, want * keep, rtol=1e-5, atol=1e-5)


def test_a_dense_pattern_keeps_the_library_path_and_a_padded_batch_runs_sdpa(monkeypatch):
    """local_attention hands a dense pattern to full_attention with its path, "library" too; there
    a padded batch runs SDPA, an unpadded one flash-attn."""
    seen = []
    monkeypatch.setattr(A, "flash_unavailable", lambda q: None)
    monkeypatch.setattr(A, "_flash_attn_func", lambda *a, **kw: seen.append("flash") or a[0])
    q, k, v = rand_qkv(L=12)
    valid = lengths_to_valid([12, 7], 12)
    torch.testing.assert_close(A.local_attention(q, k, v, 8, valid, backend="library"),
                               A.local_attention(q, k, v, 8, valid, backend="torch"))
    assert seen == []
    A.local_attention(q, k, v, 8, None, backend="library")
    assert seen == ["flash"]
