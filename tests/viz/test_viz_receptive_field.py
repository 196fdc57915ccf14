"""The ERF figure and the kernel explorer's ERF view: what is drawn is the normalised profile, and
for the linear part of an SSM stack the ERF and the kernel magnitude agree in shape."""
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import xarray as xr
from test_receptive_field import BlockConv  # a block's linear convolution (K * z + D z) as a module

from spt.analysis.kernel_decay import kernel_abs_comparison
from spt.analysis.receptive_field import fold_lags, lag_profile, layer_profiles
from spt.models.ssm import SSMEncoder
from spt.ssm_config import SSMConfig
from spt.viz import explore_kernels, fig_receptive_field

L = 32


def stage_profiles(seed: int, L: int = L) -> xr.DataArray:
    """Synthetic spt_profiles output: (stage, lag) over lags 0..L-1, rows summing to 1."""
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.1, 1.0, (2, L)) * np.exp(-np.arange(L) / 8)
    return xr.DataArray(v / v.sum(1, keepdims=True), dims=("stage", "lag"),
                        coords={"stage": ["init", "spt"], "lag": np.arange(L)}, name="erf")


def erf_lines(ax):
    return [ln for ln in ax.lines if ln.get_label().startswith("ERF")]


def kernel_lines(ax):
    return [ln for ln in ax.lines if "|K|" in ln.get_label() or "K_max" in ln.get_label()]


@pytest.fixture(scope="module")
def encoder():
    """A 3-layer causal S4 stack whose layers have clearly different kernels."""
    torch.manual_seed(0)
    enc = SSMEncoder(SSMConfig(kind="s4", d_model=4, n_layers=3, d_state=8, max_len=L,
                               causal=True)).double()
    with torch.no_grad():
        for i, block in enumerate(enc.blocks):
            block.kernel.log_dt.add_(1.0 * i)
    return enc


def linear_part_profiles(enc) -> xr.DataArray:
    """ERF (layer, lag) of the linear part of every block of `enc`, signed lags."""
    rows = [lag_profile(BlockConv(b), d_model=4, L=L, n_samples=1, n_positions=4).numpy()
            for b in enc.blocks]
    return xr.DataArray(np.stack(rows), dims=("layer", "lag"),
                        coords={"layer": np.arange(len(rows)), "lag": np.arange(-(L - 1), L)})


def test_figure_draws_one_line_per_model_and_stage():
    a, b = stage_profiles(0), stage_profiles(1)
    fig = fig_receptive_field({"transformer": a, "yours": b})
    assert len(fig.axes) == 2
    for ax, (name, da) in zip(fig.axes, [("transformer", a), ("yours", b)]):
        assert ax.get_title().startswith(name) and ax.get_yscale() == "log"
        lines = erf_lines(ax)
        assert [ln.get_label() for ln in lines] == ["ERF init", "ERF SPT"]
        assert [ln.get_linestyle() for ln in lines] == ["--", "-"]
        for ln, stage in zip(lines, ["init", "spt"]):
            np.testing.assert_allclose(ln.get_xdata(), np.arange(L))
            np.testing.assert_allclose(ln.get_ydata(), da.sel(stage=stage).values, rtol=1e-12)
        assert not kernel_lines(ax)
    # every model on one given Axes, named in the labels; signed lags are folded
    signed = xr.DataArray(np.r_[a.values[:, :0:-1].T, a.values.T].T, dims=("stage", "lag"),
                          coords={"stage": ["init", "spt"], "lag": np.arange(-(L - 1), L)})
    f, ax = plt.subplots()
    try:
        out = fig_receptive_field({"m1": signed, "m2": b}, ax=ax, log=False)
        assert out is f and ax.get_yscale() == "linear"
        assert [ln.get_label() for ln in erf_lines(ax)] == ["ERF init m1", "ERF SPT m1",
                                                           "ERF init m2", "ERF SPT m2"]
        np.testing.assert_allclose(ax.lines[1].get_ydata(), a.sel(stage="spt").values,
                                   rtol=1e-12)
        assert ax.lines[0].get_color() != ax.lines[2].get_color()  # one colour a model
    finally:
        plt.close(f)


def test_figure_overlays_the_kernels_of_each_layer(encoder):
    da = layer_profiles(encoder, d_model=4, L=L, n_samples=2, n_positions=4)
    fig = fig_receptive_field(da, kernels=encoder, layers=[0, 2])
    ax = fig.axes[0]
    assert [ln.get_label() for ln in erf_lines(ax)] == ["ERF layer 0", "ERF layer 2"]
    assert [ln.get_label() for ln in kernel_lines(ax)] == ["mean_c |K| layer 0",
                                                           "mean_c |K| layer 2"]
    k = kernel_abs_comparison(encoder, L)["model"]
    for ln, layer in zip(kernel_lines(ax), [0, 2]):
        want = k.sel(layer=layer).mean("channel").values
        np.testing.assert_allclose(ln.get_ydata(), want / want[1:].sum(), rtol=1e-5)
    erf = fold_lags(da).sel(layer=2).values
    np.testing.assert_allclose(erf_lines(ax)[1].get_ydata(), erf / erf[1:].sum(), rtol=1e-12)
    assert erf_lines(ax)[1].get_color() == kernel_lines(ax)[1].get_color()
    # stages: SPT with the current kernels, init with the HiPPO baseline
    st = xr.concat([da.sel(layer=0), da.sel(layer=1)], "stage").assign_coords(stage=["init", "spt"])
    ax = fig_receptive_field({"s4": st}, kernels={"s4": encoder}, layers=[1]).axes[0]
    assert [ln.get_label() for ln in kernel_lines(ax)] == ["mean_c |K| init layer 1",
                                                           "mean_c |K| SPT layer 1"]
    base = kernel_abs_comparison(encoder, L)["baseline"].sel(layer=1).mean("channel").values
    np.testing.assert_allclose(kernel_lines(ax)[0].get_ydata(), base / base[1:].sum(), rtol=1e-5)


def test_wrong_input_raises_a_value_error_naming_the_parameter(encoder):
    a = stage_profiles(0)
    with pytest.raises(ValueError, match="profiles: expected an ERF DataArray"):
        fig_receptive_field(42)
    with pytest.raises(ValueError, match="profiles: the ERF DataArray lacks the dim 'lag'"):
        fig_receptive_field(a.rename(lag="position"))
    with pytest.raises(ValueError, match=r"profiles: unexpected dim\(s\) \['seed'\]"):
        fig_receptive_field(a.expand_dims(seed=[0, 1]))
    with pytest.raises(ValueError, match=r"profiles\['b'\]: stage values must be"):
        fig_receptive_field({"a": a, "b": a.assign_coords(stage=["before", "after"])})
    with pytest.raises(ValueError, match="profiles: the dict of models is empty"):
        fig_receptive_field({})
    with pytest.raises(ValueError, match=r"kernels must be a dict \{model name"):
        fig_receptive_field({"a": a, "b": a}, kernels=encoder)
    with pytest.raises(ValueError, match=r"kernels of 'a' have no layer\(s\) \[5\]"):
        fig_receptive_field({"a": a}, kernels=encoder, layers=[5])
    with pytest.raises(ValueError, match="explore_kernels: erf: expected an ERF DataArray"):
        explore_kernels(encoder, erf=[1, 2, 3])


def test_kernel_explorer_shows_the_erf_of_the_selected_layer(encoder):
    da = layer_profiles(encoder, d_model=4, L=L, n_samples=2, n_positions=4)
    folded = fold_lags(da)
    ex = explore_kernels(encoder, erf=da)
    w, erf, pt = ex.widgets, ex.lines["erf_pretrained"], ex.lines["pretrained"]
    assert w["erf"].value and w["stat"].value == "mean"
    assert w["stat"].options == ("max", "mean", "quantiles")
    assert erf.get_visible() and not ex.lines["erf_baseline"].get_visible()  # no init stage
    k = kernel_abs_comparison(encoder, L)["model"].mean("channel")
    redraws = ex.host.redraws
    for layer in (0, 2):
        w["layer"].value = layer                     # the slider: the ERF line follows it
        want = folded.sel(layer=layer).values
        np.testing.assert_allclose(erf.get_ydata(), want / want[1:].sum(), rtol=1e-12)
        kk = k.sel(layer=layer).values
        np.testing.assert_allclose(pt.get_ydata(), kk / kk[1:].sum(), rtol=1e-5)
    assert ex.host.redraws == redraws + 1 and ex.lines["erf_pretrained"] is erf   # in place
    assert "layer 2" in ex.ax.get_title() and "ERF" in ex.ax.get_title()
    w["erf"].value = False                           # off: the plain |K| view
    assert not erf.get_visible() and ex.ax.get_ylabel() == "|K|"
    np.testing.assert_allclose(pt.get_ydata(), k.sel(layer=2).values, rtol=1e-5)
    # ERF profiles of another model: nothing to overlay, said next to the controls
    other = explore_kernels(encoder, erf={"transformer": da})
    assert not other.lines["erf_pretrained"].get_visible()
    assert "no ERF for model s4" in other.status.value


def test_erf_and_kernel_of_an_s4_stack_agree_in_shape(encoder):
    """For the linear part of each S4 block the ERF at lag >= 1 is mean_c |K_c[lag]| exactly, so
    the overlaid curves of the same layer agree (correlation ~ 1); the curves of different layers
    do not, which is what makes this check able to fail."""
    da = linear_part_profiles(encoder)
    fig = fig_receptive_field(da, kernels=encoder)
    ex = explore_kernels(encoder, erf=da)
    ax = fig.axes[0]
    erfs = [ln.get_ydata()[1:] for ln in erf_lines(ax)]
    kers = [ln.get_ydata()[1:] for ln in kernel_lines(ax)]
    assert len(erfs) == len(kers) == 3
    for layer in range(3):
        assert np.corrcoef(erfs[layer], kers[layer])[0, 1] > 0.99, layer
        np.testing.assert_allclose(erfs[layer], kers[layer], rtol=1e-4)   # same normalisation
        ex.widgets["layer"].value = layer
        e = ex.lines["erf_pretrained"].get_ydata()[1:]
        assert np.corrcoef(e, ex.lines["pretrained"].get_ydata()[1:])[0, 1] > 0.99, layer
    assert np.corrcoef(erfs[0], kers[2])[0, 1] < 0.9
