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
