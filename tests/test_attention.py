"""Attention backends agree with the plain-torch reference; local attention equals dense attention
under the equivalent mask; padded keys are never attended."""
import pytest
import torch

from spt.models.attention import Attention, attention_ref, full_attention, local_attention


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
    out = full_attention(q, k, v, valid, causal, backend="sdpa")
    keep = valid[:, None, :, None]  # padded query rows are unused
    torch.testing.assert_close(out * keep, ref * keep, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,W", [(32, 8), (37, 8), (10, 4), (16, 16)])
def test_local_attention_equals_dense_with_block_mask(causal, L, W):
    q, k, v = rand_qkv(L=L, seed=L + W)
    valid = lengths_to_valid([L, max(1, L - 11)], L)
    dense = attention_ref(q, k, v, valid, causal=False, allowed=block_mask(L, W, causal))
    for backend in ("sdpa", "manual"):
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


def test_flash_backend_requested_without_flash_attn_is_a_clear_error():
    from spt.models import attention as A
    if A.FLASH_AVAILABLE:
        pytest.skip("flash-attn is installed here")
    q, k, v = rand_qkv()
    with pytest.raises(RuntimeError, match="flash-attn is not installed"):
        full_attention(q, k, v, backend="flash")


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_fast_paths_match_reference_in_bf16(causal):
    """flash-attn (when installed) and SDPA on CUDA vs the float32 reference: at most ~2x the error
    of torch's own bf16 reference computation."""
    from spt.models import attention as A
    q, k, v = (t.cuda() for t in rand_qkv(B=2, H=4, L=256, D=64))
    ref = attention_ref(q, k, v, causal=causal)
    lo = [t.bfloat16() for t in (q, k, v)]
    torch_err = (attention_ref(*lo, causal=causal).float() - ref).abs().max()
    backends = ["sdpa"] + (["flash"] if A.FLASH_AVAILABLE else [])
    for backend in backends:
        out = full_attention(*lo, causal=causal, backend=backend).float()
        assert (out - ref).abs().max() <= 2 * torch_err + 1e-3, backend
    out = local_attention(*lo, 64, causal=causal).float()
    dense = attention_ref(q, k, v, allowed=block_mask(256, 64, causal).cuda())
    assert (out - dense).abs().max() <= 2 * torch_err + 1e-3


# ------------------------------------------- the backend is chosen without reading the mask
@pytest.mark.parametrize("backend", ["sdpa", "manual", "auto"])
@pytest.mark.parametrize("causal", [False, True])
def test_padded_outputs_and_gradients_match_the_reference(backend, causal):
    """Through the no-sync backend choice: outputs and q/k/v gradients on real positions equal
    attention_ref's on random padded inputs."""
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


@pytest.mark.parametrize("backend", ["sdpa", "manual", "auto"])
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


def test_auto_backend_never_reads_the_mask(monkeypatch):
    """'auto' decides flash vs SDPA from Python facts only: the mask is handed to SDPA as it is,
    and no method that reads its values (all / any / item / bool) is called on it."""
    from spt.models import attention as A
    monkeypatch.setattr(A, "FLASH_AVAILABLE", True)  # as on a machine with flash-attn ...

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

    full_attention(q, k, v, valid.as_subclass(Untouchable), backend="auto")
