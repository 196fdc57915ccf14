"""Masked and causal denoising: which positions are masked, what the model sees, what is scored."""
import pytest
import torch

from spt.config import ObjectiveConfig
from spt.data.task import MASK_ID, PAD_ID, TaskSpec
from spt.train.objectives import Denoising, Supervised, sample_mask

TOK = TaskSpec("tok", seq_len=64, num_classes=3, vocab_size=12)
CONT = TaskSpec("cont", seq_len=64, num_classes=3, d_input=2)


def padded_tokens(lengths, L=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(4, 12, (len(lengths), L), generator=g)
    valid = torch.arange(L)[None] < torch.tensor(lengths)[:, None]
    return {"inputs": x.masked_fill(~valid, PAD_ID), "valid": valid,
            "label": torch.zeros(len(lengths), dtype=torch.long)}


@pytest.mark.parametrize("ratio", [0.1, 0.15, 0.5])
def test_mask_has_exact_count_and_never_touches_padding(ratio):
    lengths = [50, 33, 7, 1]
    valid = torch.arange(50)[None] < torch.tensor(lengths)[:, None]
    g = torch.Generator().manual_seed(0)
    m = sample_mask(valid, ratio, g)
    assert not (m & ~valid).any()
    expected = [max(1, round(ratio * n)) for n in lengths]
    assert m.sum(1).tolist() == expected


def test_mask_positions_are_uniform():
    valid = torch.ones(4000, 20, dtype=torch.bool)
    m = sample_mask(valid, 0.25, torch.Generator().manual_seed(0))
    freq = m.float().mean(0)  # each position masked with probability 0.25
    assert (freq - 0.25).abs().max() < 0.03


def test_masked_tokens_become_the_mask_id_and_the_rest_is_untouched():
    obj = Denoising(ObjectiveConfig("masked", 0.15, "ce"), TOK)
    batch = padded_tokens([50, 30])
    inputs, masked, targets, at = obj.corrupt(batch, torch.Generator().manual_seed(0))
    assert (inputs[masked] == MASK_ID).all()
    assert torch.equal(inputs[~masked], batch["inputs"][~masked])
    assert torch.equal(targets, batch["inputs"]) and torch.equal(at, masked)
    assert (inputs[~batch["valid"]] == PAD_ID).all()


def test_continuous_masking_zeroes_values_and_sets_the_flag():
    obj = Denoising(ObjectiveConfig("masked", 0.5, "l1"), CONT)
    x = torch.randn(2, 10, 2) + 5
    batch = {"inputs": x, "valid": torch.ones(2, 10, dtype=torch.bool)}
    inputs, masked, targets, _ = obj.corrupt(batch, torch.Generator().manual_seed(0))
    assert masked.sum().item() == 10
    assert (inputs[masked] == 0).all() and (inputs[~masked] == x[~masked]).all()
    assert torch.equal(targets, x)


class Recorder(torch.nn.Module):
    """A fake model that returns a fixed prediction and records what it was given."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, inputs, valid=None, masked=None):
        self.seen = (inputs, valid, masked)
        return self.out


def test_masked_loss_counts_masked_positions_only():
    obj = Denoising(ObjectiveConfig("masked", 0.15, "ce"), TOK)
    batch = padded_tokens([50, 30])
    out = torch.randn(2, 50, 12)
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    loss1, stats = obj.step(Recorder(out), batch, g())
    masked = Recorder(out)
    obj.step(masked, batch, g())
    m = masked.seen[2]
    out2 = out.clone()
    out2[~m] = torch.randn_like(out2[~m]) * 100  # predictions off the masked positions are ignored
    loss2, _ = obj.step(Recorder(out2), batch, g())
    torch.testing.assert_close(loss1, loss2)
    expected = torch.nn.functional.cross_entropy(out[m], batch["inputs"][m])
    torch.testing.assert_close(loss1, expected)
    assert stats["n"].item() == m.sum().item() == round(0.15 * 50) + round(0.15 * 30)


@pytest.mark.parametrize("spec,loss", [(TOK, "ce"), (CONT, "l1")])
def test_causal_targets_are_next_inputs_and_the_last_position_is_ignored(spec, loss):
    obj = Denoising(ObjectiveConfig("causal", loss=loss), spec)
    if spec.is_tokens:
        batch = padded_tokens([6, 4], L=6)
    else:
        x = torch.randn(2, 6, 2)
        batch = {"inputs": x, "valid": torch.arange(6)[None] < torch.tensor([6, 4])[:, None]}
    inputs, masked, targets, at = obj.corrupt(batch)
    assert masked is None and torch.equal(inputs, batch["inputs"])
    assert at.tolist() == [[True] * 5 + [False], [True] * 3 + [False] * 3]
    torch.testing.assert_close(targets[:, :-1], batch["inputs"][:, 1:])
    out_dim = 12 if spec.is_tokens else 2
    out = torch.randn(2, 6, out_dim)
    l1, st = obj.step(Recorder(out), batch)
    out2 = out.clone()
    out2[0, 5], out2[1, 3:] = 1e4, 1e4  # last real position and padding: never scored
    l2, _ = obj.step(Recorder(out2), batch)
    torch.testing.assert_close(l1, l2)
    assert st["n"].item() == 8


def test_objective_and_task_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="loss='l1'"):
        Denoising(ObjectiveConfig("masked", 0.5, "ce"), CONT)
    with pytest.raises(ValueError, match="mask_ratio"):
        ObjectiveConfig("masked", 1.5)


def test_supervised_regression_reports_r2():
    spec = TaskSpec("reg", seq_len=8, num_classes=None, d_input=1)
    obj = Supervised(spec)
    y = torch.tensor([0.5, -0.5, 1.0, 0.0])
    batch = {"inputs": torch.zeros(4, 3, 1), "valid": torch.ones(4, 3, dtype=torch.bool), "label": y}
    _, stats = obj.step(Recorder(y[:, None].clone()), batch)
    assert obj.metrics(stats)["r2"] == pytest.approx(1.0)
    _, stats = obj.step(Recorder(torch.full((4, 1), y.mean().item())), batch)
    assert obj.metrics(stats)["r2"] == pytest.approx(0.0, abs=1e-6)


def test_pretraining_selects_on_validation_loss_not_accuracy():
    """Masked accuracy rewards the trivial all-background model on pixel tokens; loss does not."""
    obj = Denoising(ObjectiveConfig("masked", 0.5, "ce"), TOK)
    assert obj.score == "loss" and obj.higher_is_better is False
    assert Supervised(TOK).score == "accuracy" and Supervised(TOK).higher_is_better
