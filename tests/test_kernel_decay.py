"""kernel_decay: K_max over (layer, lag) = max over channels and both directions of |K|."""
import numpy as np
import pytest
import torch
import xarray as xr

from spt.analysis.kernel_decay import kernel_decay, kernel_decay_baseline, kernel_decay_comparison
from spt.config import TransformerConfig
from spt.data.task import TaskSpec
from spt.models.model import classifier_model
from spt.models.ssm import SSMEncoder
from spt.ssm_config import SSMConfig

SPEC = TaskSpec(name="toy", seq_len=32, num_classes=3, d_input=1)


@pytest.mark.parametrize("kind", ["s4", "s4d", "dlr"])
def test_kernel_decay_is_max_abs_kernel_over_channels_and_directions(kind):
    torch.manual_seed(0)
    model = classifier_model(SSMConfig(kind=kind, d_model=4, n_layers=3, d_state=8, max_len=32),
                             SPEC)
    da = kernel_decay(model, 32)
    assert isinstance(da, xr.DataArray) and da.dims == ("layer", "lag")
    assert list(da.layer.values) == [0, 1, 2] and list(da.lag.values) == list(range(32))
    assert da.attrs["kind"] == kind and isinstance(da.attrs["config"], str)
    for i, block in enumerate(model.backbone.layers.blocks):
        K = block.kernel(32).detach()                           # (2, H, L): both directions
        assert K.shape[0] == 2
        expected = K.abs().amax(dim=(0, 1)).numpy()
        np.testing.assert_allclose(da.sel(layer=i).values, expected, rtol=1e-6)
        assert np.all(da.sel(layer=i).values >= K[1].abs().amax(0).numpy() - 1e-7)


def test_baseline_is_the_structured_init_and_ignores_training():
    torch.manual_seed(1)
    cfg = SSMConfig(kind="s4", d_model=4, n_layers=2, d_state=8, max_len=32)
    enc = SSMEncoder(cfg)
    base = kernel_decay_baseline(enc, 32, seed=3)
    before = kernel_decay(enc, 32)
    with torch.no_grad():                                        # "training" moves the kernels
        for block in enc.blocks:
            block.kernel.log_dt.add_(1.0)
    after = kernel_decay(enc, 32)
    assert not np.allclose(before.values, after.values)
    xr.testing.assert_allclose(kernel_decay_baseline(enc, 32, seed=3), base)
    assert base.attrs["which"] == "baseline" and base.attrs["init"] == "legs"
    rand = SSMEncoder(SSMConfig(kind="dlr", init="random", d_model=4, n_layers=2, d_state=8))
    assert kernel_decay_baseline(rand, 16).attrs["init"] == "omega"


def test_comparison_dataset_is_plot_ready():
    enc = SSMEncoder(SSMConfig(kind="s4d", init="inv", d_model=4, n_layers=2, d_state=8))
    ds = kernel_decay_comparison(enc, 20)
    assert set(ds.data_vars) == {"model", "baseline"} and ds["model"].dims == ("layer", "lag")
    assert ds.attrs["baseline_init"] == "inv"
    assert np.isfinite(ds["model"].values).all() and (ds["baseline"].values >= 0).all()


def test_kernel_decay_errors():
    tr = classifier_model(TransformerConfig(d_model=8, n_layers=1, n_heads=2, d_ff=8), SPEC)
    with pytest.raises(TypeError, match="no convolution layers.*receptive_field"):
        kernel_decay(tr, 16)
    enc = SSMEncoder(SSMConfig(kind="s4", d_model=4, n_layers=1, d_state=8, max_len=16))
    with pytest.raises(ValueError, match="max_len"):
        kernel_decay(enc, 17)


def test_sgconv_models_get_the_same_kernel_analyses():
    """An SGConv model: K_max is the max over channels and directions of its layers' |K|, and
    the baseline is a fresh SGConv stack of the same config (its own init, with `seed`)."""
    from spt.analysis.kernel_decay import (
        baseline_encoder,
        kernel_abs_comparison,
        kernel_decay,
        kernel_decay_comparison,
    )
    from spt.data.task import TaskSpec
    from spt.models.model import classifier_model
    from spt.models.sgconv import SGConvEncoder
    from spt.sgconv_config import SGConvConfig

    cfg = SGConvConfig(d_model=8, n_layers=2, kernel_dim=4, max_len=64)
    torch.manual_seed(3)
    model = classifier_model(cfg, TaskSpec(name="t", seq_len=64, num_classes=2, vocab_size=10))
    k = kernel_decay(model, 64)
    want = np.stack([kk.abs().amax(dim=(0, 1)).numpy() for kk in model.backbone.layers.kernels(64)])
    np.testing.assert_allclose(k.values, want, rtol=1e-6)
    assert k.attrs["kind"] == "sgconv"
    ds = kernel_decay_comparison(model, 64, seed=3)
    assert set(ds.data_vars) == {"model", "baseline"} and ds.attrs["kind"] == "sgconv"
    assert isinstance(baseline_encoder(cfg), SGConvEncoder)
    a = kernel_abs_comparison(model, 32)
    assert a["model"].sizes == {"layer": 2, "channel": 8, "lag": 32}
