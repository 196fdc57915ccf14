"""Your own layer through the study runner: the quickstart (study 00), an LRA comparison (study 02)
and the data-scale study (04) take `models={name: config}` and give your model the protocol of the
preset's own (same task, pretraining, finetuning, scratch); the dry run takes it too.

The layer is defined here, in a test module, as a researcher would in their own file; its import
path is ``test_your_model:MixLayer`` (tests/studies is on sys.path under pytest).
"""
import numpy as np
import pytest
import torch
import torch.nn as nn

from spt.layer_config import LayerConfig
from spt.models.model import SequenceModel
from spt.studies import data_scales, quickstart, transformers_vs_s4
from spt.studies.commands.check import check
from spt.studies.machinery.job import GridPreset
from spt.studies.machinery.yours import with_models


class MixLayer(nn.Module):
    """A researcher's layer: a learned decaying average over the past (or both ways), gated."""

    def __init__(self, d_model, causal=False, decay=0.9):
        super().__init__()
        self.causal = causal
        self.logit = nn.Parameter(torch.full((d_model,), float(np.log(decay / (1 - decay)))))
        self.gate, self.out = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def past(self, x):                                      # sum over k >= 0 of a^k x[t - k]
        L, n = x.shape[1], 2 * x.shape[1]
        k = torch.sigmoid(self.logit) ** torch.arange(L, device=x.device).float()[:, None]  # (L, D)
        return torch.fft.irfft(torch.fft.rfft(x, n, dim=1) * torch.fft.rfft(k, n, dim=0), n, dim=1)[:, :L]

    def forward(self, x, valid=None):                        # x (B, L, D) -> (B, L, D)
        y = self.past(x) if self.causal else self.past(x) + self.past(x.flip(1)).flip(1) - x
        return self.out(y * torch.sigmoid(self.gate(x)))


MINE = LayerConfig(layer=MixLayer, d_model=16, n_layers=1, kwargs={"decay": 0.8})


def test_the_layer_is_found_by_its_import_path():
    assert MINE.layer.endswith(":MixLayer")


def test_with_models_copies_the_like_models_arms_with_your_config():
    p = transformers_vs_s4.smoke()
    q = with_models(p, {"mine": MINE}, "02")
    added = q.entries[len(p.entries):]
    like = [e for e in p.entries if dict(e.coords)["model"] == "transformer"]
    assert len(added) == len(like) > 0
    for a, e in zip(added, like):
        assert dict(a.coords) == {**dict(e.coords), "model": "mine"}
        assert a.job.model.layer == MINE.layer and a.job.model.max_len == e.job.model.max_len
        assert (a.job.train, a.job.pretrain, a.job.objective) == (e.job.train, e.job.pretrain,
                                                                    e.job.objective)
    with pytest.raises(ValueError, match="'s4' is one of the preset's own"):
        with_models(p, {"s4": MINE}, "02")
    with pytest.raises(TypeError, match="must be a model config"):
        with_models(p, {"mine": MixLayer}, "02")
    # a study without a model coordinate gets one, its own entries named by their model
    d = with_models(data_scales.smoke(), {"mine": MINE}, "04")
    assert isinstance(d, GridPreset)
    assert {dict(e.coords)["model"] for e in d.entries} == {"s4", "mine"}
    assert [k for k, _ in d.entries[0].coords][:2] == ["task", "model"]


def test_quickstart_runs_your_layer_beside_the_transformer(tmp_path):
    ds = quickstart.STUDY.run(quickstart.SMOKE, tmp_path, seeds=[0], models={"mine": MINE})
    assert set(ds.model.values) == {"transformer", "mine"}
    assert np.isfinite(ds.test_accuracy.values).all()
    assert (ds.pretrain_steps.sel(model="mine") > 0).all()
    table = quickstart.summary_table(ds)
    assert ("mine", "spt - scratch") in table.index
    # the SPT run's checkpoint is an ordinary hub model that rebuilds your layer by its path
    best = next(p for p in tmp_path.rglob("finetune/best.pt") if "mine" in str(p))
    from spt.hub import export_checkpoint, load_model
    export_checkpoint(best, tmp_path / "hub", trust_remote_code=True)
    model = load_model(tmp_path / "hub", trust_remote_code=True)
    assert isinstance(model, SequenceModel)
    assert type(model.backbone.layers.blocks[0].layer).__name__ == "MixLayer"


def test_lra_comparison_runs_your_layer(tmp_path):
    ds = transformers_vs_s4.STUDY.run("smoke", tmp_path, tasks=["digits"], models={"mine": MINE})
    assert set(ds.model.values) == {"transformer", "s4", "mine"}
    acc = ds.test_accuracy.sel(model="mine", task="digits")
    assert acc.sizes["init"] == 2 and np.isfinite(acc.values).all()


def test_dry_run_takes_your_model(tmp_path):
    from spt.data.fixtures import write_fixtures
    write_fixtures(tmp_path)
    results = check("02_transformers_vs_s4", data_root=str(tmp_path), device="cpu",
                    only="task=image model=mine init=spt", models={"mine": MINE}, log=lambda s: None)
    assert len(results) == 1 and results[0].ok, results[0].error
    assert results[0].seq_len == 1024


def test_notebook_12_runs_at_smoke_with_your_layer_and_documents_its_parameters(tmp_path):
    """notebooks/12_your_architecture.ipynb at preset=smoke, with this module's layer: a table and
    figures for the Transformer, S4, SGConv and your model; every parameter documented."""
    papermill = pytest.importorskip("papermill")
    from pathlib import Path

    from spt.studies.commands.runner import notebook_parameters
    from spt.studies.machinery.cells import load_study

    nb_path = Path(__file__).resolve().parents[2] / "notebooks" / "12_your_architecture.ipynb"
    params = notebook_parameters(nb_path)
    assert {"preset", "layer", "layer_kwargs", "bidirectional", "seeds", "out_dir"} <= set(params)
    assert all(p["help"].strip() for p in params.values())
    out = tmp_path / "out"
    nb = papermill.execute_notebook(
        str(nb_path), str(tmp_path / "12.ipynb"), kernel_name="python3", progress_bar=False,
        cwd=str(Path(__file__).parent),
        parameters={"preset": "smoke", "layer": "test_your_model:MixLayer",
                    "layer_kwargs": {"decay": 0.7}, "name": "mine", "out_dir": str(out)})
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 2
    ds = load_study(out, "00_quickstart")
    assert set(ds.model.values) == {"transformer", "s4", "sgconv", "mine"}
    assert np.isfinite(ds.test_accuracy.values).all()


def test_every_arm_of_the_lra_study_takes_your_layer_causal_one_included(tmp_path):
    """Study 01 has a causal SPT arm: your layer runs there causal (a bidirectional model would
    see the token it predicts), and a layer spec (the JSON form the CLI carries) is sized like
    the preset's Transformer."""
    from spt.studies import lra_transformers
    from spt.studies.machinery.cells import run_cells
    from spt.studies.machinery.study import preset_cells

    spec = {"layer": "test_your_model:MixLayer", "kwargs": {"decay": 0.8}}
    p = with_models(lra_transformers.smoke(), {"mine": spec}, "01")
    mine = {dict(e.coords)["init"]: e.job.model for e in p.entries
            if dict(e.coords)["model"] == "mine" and dict(e.coords)["task"] == "digits"}
    tf = next(e.job.model for e in p.entries if dict(e.coords)["model"] == "transformer")
    assert set(mine) == {"scratch", "masked", "causal"}
    assert mine["causal"].causal and not mine["masked"].causal and not mine["scratch"].causal
    assert {(m.d_model, m.n_layers, m.dropout, m.pooling) for m in mine.values()} == \
        {(tf.d_model, tf.n_layers, tf.dropout, tf.pooling)}
    assert dict(mine["masked"].kwargs) == {"decay": 0.8}
    cells = [c for c in preset_cells(p) if c.coords["model"] == "mine"
             and c.coords["task"] == "digits" and c.coords["init"] == "causal"]
    ds = run_cells("01", cells, tmp_path, log=lambda s: None)
    assert np.isfinite(ds.test_accuracy.values).all() and (ds.pretrain_steps > 0).all()
    with pytest.raises(ValueError, match=r"models\['bad'\].*unknown key"):
        with_models(lra_transformers.smoke(), {"bad": {"layer": "a:B", "size": 3}}, "01")


def test_spt_study_run_takes_your_model(tmp_path, capsys):
    from spt.cli import main
    from spt.studies.cli import _models

    assert _models(["mine=my_layers:MyLayer", 'm2={"layer": "a.b:C", "bidirectional": true}']) == \
        {"mine": "my_layers:MyLayer", "m2": {"layer": "a.b:C", "bidirectional": True}}
    for bad in (["my_layers:MyLayer"], ["1x=a:B"], ["m=a:B", "m=c:D"]):
        with pytest.raises(ValueError, match="--model"):
            _models(bad)
    # a study whose notebook has no `models` parameter says which ones do, before running
    rc = main(["study", "run", "06_kernel_decay", "--model", "mine=a:B", "--out", str(tmp_path)])
    assert rc == 2 and "04_data_scales" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_layer_that_cannot_be_imported_or_built_is_refused_before_any_cell_runs(tmp_path,
                                                                                  capsys):
    """`--model mine=nosuch:Layer` fails at the parameter check, not after the study's own cells."""
    from spt.cli import main
    from spt.studies import lra_transformers

    for spec, says in [("nosuch:Layer", "no module named 'nosuch'"),
                       ("test_your_model:NoSuch", "has no attribute 'NoSuch'"),
                       ({"layer": "test_your_model:MixLayer", "kwargs": {"decai": 0.8}},
                        "building layer test_your_model.MixLayer")]:
        with pytest.raises(ValueError, match=r"models\['mine'\]: .*" + says):
            with_models(lra_transformers.smoke(), {"mine": spec}, "01")
    rc = main(["study", "run", "02_transformers_vs_s4", "--model", "mine=nosuch:Layer",
               "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "no module named 'nosuch'" in err, err
    assert not list(tmp_path.iterdir())  # no kernel started, no cell ran
