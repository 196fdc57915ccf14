"""Mamba's mixer: the chunked scan against Alg. 2's loop and against mambapy's MambaBlock."""

import pytest
import torch
from mixer_checks import causal_or_both_ways, padded_batch, padding_safe, same_outputs_and_grads, with_paths

from spt.mixer_config import MambaConfig
from spt.models.mixers.stack import mixer_layer

D = 16


@pytest.mark.parametrize("causal", [True, False])
def test_fast_path_equals_reference_padded_both_directions(causal):
    torch.manual_seed(0)
    mixer = mixer_layer(MambaConfig(d_model=D, causal=causal, d_state=8))
    x, valid = padded_batch(D)
    same_outputs_and_grads(mixer, with_paths(mixer, "ref"), x, valid)


@pytest.mark.parametrize("causal", [True, False])
def test_padding_never_reaches_real_positions(causal):
    torch.manual_seed(1)
    padding_safe(mixer_layer(MambaConfig(d_model=D, causal=causal, d_state=8)), D)


def test_causal_sees_back_bidirectional_sees_both_ways():
    causal_or_both_ways(lambda c: mixer_layer(MambaConfig(d_model=D, causal=c, d_state=8)), D)


def test_equals_mambapy_block_with_the_same_weights():
    """The causal mixer is Mamba's block: mambapy's MambaBlock with our weights gives our output."""
    mambapy = pytest.importorskip("mambapy.mamba")
    torch.manual_seed(2)
    ours = mixer_layer(MambaConfig(d_model=D, causal=True, d_state=8, expand=2, d_conv=4))
    theirs = mambapy.MambaBlock(mambapy.MambaConfig(d_model=D, n_layers=1, d_state=8,
                                                    expand_factor=2, d_conv=4))
    core = ours.cores[0]
    with torch.no_grad():
        theirs.in_proj.weight.copy_(ours.in_proj.weight)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.conv1d.weight.copy_(core.conv.conv.weight)
        theirs.conv1d.bias.copy_(core.conv.conv.bias)
        theirs.x_proj.weight.copy_(core.x_proj.weight)
        theirs.dt_proj.weight.copy_(core.dt_proj.weight)
        theirs.dt_proj.bias.copy_(core.dt_proj.bias)
        theirs.A_log.copy_(core.A_log)
        theirs.D.copy_(core.D)
    x = torch.randn(2, 40, D)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-4, rtol=1e-4)


def test_no_weight_decay_on_A_D_and_dt_bias():
    mixer = mixer_layer(MambaConfig(d_model=D, causal=False))
    hinted = {n for n, p in mixer.named_parameters() if getattr(p, "_optim", {}).get("weight_decay") == 0.0}
    assert hinted == {f"cores.{k}.{n}" for k in (0, 1) for n in ("A_log", "D", "dt_proj.bias")}
