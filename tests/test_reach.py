"""A capped reach (TransformerConfig.reach / SSMConfig.reach): banded attention and truncated
kernels against plain references, and the receptive field of a stack measured by its gradients."""
import pytest
import torch

from spt.config import TransformerConfig
from spt.kernels.attention import attention_ref
from spt.kernels.fftconv import direct_conv_ref, fft_conv
from spt.kernels.paths import set_paths
from spt.models.attention import Attention
from spt.models.model import build_layers
from spt.models.ssm import cap_reach
from spt.ssm_config import SSMConfig


def _band(L: int, w: int, causal: bool) -> torch.Tensor:
    i = torch.arange(L)
    ok = (i[:, None] - i[None, :]).abs() <= w
    return ok & (i[None, :] <= i[:, None]) if causal else ok


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("w,L", [(0, 9), (1, 9), (3, 10), (4, 16), (12, 10)])
@pytest.mark.parametrize("backend", ["torch", "ref", "dense"])
def test_banded_attention_matches_the_reference(causal, w, L, backend):
    torch.manual_seed(w * 31 + L)
    att = Attention(16, 2, causal=causal, reach=w).eval()
    set_paths(att, {"attention": backend})
    x = torch.randn(3, L, 16, dtype=torch.float64)
    valid = torch.ones(3, L, dtype=torch.bool)
    valid[1, L - 3:] = False  # right padding
    att = att.double()
    q, k, v = att.qkv(x).view(3, L, 3, 2, 8).permute(2, 0, 3, 1, 4)
    want = attention_ref(q, k, v, valid, allowed=_band(L, w, causal))
    want = att.out(want.transpose(1, 2).reshape(3, L, 16))
    got = att(x, valid)
    real = valid[..., None]
    torch.testing.assert_close(got * real, want * real)


@pytest.mark.parametrize("causal", [False, True])
def test_cap_reach_keeps_only_lags_up_to_reach(causal):
    torch.manual_seed(0)
    L, w = 12, 3
    k = torch.randn(1 if causal else 2, 4, L, dtype=torch.float64)
    u = torch.randn(2, L, 4, dtype=torch.float64)
    capped = cap_reach(k, w)
    torch.testing.assert_close(fft_conv(u, capped), direct_conv_ref(u, capped))
    # output t must not move when inputs further than w away do
    t = 6
    u2 = u.clone()
    far = [s for s in range(L) if abs(s - t) > w]
    u2[:, far] += torch.randn(2, len(far), 4, dtype=torch.float64)
    torch.testing.assert_close(fft_conv(u2, capped)[:, t], fft_conv(u, capped)[:, t])
    assert cap_reach(k, None) is k


def _support(layers, L: int, t: int, d: int) -> list:
    """Input positions whose gradient reaches output position t (float64, eval mode)."""
    x = torch.randn(1, L, d, dtype=torch.float64, requires_grad=True)
    y = layers(x)[0, t]
    (y * torch.randn_like(y)).sum().backward()  # a plain sum is constant after a LayerNorm
    return [s for s in range(L) if x.grad[0, s].abs().max() > 1e-12]


@pytest.mark.parametrize("kind", ["transformer", "s4d", "s4"])
@pytest.mark.parametrize("causal", [False, True])
def test_a_stack_relates_inputs_at_most_n_layers_times_reach_apart(kind, causal):
    torch.manual_seed(1)
    L, w, n, t = 40, 3, 2, 20
    if kind == "transformer":
        cfg = TransformerConfig(d_model=16, n_layers=n, n_heads=2, d_ff=32, reach=w,
                                causal=causal, max_len=L)
    else:
        cfg = SSMConfig(kind=kind, d_model=8, n_layers=n, d_state=8, reach=w, causal=causal,
                        max_len=L)
    layers = build_layers(cfg).double().eval()
    set_paths(layers, "ref")  # attention written out: exact zeros where a key is not allowed
    lo, hi = t - n * w, (t if causal else t + n * w)
    assert _support(layers, L, t, cfg.d_model) == list(range(lo, hi + 1))


def test_reach_is_checked():
    with pytest.raises(ValueError, match="reach"):
        TransformerConfig(reach=-1)
    with pytest.raises(ValueError, match="reach"):
        SSMConfig(reach=-2)


def test_a_capped_causal_ssm_has_no_step_mode():
    layers = build_layers(SSMConfig(kind="s4d", d_model=8, n_layers=1, d_state=8, causal=True,
                                    reach=2, max_len=16))
    with pytest.raises(RuntimeError, match="reach"):
        layers.blocks[0].setup_step()
