"""Effective receptive field by lag: exact on linear convolutions, zero outside attention windows.

The exactness argument: the linear part of an SSM / SGConv layer is the depthwise convolution
y[t, c] = sum_s K_c[t - s] x[s, c] + D_c x[t, c] (backward kernel K[1, c, s - t - 1] for s > t).
Its derivative d(sum_c y[t, c]) / d x[t - lag, c'] is K_c'[lag] (+ D_c' at lag 0), the same for
every input and every t, so the ERF (mean of |.| over inputs, t and c') is mean_c |K_c[lag]|
exactly, up to float64 round-off of the FFT.
"""
import numpy as np
import pytest
import torch
import torch.nn as nn
import xarray as xr

from spt.analysis.receptive_field import (
    fold_lags,
    lag_profile,
    layer_profiles,
    sampled_positions,
    stack_profile,
)
from spt.config import TransformerConfig
from spt.kernels import fft_conv, set_paths
from spt.models.heads import ClassifierHead, ContinuousEncoder
from spt.models.model import Backbone, SequenceModel
from spt.models.sgconv import SGConvEncoder
from spt.models.ssm import SSMEncoder
from spt.models.transformer import TransformerEncoder
from spt.sgconv_config import SGConvConfig
from spt.ssm_config import SSMConfig


class LinearConv(nn.Module):
    """The linear part of an SSM or SGConv block: x (B, L, H) -> K * x + D x (same fft_conv)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x, valid=None):
        return fft_conv(x, self.block.kernel(x.shape[1])) + x * self.block.D


def kernel_profile(K: torch.Tensor, D: torch.Tensor) -> np.ndarray:
    """mean_c |K_c[lag]| over lag in [-(L-1), L-1] for K (n_dir, H, L), D (H,)."""
    n_dir, H, L = K.shape
    back = K[0].abs().mean(0).clone()                          # lags 0..L-1
    back[0] = (K[0, :, 0] + D).abs().mean()                    # the skip term sits at lag 0
    if n_dir == 2:                                             # lag -m reads K[1, :, m - 1]
        ahead = K[1, :, :L - 1].abs().mean(0).flip(0)
    else:
        ahead = torch.zeros(L - 1, dtype=K.dtype)
    return torch.cat([ahead, back]).numpy()


class BlockConv(nn.Module):
    """SGConvBlock.conv, the linear part the block itself calls, as a module."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x, valid=None):
        return self.block.conv(x, valid)


def ssm_block(causal, L):
    torch.manual_seed(0)
    return SSMEncoder(SSMConfig(kind="s4", d_model=4, n_layers=1, d_state=8, max_len=L,
                                causal=causal)).double().blocks[0]


def sgconv_block(causal, L):
    torch.manual_seed(0)
    return SGConvEncoder(SGConvConfig(d_model=4, n_layers=1, kernel_dim=4, max_len=L,
                                      causal=causal)).double().blocks[0]


@pytest.mark.parametrize("make", [ssm_block, sgconv_block], ids=["s4", "sgconv"])
@pytest.mark.parametrize("causal", [False, True])
def test_erf_of_a_linear_convolution_is_its_mean_abs_kernel(make, causal):
    L = 24
    block = make(causal, L)
    prof = lag_profile(LinearConv(block), d_model=4, L=L, n_samples=2, n_positions=5).numpy()
    expected = kernel_profile(block.kernel(L).detach(), block.D.detach())
    assert prof.shape == (2 * L - 1,)
    np.testing.assert_allclose(prof, expected, rtol=1e-9, atol=1e-12)
    assert np.corrcoef(prof, expected)[0, 1] > 0.99
    if causal:
        assert prof[:L - 1].max() < 1e-12 * prof[L - 1:].max()  # nothing ahead (FFT round-off)
    else:
        assert np.all(prof[:L - 1] > 0)


def test_sgconv_block_conv_is_the_linear_convolution():
    """SGConvBlock.conv, the method the block itself calls, has the same exact ERF."""
    L = 20
    block = sgconv_block(False, L)
    prof = lag_profile(BlockConv(block), d_model=4, L=L, n_samples=1, n_positions=4)
    np.testing.assert_allclose(prof.numpy(), kernel_profile(block.kernel(L).detach(),
                                                            block.D.detach()), rtol=1e-9)


def local_transformer(causal, W, n_layers=2, local_block=True):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=8, n_layers=n_layers, n_heads=2, d_ff=16, dropout=0.0,
                            causal=causal, local_block=W if local_block else None, max_len=64)
    encoder = TransformerEncoder(cfg).double()
    set_paths(encoder, "ref")  # attention written out: exact zeros where a key is not allowed
    return encoder


@pytest.mark.parametrize("causal", [False, True])
def test_local_attention_erf_is_zero_outside_its_neighbour_blocks(causal):
    W, L = 4, 24                                              # 6 blocks of 4 positions
    enc = local_transformer(causal, W)
    # positions 0 and L-1 (always sampled) reach the extreme lags of the windows
    da = layer_profiles(enc, d_model=8, L=L, n_samples=2, n_positions=4, n_channels=3)
    lag = da.lag.values
    reach_ahead = 0 if causal else 2 * W - 1                  # blocks i-1, i (, i+1)
    for i in range(2):                                        # each block: one attention hop
        p = da.sel(layer=i).values
        inside = (lag <= 2 * W - 1) & (lag >= -reach_ahead)
        assert np.all(p[~inside] == 0), i
        assert np.all(p[inside] > 0), i
    whole = stack_profile(enc, d_model=8, L=L, n_samples=2, n_positions=4, n_channels=3).values
    two_hops = (lag <= 3 * W - 1) & (lag >= -(3 * W - 1 if not causal else 0))
    assert np.all(whole[~two_hops] == 0) and np.all(whole[two_hops] > 0)
    full = stack_profile(local_transformer(causal, W, local_block=False), 8, L, n_samples=2,
                         n_positions=4, n_channels=3).values
    assert full[-1] > 0                                       # full attention reaches lag L-1


def test_layer_profiles_feed_each_block_its_input_in_the_stack():
    torch.manual_seed(1)
    enc = SGConvEncoder(SGConvConfig(d_model=4, n_layers=2, kernel_dim=4, max_len=16)).double()
    model = SequenceModel(Backbone(ContinuousEncoder(1, 4), enc), ClassifierHead(4, 2, "mean"))
    model.train()
    state = torch.random.get_rng_state()
    da = layer_profiles(model, d_model=4, L=16, n_samples=3, n_positions=6, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)   # caller's random state untouched
    assert model.training and enc.blocks[0].training          # modes restored
    assert isinstance(da, xr.DataArray) and da.dims == ("layer", "lag")
    assert list(da.layer.values) == [0, 1] and list(da.lag.values) == list(range(-15, 16))
    enc.eval()
    x0 = torch.Generator().manual_seed(7)
    x0 = torch.randn(3, 16, 4, generator=x0, dtype=torch.float64)
    with torch.no_grad():
        x1 = enc.blocks[0](x0)
    np.testing.assert_allclose(da.sel(layer=0).values,
                               lag_profile(enc.blocks[0], 4, 16, n_positions=6, x=x0).numpy())
    np.testing.assert_allclose(da.sel(layer=1).values,
                               lag_profile(enc.blocks[1], 4, 16, n_positions=6, x=x1).numpy())
    assert not np.allclose(da.sel(layer=1).values,
                           lag_profile(enc.blocks[1], 4, 16, n_positions=6, x=x0).numpy())


@pytest.mark.parametrize("stack", ["s4", "sgconv"])
def test_causal_stacks_see_nothing_ahead(stack):
    torch.manual_seed(2)
    L = 16
    if stack == "s4":
        enc = SSMEncoder(SSMConfig(kind="s4", d_model=4, n_layers=2, d_state=8, max_len=L,
                                   causal=True))
    else:
        enc = SGConvEncoder(SGConvConfig(d_model=4, n_layers=2, kernel_dim=4, max_len=L,
                                         causal=True))
    p = stack_profile(enc.double(), d_model=4, L=L, n_samples=2, n_positions=4).values
    assert p[:L - 1].max() < 1e-9 * p[L - 1:].max()           # FFT round-off only
    assert np.all(p[L - 1:] > 0)


def test_fold_lags_takes_the_larger_side():
    da = xr.DataArray(np.array([[5.0, 1.0, 2.0, 3.0, 4.0]]), dims=("layer", "lag"),
                      coords={"layer": [0], "lag": [-2, -1, 0, 1, 2]})
    f = fold_lags(da)
    assert list(f.lag.values) == [0, 1, 2] and f.values.tolist() == [[2.0, 3.0, 5.0]]


def test_positions_cover_both_ends():
    assert sampled_positions(10, 4).tolist() == [0, 3, 6, 9]
    assert sampled_positions(3, 16).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="n_positions"):
        sampled_positions(10, 1)


def test_spt_profiles_compare_init_and_pretrained_on_positions_and_real_inputs(tmp_path):
    """spt_profiles: (stage, lag) rows normalised to 1; the stack reads the backbone's positions
    (a sinusoidal Transformer's profile at init is not flat on real inputs once positions are in:
    without them attention could not tell lags apart); the SPT row differs from the init row."""
    from spt.analysis.receptive_field import backbone_inputs, spt_profiles
    from spt.config import ObjectiveConfig, TrainConfig
    from spt.data import digits_task
    from spt.train import pretrain

    task = digits_task(size=8, n_train=32, val_size=20, test_size=20, tokens=True)
    cfg = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=64)
    r = pretrain(task, cfg, ObjectiveConfig("masked", 0.5, "ce"),
                 TrainConfig(lr=3e-3, epochs=3, batch_size=8, progress=False), tmp_path / "pt")
    inputs = torch.stack([task.val[i]["inputs"] for i in range(4)])
    da = spt_profiles(r.best_checkpoint, inputs=inputs, n_positions=8)
    assert da.dims == ("stage", "lag") and list(da.stage.values) == ["init", "spt"]
    assert da.sizes["lag"] == 64 and np.allclose(da.sum("lag"), 1.0) and (da >= 0).all()
    assert not np.allclose(da.sel(stage="init"), da.sel(stage="spt"))
    # positions are added before the stack: the input differs from the plain encoding
    x = backbone_inputs(r.model, 16, 64, inputs=inputs)
    with torch.no_grad():
        plain = r.model.eval().backbone.encoder(inputs, None)
    assert x.shape == plain.shape == (4, 64, 16) and not torch.allclose(x, plain)
    rand = spt_profiles(r.best_checkpoint, L=32, n_samples=2, n_positions=4)
    assert rand.sizes["lag"] == 32 and rand.attrs["inputs"] == "N(0, 1)"
