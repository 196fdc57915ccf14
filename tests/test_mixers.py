"""What every mixer of spt.mixer_config must do as a model: build from its config, round-trip
through a checkpoint's config and the hub format, be causal or see both ways as configured (the
receptive-field explorer shows it), take the optimiser hints, and train a step of each SPT objective."""
import dataclasses

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from spt.analysis.receptive_field import layer_profiles
from spt.config import ObjectiveConfig, TrainConfig, replace
from spt.data.task import TaskSpec
from spt.mixer_config import (
    MIXER_CONFIGS,
    GatedDeltaNetConfig,
    GLAConfig,
    Mamba2Config,
    MambaConfig,
    MixerConfig,
    mlp_width,
)
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models.model import SequenceModel, classifier_model, pretraining_model
from spt.train.optim import build_optimizer
from spt.viz import fig_receptive_field

SPEC = TaskSpec("toy", 24, 5, vocab_size=12)
# the authors' heads (Mamba-2's 64, Gated DeltaNet's 256) shrunk to d = 16, and fla's MLP rounding
SMALL = {Mamba2Config: dict(d_state=16, head_dim=8), GatedDeltaNetConfig: dict(head_dim=8, mlp_multiple=16),
         GLAConfig: dict(mlp_multiple=16)}
CONFIGS = [cls(d_model=16, n_layers=2, max_len=24, **SMALL.get(cls, {})) for cls in MIXER_CONFIGS]
IDS = [cls.kind for cls in MIXER_CONFIGS]


def test_every_mixer_names_its_class_and_kind():
    assert len(MIXER_CONFIGS) >= 5
    for cls in MIXER_CONFIGS:
        assert issubclass(cls, MixerConfig) and cls.mixer.startswith("spt.models.mixers.")
        assert cls.kind and cls.__doc__
    assert len({cls.kind for cls in MIXER_CONFIGS}) == len(MIXER_CONFIGS)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_config_round_trips_and_bad_fields_are_named(cfg):
    assert model_config_from_dict(model_config_to_dict(cfg)) == cfg
    with pytest.raises(ValueError, match="d_model"):
        replace(cfg, d_model=0)
    with pytest.raises(TypeError, match="n_layers"):
        replace(cfg, n_layers=2.5)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_hub_round_trip_gives_the_same_outputs(cfg, tmp_path):
    torch.manual_seed(0)
    model = classifier_model(replace(cfg, mlp_expand=1), SPEC).eval()
    model.save_pretrained(tmp_path / "m")
    loaded = SequenceModel.from_pretrained(tmp_path / "m").eval()
    x = torch.randint(1, 12, (2, 24))
    valid = torch.ones(2, 24, dtype=torch.bool)
    valid[1, 15:] = False
    torch.testing.assert_close(model(x, valid), loaded(x, valid))


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_receptive_field_is_one_sided_exactly_when_causal(cfg):
    for causal in (True, False):
        torch.manual_seed(1)
        model = classifier_model(replace(cfg, causal=causal), SPEC)
        erf = layer_profiles(model, d_model=16, L=10, n_samples=1, n_positions=3)
        assert erf.sizes["layer"] == cfg.n_layers
        ahead = erf.sel(lag=slice(-9, -1))
        back = erf.sel(lag=slice(1, 9))
        assert float(back.max()) > 0
        assert (float(ahead.max()) == 0.0) == causal
    fig = fig_receptive_field({cfg.kind: erf})  # the explorers' receptive-field view
    assert fig.axes
    plt.close(fig)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_a_step_of_each_objective(cfg):
    torch.manual_seed(2)
    for kind, causal in (("masked", False), ("causal", True)):
        model = pretraining_model(replace(cfg, causal=causal), SPEC,
                                  ObjectiveConfig(kind=kind, loss="ce"))
        opt = build_optimizer(model, TrainConfig(lr=1e-3, weight_decay=0.1))
        x = torch.randint(1, 12, (3, 24))
        loss = torch.nn.functional.cross_entropy(model(x).transpose(1, 2), x)
        loss.backward()
        opt.step()
        assert torch.isfinite(loss)
        hinted = {id(p) for p in model.parameters()
                  if getattr(p, "_optim", {}).get("weight_decay") == 0.0}
        for group in opt.param_groups:
            if any(id(p) in hinted for p in group["params"]):
                assert group["weight_decay"] == 0.0


def test_the_stack_has_one_block_per_layer_with_its_mlp():
    from spt.models.mixers.stack import MixerStack
    stack = MixerStack(dataclasses.replace(CONFIGS[0], mlp_expand=2, n_layers=3))
    assert len(stack.blocks) == 3 and all(b.mlp is not None for b in stack.blocks)


def test_the_mlp_width_follows_flas_gated_mlp_rule():
    """fla/modules/mlp.py: intermediate = int(D * hidden_ratio * 2 / 3) rounded up to 256."""
    for d, want in ((2048, 5632), (1024, 2816), (104, 512), (72, 256), (96, 256)):
        assert mlp_width(GLAConfig(d_model=d)) == want
        assert mlp_width(GatedDeltaNetConfig(d_model=d)) == want
    assert mlp_width(GLAConfig(d_model=32, mlp_expand=2, mlp_multiple=0)) == 64
    assert mlp_width(MambaConfig(d_model=32)) == 0
    with pytest.raises(ValueError, match="mlp_multiple"):
        GLAConfig(mlp_multiple=-1)


def test_blocks_use_the_authors_norm():
    """RMSNorm (a scale, no bias) before every mixer and MLP and after the last block where the
    authors' blocks have it (mamba-ssm, fla); LayerNorm on request, and for the LRU."""
    from spt.models.mixers.stack import MixerStack
    stack = MixerStack(CONFIGS[IDS.index("gla")])
    norms = [stack.norm] + [n for b in stack.blocks for n in (b.mix.norm, b.mlp.norm)]
    assert all(isinstance(n, torch.nn.RMSNorm) and n.eps == 1e-6 for n in norms)
    assert MixerStack(CONFIGS[IDS.index("mamba")]).norm.eps == 1e-5
    layer = MixerStack(replace(CONFIGS[IDS.index("mamba")], block_norm="layer"))
    assert isinstance(layer.norm, torch.nn.LayerNorm)
    assert isinstance(MixerStack(CONFIGS[IDS.index("lru")]).blocks[0].mix.norm, torch.nn.LayerNorm)
    with pytest.raises(ValueError, match="block_norm"):
        replace(CONFIGS[0], block_norm="batch")


def test_a_mixers_values_are_stated_once_in_its_config():
    """A mixer layer has no defaults of its own: its constructor takes d_model, causal and exactly
    its config's own fields, none with a default, so the authors' values live in the config only;
    and the config states its record (title, source, the fields compared with its authors')."""
    import dataclasses
    import importlib
    import inspect

    from spt.mixer_authors import INIT
    from spt.mixer_config import MIXER_CONFIGS
    for cls in MIXER_CONFIGS:
        module, name = cls.mixer.split(":")
        layer = getattr(importlib.import_module(module), name)
        params = dict(inspect.signature(layer.__init__).parameters)
        params.pop("self")
        assert set(params) == {"d_model", "causal", *cls(d_model=64).layer_kwargs}, cls.__name__
        with_default = [p.name for p in params.values() if p.default is not inspect.Parameter.empty]
        assert with_default == [], (cls.__name__, with_default)
        assert cls.title and cls.source and cls.authors in INIT, cls.__name__
        fields = {f.name for f in dataclasses.fields(cls)}
        assert cls.authors_fields and set(cls.authors_fields) <= fields, cls.__name__
        assert set(cls.small_shape) <= fields and all(set(s) <= fields
                                                      for s in cls.task_settings.values())


def test_a_mixer_config_without_its_authors_record_is_an_error():
    from dataclasses import dataclass
    from typing import ClassVar

    from spt.mixer_config import MixerConfig

    @dataclass(frozen=True, kw_only=True)
    class Unsourced(MixerConfig):
        mixer: ClassVar[str] = "spt.models.mixers.mamba:Mamba"
        kind: ClassVar[str] = "unsourced"

    with pytest.raises(NotImplementedError, match="states no authors' record"):
        Unsourced().departures("text")
