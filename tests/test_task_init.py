"""Task-dependent initialisation by power-spectrum matching (SSMConfig.task_init, our reading of
Chen & Chen 2025): the spectra on hand-computed cases, the fit, the config and the training hook."""
import copy
import math

import pytest
import torch

import spt.train.runs as runs
from spt.config import ObjectiveConfig, TrainConfig
from spt.data.lagged import lagged_task
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models.model import build_layers, classifier_model
from spt.models.task_init import FITTED, first_layer_inputs, input_spectrum, kernel_spectrum, match_spectrum_
from spt.ssm_config import SSMConfig


def test_a_cosine_puts_half_its_power_in_its_bin():
    # cos(2 pi k t / L) over L samples, zero-padded to 2L: bin 2k holds (L/2)^2 of the one-sided
    # total L^2 / 2 (Parseval), the rest leaks into odd bins only (the length-L window's
    # transform vanishes at even offsets); bin 0 (the mean) is left out, so index = bin - 1
    L, k = 32, 3
    t = torch.arange(L, dtype=torch.float64)
    u = torch.cos(2 * math.pi * k * t / L)[None, :, None].repeat(2, 1, 3)
    spec = input_spectrum(u)
    assert spec.shape == (L,)
    torch.testing.assert_close(spec.sum(), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(spec[2 * k - 1], torch.tensor(0.5, dtype=torch.float64))
    even = torch.arange(2, L + 1, 2)
    assert spec[even[even != 2 * k] - 1].abs().max() < 1e-12
    # an offset is removed by the centring
    torch.testing.assert_close(input_spectrum(u + 5.0), spec)


def test_white_noise_has_the_spectrum_centring_leaves_it():
    # E|X_f|^2 of centred white noise on the 2L grid: L at even bins, L - 1 / (L sin^2(pi f / 2L))
    # at odd bins (the mean's own transform is removed); nearly flat away from the lowest bins
    torch.manual_seed(0)
    L = 32
    spec = input_spectrum(torch.randn(512, L, 8))
    f = torch.arange(1, L + 1, dtype=torch.float64)
    want = torch.where(f % 2 == 0, torch.full_like(f, L),
                       L - 1 / (L * torch.sin(math.pi * f / (2 * L)) ** 2))
    want = want / want.sum()
    assert ((spec - want).abs() / want).max() < 0.1
    assert ((spec[L // 4:] - 1 / L).abs() * L).max() < 0.1


def test_padded_positions_do_not_count():
    torch.manual_seed(1)
    u = torch.randn(4, 20, 3)
    valid = torch.ones(4, 20, dtype=torch.bool)
    valid[:, 12:] = False
    garbage = u.clone()
    garbage[:, 12:] = 100.0
    torch.testing.assert_close(input_spectrum(garbage, valid), input_spectrum(u, valid))
    zeroed = u[:, :12] - u[:, :12].mean(1, keepdim=True)
    padded = torch.cat([zeroed, torch.zeros(4, 8, 3)], 1)
    torch.testing.assert_close(input_spectrum(u, valid), input_spectrum(padded))


def test_a_delta_kernel_has_a_flat_spectrum_and_the_backward_kernel_sits_at_negative_lags():
    L, H = 16, 4
    delta = torch.zeros(1, H, L)
    delta[0, :, 0] = 1.0
    flat = torch.full((L,), 1.0 / L)
    torch.testing.assert_close(kernel_spectrum(delta), flat)
    torch.testing.assert_close(kernel_spectrum(torch.cat([delta, torch.zeros(1, H, L)])), flat)
    # forward delta at lag 0 and backward delta at lag -1: |1 + e^{iw}|^2 = 4 cos^2(w / 2)
    both = kernel_spectrum(torch.cat([delta, delta]))
    w = math.pi * torch.arange(1, L + 1) / L
    want = 4 * torch.cos(w / 2) ** 2
    torch.testing.assert_close(both, want / want.sum())


@pytest.mark.parametrize("kind,causal", [("s4d", False), ("s4", False), ("s4d", True)])
def test_the_fit_lowers_the_loss_and_changes_only_the_first_blocks_fitted_parameters(kind, causal):
    torch.manual_seed(2)
    L, H = 32, 4
    layers = build_layers(SSMConfig(kind=kind, d_model=H, n_layers=2, d_state=8, max_len=L,
                                    causal=causal))
    before = copy.deepcopy(layers.state_dict())
    walk = torch.randn(16, L, H).cumsum(1)  # a random walk: power ~ 1 / w^2, low-pass
    twin = copy.deepcopy(layers)
    r = match_spectrum_(layers.blocks[0], walk, steps=50)
    assert r["loss_after"] < 0.5 * r["loss_before"], r
    after = layers.state_dict()
    fitted = {f"blocks.0.kernel.{n}" for n in FITTED}
    for name, value in before.items():
        if name in fitted:
            assert not torch.equal(value, after[name]), name
        else:
            assert torch.equal(value, after[name]), name
    assert all(p.grad is None for p in layers.parameters())
    # deterministic: the same fit from the same init gives the same parameters
    assert match_spectrum_(twin.blocks[0], walk, steps=50) == r
    for name, value in after.items():
        assert torch.equal(value, twin.state_dict()[name]), name


def test_the_fit_refuses_a_block_without_state_space_parameters():
    layers = build_layers(SSMConfig(kind="dlr", d_model=4, n_layers=1, d_state=4, max_len=8))
    with pytest.raises(TypeError, match="S4 / S4D"):
        match_spectrum_(layers.blocks[0], torch.randn(2, 8, 4))


def test_the_config_checks_task_init_and_round_trips():
    with pytest.raises(ValueError, match=r"task_init='fourier' is not one of \[None, 'spectrum'\]"):
        SSMConfig(kind="s4d", task_init="fourier")
    with pytest.raises(ValueError, match=r"task_init='spectrum'.*kind 's4' or 's4d'.*'dlr'"):
        SSMConfig(kind="dlr", task_init="spectrum")
    cfg = SSMConfig(kind="s4d", d_model=8, task_init="spectrum")
    d = model_config_to_dict(cfg)
    assert d["task_init"] == "spectrum" and model_config_from_dict(d) == cfg
    # the default is stored as configs were before the field existed
    assert "task_init" not in model_config_to_dict(SSMConfig(kind="s4d"))
    assert model_config_from_dict(model_config_to_dict(SSMConfig())).task_init is None


@pytest.fixture(scope="module")
def task():
    return lagged_task(seq_len=31, lag=4, n_train=64, val_size=32, test_size=32)


def test_first_layer_inputs_are_the_normed_embeddings_with_padding_zeroed(task):
    torch.manual_seed(3)
    cfg = SSMConfig(kind="s4d", d_model=8, n_layers=1, d_state=8, max_len=31, norm="batch")
    model = classifier_model(cfg, task.spec)
    stats = copy.deepcopy(model.backbone.layers.blocks[0].norm.state_dict())
    u, valid = first_layer_inputs(model, task, n_examples=10)
    assert u.shape == (10, 31, 8) and valid.shape == (10, 31) and valid.all()
    # BatchNorm in training mode over the examples (its batch statistics), padding zeroed
    norm = model.backbone.layers.blocks[0].norm
    ids = torch.stack([task.train[i]["inputs"] for i in range(10)])
    emb = model.backbone.encoder(ids).reshape(-1, 8)
    want = torch.nn.functional.batch_norm(emb, None, None, norm.weight, norm.bias, training=True,
                                          eps=norm.eps)
    torch.testing.assert_close(u.reshape(-1, 8), want.detach())
    for name, value in model.backbone.layers.blocks[0].norm.state_dict().items():
        assert torch.equal(value, stats[name]), name  # running statistics untouched


def test_training_runs_fit_the_first_layer_and_finetuning_does_not(task, tmp_path, monkeypatch):
    train = TrainConfig(epochs=1, max_steps=1, batch_size=32, lr=3e-3, progress=False, device="cpu",
                        seed=0)
    base = SSMConfig(kind="s4d", d_model=8, n_layers=2, d_state=8, max_len=31)
    tdi = SSMConfig(kind="s4d", d_model=8, n_layers=2, d_state=8, max_len=31, task_init="spectrum")
    calls = []

    def spy(model, model_cfg, task):  # the real fit, shortened to 30 steps
        out = real(model, model_cfg, task, steps=30)
        calls.append(out)
        return out

    real = runs.apply_task_init_
    monkeypatch.setattr(runs, "apply_task_init_", spy)
    plain = runs.train_from_scratch(task, base, train, tmp_path / "plain")
    fitted = runs.train_from_scratch(task, tdi, train, tmp_path / "tdi")
    assert calls[0] is None and calls[1]["loss_after"] < calls[1]["loss_before"]
    dt = [r.model.backbone.layers.blocks[0].kernel.log_dt for r in (plain, fitted)]
    assert not torch.equal(dt[0], dt[1])
    assert 0.0 <= fitted.test_metrics["accuracy"] <= 1.0
    calls.clear()
    pt = runs.pretrain(task, tdi, ObjectiveConfig(kind="masked", mask_ratio=0.15, loss="ce"),
                       train, tmp_path / "pt")
    assert len(calls) == 1 and calls[0]["loss_after"] < calls[0]["loss_before"]
    assert pt.model.backbone.layers.blocks[0].kernel.log_dt.isfinite().all()
    runs.finetune(task, tmp_path / "pt" / "best.pt", train, tmp_path / "ft")
    assert len(calls) == 1  # finetuning loads the pretrained backbone: no fit
