"""Pathfinder / PathX / PathX-256 as the paper's models read them: pixels in [-1, 1] through a
linear encoder, self-pretrained with CE over the 256 intensities of the masked pixels.

PathX-256's preset (PathX's S4, C.1.2) pretrains with CE on continuous pixels: the last test runs
that arm end to end at 65,536 pixels (the paper's headline S4 result, Table 2: 87.11).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from spt.config import ObjectiveConfig, replace
from spt.data.fixtures import write_fixtures
from spt.data.registry import load_task
from spt.data.task import TaskSpec
from spt.models.model import pretraining_model
from spt.studies import transformers_vs_s4
from spt.studies.commands.check import DryRun
from spt.studies.machinery.arms import run_arm
from spt.train.objectives import Denoising


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = tmp_path_factory.mktemp("fx")
    write_fixtures(r, tasks=["pathfinder", "pathx256"])
    return r


def test_levels_invert_the_pixel_scaling(root):
    task = load_task("pathfinder", root)
    assert task.spec.levels == 256 and task.spec.d_input == 1
    raw = load_task("pathfinder", root, tokens=True).train[0]["inputs"] - 4  # ids 4 + pixel
    values = task.train[0]["inputs"][:, 0]
    assert torch.equal(task.spec.level_of(values), raw)


def test_ce_pretraining_on_continuous_pixels_predicts_the_masked_intensity():
    spec = TaskSpec("px", seq_len=16, num_classes=2, d_input=1, levels=256)
    obj = Denoising(ObjectiveConfig(kind="masked", mask_ratio=0.5, loss="ce"), spec)
    pixels = torch.randint(0, 256, (3, 16))
    batch = {"inputs": (pixels / 127.5 - 1)[..., None], "valid": None}
    seen = {}

    def model(inputs, valid, masked):
        seen["inputs"], seen["masked"] = inputs, masked
        logits = torch.full((3, 16, 256), -10.0)
        return logits.scatter(-1, pixels[..., None], 10.0)  # a perfect predictor

    loss, stats = obj.step(model, batch, torch.Generator().manual_seed(0))
    assert float(stats["correct"]) == float(stats["n"]) == 24  # 8 of 16 masked per row
    assert loss < 1e-3
    assert (seen["inputs"][seen["masked"]] == 0).all()  # masked values zeroed, flag channel set


def test_continuous_ce_needs_levels():
    spec = TaskSpec("audio", seq_len=8, num_classes=2, d_input=1)
    with pytest.raises(ValueError, match="levels"):
        Denoising(ObjectiveConfig(kind="masked", loss="ce"), spec)


def test_pathx256_s4_arm_pretrains_and_finetunes_at_65536_pixels(root, tmp_path):
    """Study 02's PathX-256 S4 arm (C.1.2), narrowed to 8 channels for a CPU test: one step of
    CE pretraining at 65,536 pixels, then finetuning from that checkpoint."""
    arm = transformers_vs_s4.paper_arms("pathx256")["s4", "spt"]
    assert arm.objective.loss == "ce" and arm.model.max_len == 256 * 256
    arm = dataclasses.replace(arm, model=replace(arm.model, d_model=8, n_layers=1))
    dry = DryRun(batch=1, device="cpu")
    task = dry.ref(transformers_vs_s4.task_ref("pathx256", str(root))).load()
    assert task.spec.seq_len == 65536 and task.spec.levels == 256
    model = pretraining_model(arm.model, task.spec, arm.objective)
    assert model.head.proj.out_features == 256
    ds = run_arm(task, dry.arm(arm).at(seed=0), run_dir=tmp_path / "run")
    assert np.isfinite(float(ds["pretrain_val_loss"])) and float(ds["seq_len"]) == 65536
