"""The third-party layer adapters (spt.models.library_layers), each skipped unless its optional package is
installed (pip install 'spt[mamba]' / 'spt[s5]' / 'spt[gss]'). CPU, tiny sizes."""
import pytest
import torch

from spt.config import ObjectiveConfig
from spt.data.task import TaskSpec
from spt.layer_config import LayerConfig
from spt.models.model import SequenceModel, pretraining_model
from spt.models.user_layers import LayerStack, check_causal

SPEC = TaskSpec("toy", seq_len=24, num_classes=3, vocab_size=12)
ADAPTERS = {"MambaLayer": ("mambapy", {"d_state": 4, "expand": 2, "d_conv": 3}),
            "S5Layer": ("s5", {"d_state": 8}),
            "GSSLayer": ("gated_state_spaces_pytorch", {"d_kernel": 8, "d_state": 8})}


def _cfg(name, **kw):
    pytest.importorskip(ADAPTERS[name][0])
    return LayerConfig(f"spt.models.library_layers:{name}", kwargs=ADAPTERS[name][1], d_model=8,
                       n_layers=1, **kw)


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_adapter_is_causal_and_needs_the_wrapper_for_masked_pretraining(name):
    torch.manual_seed(0)
    assert check_causal(LayerStack(_cfg(name, causal=True)), 8, length=12)
    assert not check_causal(LayerStack(_cfg(name, bidirectional=True)), 8, length=12)
    with pytest.raises(ValueError, match=r"LayerConfig\(bidirectional=True\)"):
        LayerStack(_cfg(name))


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_bidirectional_adapter_ignores_padding_and_round_trips(name, tmp_path):
    torch.manual_seed(0)
    model = pretraining_model(_cfg(name, bidirectional=True), SPEC,
                              ObjectiveConfig("masked", 0.15, "ce")).eval()
    x = torch.randint(4, 12, (2, 20))
    valid = torch.ones(2, 20, dtype=torch.bool)
    valid[0, 13:] = False
    y = model(x, valid)
    x2 = x.clone()
    x2[0, 13:] = 5
    torch.testing.assert_close(model(x2, valid)[valid], y[valid])
    y.sum().backward()
    model.save_pretrained(tmp_path / "m")
    torch.testing.assert_close(SequenceModel.from_pretrained(tmp_path / "m")(x, valid), y,
                               rtol=0, atol=0)


def test_missing_package_says_what_to_install(monkeypatch):
    import sys

    from spt.models.library_layers import GSSLayer, MambaLayer, S5Layer
    monkeypatch.setitem(sys.modules, "mambapy", None)
    monkeypatch.setitem(sys.modules, "mambapy.mamba", None)
    monkeypatch.setitem(sys.modules, "s5", None)
    monkeypatch.setitem(sys.modules, "gated_state_spaces_pytorch", None)
    with pytest.raises(ImportError, match=r"pip install 'mambapy'.*spt\[mamba\]"):
        MambaLayer(8)
    with pytest.raises(ImportError, match=r"pip install 's5-pytorch'.*spt\[s5\]"):
        S5Layer(8)
    with pytest.raises(ImportError, match=r"pip install 'gated-state-spaces-pytorch'.*spt\[gss\]"):
        GSSLayer(8)
