"""Every study's presets build (the paper's hyper-parameters construct valid configs), and a paper
run without its data says what to run instead of training on nothing."""
import importlib

import pytest

from spt.data.cache import DataMissingError
from spt.studies.grid import GridPreset

GRID_STUDIES = ["lra_transformers", "transformers_vs_s4", "explicit_priors", "data_scales",
                "modalities", "compute_tied", "model_scales"]


@pytest.mark.parametrize("name", GRID_STUDIES)
def test_paper_preset_builds_and_missing_data_is_a_clear_error(name, tmp_path):
    study = importlib.import_module(f"spt.studies.{name}")
    p = study.PRESETS["paper"](str(tmp_path))
    assert isinstance(p, GridPreset) and p.entries
    dims = [tuple(k for k, _ in e.coords) for e in p.entries]
    assert len(set(dims)) == 1, "every cell of a study has the same dims"
    assert len({e.coords for e in p.entries}) == len(p.entries), "cells are distinct"
    for e in p.entries:
        assert e.arm.train.epochs >= 1 and e.arm.model.max_len >= 1
        assert (e.arm.objective is None) == (e.arm.pretrain is None)
    with pytest.raises(DataMissingError, match="spt data prepare"):
        study.run("paper", tmp_path / "out", data_root=str(tmp_path))
    with pytest.raises(ValueError, match="data_root"):
        study.run("paper", tmp_path / "out")
    with pytest.raises(ValueError, match="unknown preset 'huge'.*smoke, paper"):
        study.run("huge", tmp_path / "out")
    assert not (tmp_path / "out").exists(), "nothing is written before the data is there"


def test_paper_hyper_parameters_are_the_papers():
    from spt.studies import data_scales, lra_transformers, model_scales, transformers_vs_s4
    # Table 4: ListOps masked row (FT lr 1e-4 bsz 64, PT lr 1e-3 bsz 128), causal SPT pooling last
    arms = lra_transformers.paper_arms("listops")
    assert (arms["masked"].train.lr, arms["masked"].train.batch_size) == (1e-4, 64)
    assert (arms["masked"].pretrain.lr, arms["masked"].pretrain.batch_size) == (1e-3, 128)
    assert arms["causal"].model.causal and arms["causal"].objective.kind == "causal"
    assert arms["masked"].objective.mask_ratio == 0.1
    # C.1.2: PathX-256 S4 with max pooling at 65,536 tokens; PT lr 1e-3 batch 8
    spt, scratch = transformers_vs_s4.pathx256_s4()
    assert spt.model.max_len == 65536 and spt.model.pooling == "max"
    assert (spt.pretrain.lr, spt.pretrain.batch_size, scratch.train.lr) == (1e-3, 8, 1e-4)
    # C.1.4: fixed pretraining steps per task across fractions
    assert data_scales.paper_arms("text")["spt"].pretrain.max_steps == 40_000
    assert data_scales.paper_arms("image")["spt"].pretrain.max_steps == 10_000
    # Table 9: the 3M models are Table 2's (d=256 Transformer, d=512 S4)
    arms = model_scales.paper_arms(3e6)
    assert arms["transformer", "spt"].model.d_model == 256
    assert arms["s4", "spt"].model.d_model == 512


def test_width_for_params_picks_the_closest_width():
    from spt.config import ModelConfig
    from spt.studies.model_scales import _count, resize, width_for_params
    base = ModelConfig(d_model=64, n_layers=2, n_heads=2, d_ff=128, max_len=64)
    cfg, n = width_for_params(base, 50_000)
    assert cfg.d_model % 16 == 0 and cfg.d_ff == 2 * cfg.d_model and n == _count(cfg, 1, 10)
    for d in range(16, 400, 16):  # no multiple of 16 is closer to the target
        assert abs(_count(resize(base, d), 1, 10) - 50_000) >= abs(n - 50_000)
