"""pretrain / finetune / train_from_scratch: checkpoints, strict backbone loading, resume, NaN."""
import math

import pytest
import torch
import xarray as xr

from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.train import NonFiniteLossError, finetune, pretrain, train_from_scratch
from spt.train.optim import lr_factor, param_groups

MODEL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.1, max_len=64)
OBJ = ObjectiveConfig("masked", 0.5, "l1")


@pytest.fixture(scope="module")
def task():
    return digits_task(size=8, n_train=48, val_size=40, test_size=40)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=2, progress=False, seed=0), **kw})


def test_pretrain_then_finetune_loads_exactly_the_pretrained_backbone(task, tmp_path):
    pt = pretrain(task, MODEL, OBJ, cfg(), tmp_path / "pt")
    assert isinstance(pt.history, xr.Dataset) and pt.history.sizes["epoch"] == 2
    assert pt.steps == 2 * 3 and (tmp_path / "pt" / "best.pt").exists()
    saved = torch.load(pt.best_checkpoint, weights_only=False)["model"]

    ft = finetune(task, pt.best_checkpoint, cfg(epochs=1, lr=1e-12, grad_clip=None), tmp_path / "ft")
    # with a ~zero learning rate the finetuned backbone must equal the pretrained one
    for name, p in ft.model.backbone.state_dict().items():
        torch.testing.assert_close(p, saved[f"backbone.{name}"], rtol=0, atol=1e-8, msg=name)
    assert ft.model.head.mlp[-1].out_features == 10
    assert not any(k.startswith("head.mlp") for k in saved)  # the token head was replaced
    assert set(ft.test_metrics) == {"loss", "accuracy"}


def test_finetune_rejects_a_mismatched_checkpoint(task, tmp_path):
    pt = pretrain(task, MODEL, OBJ, cfg(epochs=1), tmp_path / "pt")
    ck = torch.load(pt.best_checkpoint, weights_only=False)
    del ck["sha256"]  # a file made for another model, not a damaged one
    ck["model"]["backbone.layers.blocks.0.ff.0.weight"] = torch.zeros(7, 16)
    del ck["model"]["backbone.layers.norm.bias"]
    bad = tmp_path / "bad.pt"
    torch.save(ck, bad)
    with pytest.raises(ValueError) as e:
        finetune(task, bad, cfg(epochs=1), tmp_path / "ft")
    msg = str(e.value)
    assert "layers.norm.bias" in msg and "ff.0.weight" in msg and "(7, 16)" in msg
    other = digits_task(size=8, n_train=48, val_size=40, test_size=40)
    from dataclasses import replace
    other.spec = replace(other.spec, d_input=2)
    with pytest.raises(ValueError, match="d_input"):
        finetune(other, pt.best_checkpoint, cfg(epochs=1), tmp_path / "ft2")
    with pytest.raises(FileNotFoundError, match="pretrain"):
        finetune(task, tmp_path / "nowhere.pt", cfg(), tmp_path / "ft3")


def _interrupt_at(step_to_fail):
    def on_step(step):
        if step == step_to_fail:
            raise KeyboardInterrupt("simulated kill")
    return on_step


@pytest.mark.parametrize("kill_step,ckpt_every", [(4, None), (5, 2)])
def test_killed_run_resumes_to_the_same_weights(task, tmp_path, kill_step, ckpt_every):
    c = cfg(epochs=3, ckpt_every=ckpt_every, accum_steps=1)
    full = pretrain(task, MODEL, OBJ, c, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        pretrain(task, MODEL, OBJ, c, tmp_path / "killed", on_step=_interrupt_at(kill_step))
    resumed = pretrain(task, MODEL, OBJ, c, tmp_path / "killed", resume=True)
    last_full = torch.load(tmp_path / "full" / "last.pt", weights_only=False)["model"]
    last_res = torch.load(tmp_path / "killed" / "last.pt", weights_only=False)["model"]
    for k in last_full:
        torch.testing.assert_close(last_res[k], last_full[k], rtol=0, atol=0, msg=k)
    assert resumed.steps == full.steps == 9
    xr.testing.assert_allclose(resumed.history[["val_loss", "val_r2"]],
                               full.history[["val_loss", "val_r2"]])


def test_existing_run_is_never_overwritten_without_resume(task, tmp_path):
    train_from_scratch(task, MODEL, cfg(epochs=1), tmp_path / "run")
    before = (tmp_path / "run" / "best.pt").read_bytes()
    with pytest.raises(FileExistsError, match="resume=True"):
        train_from_scratch(task, MODEL, cfg(epochs=1), tmp_path / "run")
    assert (tmp_path / "run" / "best.pt").read_bytes() == before


def test_nan_loss_stops_the_run_and_keeps_the_best_checkpoint(task, tmp_path):
    def poison(step):  # after 4 good steps (one epoch and a bit), make the weights NaN
        if step == 4:
            with torch.no_grad():
                for p in model_ref["m"].parameters():
                    p.fill_(math.nan)

    import spt.train.engine as engine
    orig = engine.build_optimizer
    model_ref = {}

    def spy(model, c):
        model_ref["m"] = model
        return orig(model, c)

    engine.build_optimizer = spy
    try:
        with pytest.raises(NonFiniteLossError, match="not overwritten"):
            train_from_scratch(task, MODEL, cfg(epochs=3), tmp_path / "run", on_step=poison)
    finally:
        engine.build_optimizer = orig
    best = torch.load(tmp_path / "run" / "best.pt", weights_only=False)
    assert best["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in best["model"].values())


def test_early_stopping_and_max_steps(task, tmp_path):
    r = train_from_scratch(task, MODEL, cfg(epochs=50, lr=1e-9, patience=2), tmp_path / "a")
    assert r.history.sizes["epoch"] < 50
    r = pretrain(task, MODEL, OBJ, cfg(epochs=50, max_steps=5), tmp_path / "b")
    assert r.steps == 5 and r.history.sizes["epoch"] == 2


def test_gradient_accumulation_matches_a_bigger_batch(task, tmp_path):
    m = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_len=64)
    a = train_from_scratch(task, m, cfg(epochs=1, batch_size=48, grad_clip=None), tmp_path / "a")
    b = train_from_scratch(task, m, cfg(epochs=1, batch_size=16, accum_steps=3, grad_clip=None),
                           tmp_path / "b")
    # same examples, same update (the order of summation differs slightly)
    for (k, pa), pb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5, msg=k)


def test_no_weight_decay_on_norms_and_biases():
    from spt.models import classifier_model
    model = classifier_model(MODEL, digits_task(size=8, n_train=10).spec)
    groups = {g["weight_decay"]: g["names"] for g in param_groups(model, cfg(weight_decay=0.1))}
    assert all(n.endswith("bias") or "norm" in n for n in groups[0.0])
    assert all(n.endswith("weight") and "norm" not in n for n in groups[0.1])


def test_an_lr_scale_hint_multiplies_the_parameters_lr():
    lin = torch.nn.Linear(2, 2)
    lin.weight._optim = {"lr_scale": 0.5, "weight_decay": 0.0}
    lin.bias._optim = {"lr": 1e-2, "lr_scale": 0.25}
    lrs = {g["names"][0]: (g["lr"], g["weight_decay"]) for g in param_groups(lin, cfg(lr=2e-3))}
    assert lrs == {"weight": (1e-3, 0.0), "bias": (2.5e-3, 0.0)}
    lin.bias._optim = {"lr_factor": 0.5}
    with pytest.raises(ValueError, match="'lr', 'lr_scale' and 'weight_decay'"):
        param_groups(lin, cfg())


def test_lr_schedule_warmup_then_cosine():
    assert lr_factor(0, 100, 10, "cosine") == pytest.approx(0.1)
    assert lr_factor(9, 100, 10, "cosine") == pytest.approx(1.0)
    assert lr_factor(55, 100, 10, "cosine") == pytest.approx(0.5)
    assert lr_factor(100, 100, 10, "cosine") == pytest.approx(0.0)
    assert lr_factor(80, 100, 10, "constant") == 1.0
