"""The LRU's mixer (its complex scan is tested in tests/test_scan.py): the paper's
initialisation, the mixer both ways against its loop path, padding, causality, the optimiser
hints, and a classifier built from LRUConfig."""

import pytest
import torch
from mixer_checks import causal_or_both_ways, padded_batch, padding_safe, same_outputs_and_grads, with_paths

from spt.data.task import TaskSpec
from spt.mixer_config import LRUConfig
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models.mixers.lru import LRUCore
from spt.models.mixers.stack import mixer_layer
from spt.models.model import classifier_model

D = 16


def test_initial_eigenvalues_fill_the_ring_and_gamma_normalises():
    torch.manual_seed(0)
    core = LRUCore(8, 4000, r_min=0.4, r_max=0.9, max_phase=3.0, recurrent_lr_scale=0.5)
    modulus = torch.exp(-torch.exp(core.nu_log))
    phase = torch.exp(core.theta_log)
    assert 0.4 <= modulus.min() and modulus.max() <= 0.9
    assert 0.0 <= phase.min() and phase.max() <= 3.0
    # uniform on the ring (area): |lambda|^2 is uniform on [r_min^2, r_max^2]
    assert abs((modulus ** 2).mean().item() - (0.4 ** 2 + 0.9 ** 2) / 2) < 0.01
    assert abs(phase.mean().item() - 1.5) < 0.1
    torch.testing.assert_close(torch.exp(core.gamma_log), torch.sqrt(1 - modulus ** 2))


def test_one_mode_by_hand():
    """N = 1, D = 1: x_t = lambda x_{t-1} + gamma B u_t, y_t = Re(C x_t) + D u_t."""
    torch.manual_seed(3)
    core = LRUCore(1, 1, 0.5, 0.6, 1.0, recurrent_lr_scale=0.5)
    lam = torch.exp(torch.complex(-torch.exp(core.nu_log), torch.exp(core.theta_log)))[0]
    gamma, B = torch.exp(core.gamma_log)[0], torch.complex(core.B_re, core.B_im)[0, 0]
    C, Dskip = torch.complex(core.C_re, core.C_im)[0, 0], core.D[0]
    u = torch.tensor([[[1.0], [0.0], [2.0]]])
    x1 = gamma * B
    x2 = lam * x1
    x3 = lam * x2 + gamma * B * 2
    expected = torch.stack([(C * x).real for x in (x1, x2, x3)]) + Dskip * u[0, :, 0]
    torch.testing.assert_close(core(u, None)[0, :, 0], expected.detach())


@pytest.mark.parametrize("causal", [True, False])
def test_fast_path_equals_reference_padded_both_directions(causal):
    torch.manual_seed(0)
    mixer = mixer_layer(LRUConfig(d_model=D, causal=causal, d_state=8, r_min=0.5))
    x, valid = padded_batch(D)
    same_outputs_and_grads(mixer, with_paths(mixer, "ref"), x, valid)


@pytest.mark.parametrize("causal", [True, False])
def test_padding_never_reaches_real_positions(causal):
    torch.manual_seed(1)
    padding_safe(mixer_layer(LRUConfig(d_model=D, causal=causal, d_state=8)), D)


def test_causal_sees_back_bidirectional_sees_both_ways():
    causal_or_both_ways(lambda c: mixer_layer(LRUConfig(d_model=D, causal=c, d_state=8)), D)


def test_no_weight_decay_on_the_recurrence_and_the_split():
    mixer = mixer_layer(LRUConfig(d_model=D, causal=False, recurrent_lr_scale=None))
    hinted = {n for n, p in mixer.named_parameters() if getattr(p, "_optim", {}).get("weight_decay") == 0.0}
    assert hinted == {f"cores.{k}.{n}" for k in (0, 1) for n in ("nu_log", "theta_log", "gamma_log")}
    assert not any("lr_scale" in getattr(p, "_optim", {}) for p in mixer.parameters())
    shared = {n for n, _ in mixer.named_parameters() if not n.startswith("cores.")}
    assert shared == {"glu.weight", "glu.bias"}
    assert mixer.cores[0].B_re.shape == (D, D)  # d_state 0: D modes


def test_recurrent_parameters_train_as_minimal_lru_trains_them():
    """minimal-LRU lru/train_helpers.py: nu_log, theta_log, gamma_log, B_re and B_im in an Adam
    group without weight decay at lr_factor (run_train.py default 0.5) times the base lr."""
    from spt.config import TrainConfig
    from spt.train.optim import build_optimizer
    mixer = mixer_layer(LRUConfig(d_model=D, causal=False))
    recurrent = {f"cores.{k}.{n}" for k in (0, 1)
                 for n in ("nu_log", "theta_log", "gamma_log", "B_re", "B_im")}
    hinted = {n for n, p in mixer.named_parameters() if hasattr(p, "_optim")}
    assert hinted == recurrent
    opt = build_optimizer(mixer, TrainConfig(lr=2e-3, weight_decay=0.05))
    names = dict(zip(map(id, mixer.parameters()), (n for n, _ in mixer.named_parameters())))
    for group in opt.param_groups:
        inside = {names[id(p)] in recurrent for p in group["params"]}
        assert len(inside) == 1
        want = (1e-3, 0.0) if inside == {True} else (2e-3, 0.05)
        if inside == {False} and all(p.ndim < 2 for p in group["params"]):
            want = (2e-3, 0.0)  # vectors: no weight decay under wd_groups "matrices"
        assert (group["lr"], group["weight_decay"]) == want
    with pytest.raises(ValueError, match="recurrent_lr_scale"):
        LRUConfig(recurrent_lr_scale=0.0)


def test_a_ring_outside_the_unit_disc_is_named():
    with pytest.raises(ValueError, match="r_max"):
        mixer_layer(LRUConfig(d_model=D, causal=True, r_min=0.5, r_max=1.0))


def test_classifier_from_config_runs_padded_and_round_trips():
    cfg = LRUConfig(d_model=32, n_layers=2)
    spec = TaskSpec("toy", seq_len=24, num_classes=3, vocab_size=12)
    torch.manual_seed(0)
    model = classifier_model(cfg, spec)
    x = torch.randint(4, 12, (2, 24))
    valid = torch.arange(24)[None, :] < torch.tensor([24, 15])[:, None]
    logits = model(x, valid)
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()
    logits.sum().backward()
    assert model_config_from_dict(model_config_to_dict(cfg)) == cfg
