"""spt.compat: the one module that reads what older versions of spt wrote."""
import pytest
import torch

from spt import compat
from spt.layer_config import LayerConfig
from spt.model_config import model_config_from_dict


def test_a_layer_stored_under_a_renamed_module_still_builds():
    from spt.models.layer_template import DecayMix
    from spt.models.user_layers import import_layer
    assert compat.current_layer_path("spt.models.examples:DecayMix") == \
        "spt.models.layer_template:DecayMix"
    assert import_layer("spt.models.examples:DecayMix") is DecayMix
    assert compat.current_layer_path("my_layers:Mix") == "my_layers:Mix"
    cfg = model_config_from_dict({"type": "LayerConfig", "layer": "spt.models.examples:DecayMix",
                                  "d_model": 8, "n_layers": 1})
    assert isinstance(cfg, LayerConfig)


def test_an_old_run_state_reads_as_the_current_one():
    old = {"epoch": 3, "best": 0.5, "bad_evals": 2, "step": 9}
    new = compat.upgrade_run_state(old)
    assert new["bad_epochs"] == 2 and "bad_evals" not in new
    assert new["validated"] == 3 and new["patience_best"] == 0.5 and new["stopped_by"] is None
    assert old == {"epoch": 3, "best": 0.5, "bad_evals": 2, "step": 9}  # a copy


def test_every_device_rng_state_of_older_checkpoints_is_read_per_device():
    a, b = torch.zeros(3), torch.ones(3)
    assert compat.cuda_rng_state([a, b], 1) is b
    assert compat.cuda_rng_state(a, 0) is a


@pytest.mark.parametrize("later, name", [(compat.LATER_TRAIN_FIELDS, "train"),
                                         (compat.LATER_MODEL_FIELDS, "model")])
def test_fields_at_their_old_value_are_stored_as_before(later, name):
    field, value = next(iter(later.items()))
    assert compat.without_later_fields({"x": 1, field: value}, later) == {"x": 1}
    assert field in compat.without_later_fields({"x": 1, field: "other"}, later)


def test_mixer_configs_written_before_the_authors_shapes_read_back_as_they_ran():
    """A checkpoint's model config written before the mixers took their authors' defaults (and
    before block_norm, mlp_multiple, conv_bias and recurrent_lr_scale existed) stores every field
    it had: it reads back with its own values, the later fields at the values it ran with."""
    from spt.mixer_config import GatedDeltaNetConfig, LRUConfig, Mamba2Config
    from spt.model_config import model_config_to_dict
    shared = {"d_model": 64, "n_layers": 2, "causal": False, "positions": "none", "max_len": 1024,
              "pooling": "mean", "dropout": 0.0}
    m2 = model_config_from_dict({"type": "Mamba2Config", **shared, "mlp_expand": 0, "d_state": 64,
                                 "expand": 2, "head_dim": 32, "d_conv": 4, "dt_min": 0.001,
                                 "dt_max": 0.1})
    assert (m2.d_state, m2.head_dim, m2.block_norm, m2.mlp_multiple) == (64, 32, "layer", 0)
    gdn = model_config_from_dict({"type": "GatedDeltaNetConfig", **shared, "mlp_expand": 2,
                                  "n_heads": 4, "head_dim": 0, "expand_v": 2, "d_conv": 4})
    assert (gdn.n_heads, gdn.head_dim, gdn.conv_bias, gdn.mlp_expand, gdn.mlp_multiple,
            gdn.block_norm) == (4, 0, True, 2, 0, "layer")
    lru = model_config_from_dict({"type": "LRUConfig", **shared, "mlp_expand": 0, "d_state": 0,
                                  "r_min": 0.9, "r_max": 0.999, "max_phase": 6.283})
    assert lru.recurrent_lr_scale is None and lru.block_norm == "layer"
    # stored again, each is the dict it was read from (the later fields at their old values left out)
    for cfg in (m2, gdn, lru):
        assert model_config_from_dict(model_config_to_dict(cfg)) == cfg
        assert not {"block_norm", "mlp_multiple", "conv_bias",
                    "recurrent_lr_scale"} & set(model_config_to_dict(cfg))
    # today's defaults are stored with the fields that differ from the old values
    assert model_config_to_dict(GatedDeltaNetConfig())["conv_bias"] is False
    assert model_config_to_dict(Mamba2Config())["block_norm"] == "rms"
    assert model_config_to_dict(LRUConfig())["recurrent_lr_scale"] == 0.5
