"""The denoising loss trained beside the labels (TrainConfig.aux_denoise, spt.train.joint)."""
import pytest
import torch
import torch.nn.functional as F

from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.data.collate import pad_collate
from spt.data.task import MASK_ID, N_SPECIAL, PAD_ID, TaskSpec
from spt.hub import export_checkpoint
from spt.models.model import SequenceModel, classifier_model, joint_model
from spt.train import finetune, pretrain, train_from_scratch
from spt.train.joint import CORRUPT_RATIO, RANDOM_SHARE, JointDenoising, corrupt
from spt.train.objectives import Supervised, mask_positions

TOK = TaskSpec("tok", seq_len=64, num_classes=3, vocab_size=12)
CONT = TaskSpec("cont", seq_len=64, num_classes=3, d_input=2)
MODEL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_len=64)


def token_batch(lengths, L=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(N_SPECIAL, 12, (len(lengths), L), generator=g)
    valid = torch.arange(L)[None] < torch.tensor(lengths)[:, None]
    return {"inputs": x.masked_fill(~valid, PAD_ID), "valid": valid,
            "label": torch.randint(0, 3, (len(lengths),), generator=g)}


def test_corrupt_changes_only_masked_positions_a_third_to_random_symbols():
    x = torch.randint(N_SPECIAL, 12, (400, 50), generator=torch.Generator().manual_seed(1))
    masked = torch.rand(400, 50, generator=torch.Generator().manual_seed(2)) < 0.3
    out = corrupt(x, masked, TOK, torch.Generator().manual_seed(3))
    assert torch.equal(out[~masked], x[~masked])
    hit = out[masked]
    assert ((hit == MASK_ID) | ((hit >= N_SPECIAL) & (hit < 12))).all()
    share = (hit != MASK_ID).float().mean().item()  # random symbols (never <mask>)
    n = int(masked.sum())
    assert abs(share - RANDOM_SHARE) < 4 * (RANDOM_SHARE * (1 - RANDOM_SHARE) / n) ** 0.5


def test_corrupt_zeroes_masked_values():
    x = torch.randn(3, 10, 2) + 5
    masked = torch.zeros(3, 10, dtype=torch.bool)
    masked[:, ::3] = True
    out = corrupt(x, masked, CONT)
    assert (out[masked] == 0).all() and torch.equal(out[~masked], x[~masked])


def test_training_loss_is_label_ce_plus_weighted_reconstruction_at_every_real_position():
    torch.manual_seed(0)
    model = joint_model(MODEL, TOK).train()
    batch = token_batch([20, 13, 5])
    batch["masked"] = torch.zeros_like(batch["valid"])
    batch["masked"][:, :4] = True  # inside every row's real positions
    obj = JointDenoising(TOK, 0.7)
    loss, stats = obj.step(model, batch, torch.Generator().manual_seed(5))

    seen = corrupt(batch["inputs"], batch["masked"], TOK, torch.Generator().manual_seed(5))
    logits, recon = model(seen, batch["valid"], batch["masked"], aux=True)
    ce = F.cross_entropy(logits, batch["label"])
    per_row = [F.cross_entropy(recon[b, :n], batch["inputs"][b, :n], reduction="sum")
               for b, n in enumerate([20, 13, 5])]
    aux = sum(per_row) / 38
    torch.testing.assert_close(loss, ce + 0.7 * aux)
    stats = {k: v.detach() for k, v in stats.items()}
    assert obj.metrics(stats)["denoise_loss"] == pytest.approx(aux.item(), rel=1e-5)
    assert obj.metrics(stats)["loss"] == pytest.approx(ce.item(), rel=1e-5)


def test_evaluation_scores_the_classifier_on_the_clean_input():
    torch.manual_seed(0)
    model = joint_model(MODEL, TOK).eval()
    batch = token_batch([20, 9])
    loss, stats = JointDenoising(TOK, 1.0).step(model, batch)
    ref_loss, ref_stats = Supervised(TOK).step(model, batch)
    torch.testing.assert_close(loss, ref_loss)
    assert "aux_sum" not in stats and float(stats["correct"]) == float(ref_stats["correct"])


def test_joint_model_is_the_classifier_plus_one_head():
    torch.manual_seed(0)
    plain = classifier_model(MODEL, TOK)
    torch.manual_seed(0)
    joint = joint_model(MODEL, TOK)
    extra = set(joint.state_dict()) - set(plain.state_dict())
    assert extra and all(k.startswith("aux_head.") for k in extra)
    for k, v in plain.state_dict().items():  # same draws: the extra head is built last
        torch.testing.assert_close(joint.state_dict()[k], v, rtol=0, atol=0, msg=k)
    x = token_batch([20, 11])
    torch.testing.assert_close(joint.eval()(x["inputs"], x["valid"]),
                               plain.eval()(x["inputs"], x["valid"]))


@pytest.fixture(scope="module")
def digits():
    return digits_task(size=8, n_train=48, val_size=40, test_size=40, tokens=True)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=2, progress=False, seed=0), **kw})


def test_scratch_with_the_joint_loss_trains_and_exports_a_plain_classifier(digits, tmp_path):
    run = train_from_scratch(digits, MODEL, cfg(aux_denoise=1.0), tmp_path / "sc")
    h = run.history
    assert "train_denoise_loss" in h and bool((h["train_denoise_loss"] > 0).all())
    assert "val_denoise_loss" not in h  # validation scores the classifier alone
    # corrupted positions are drawn per (seed, epoch, index): the same config repeats exactly
    again = train_from_scratch(digits, MODEL, cfg(aux_denoise=1.0), tmp_path / "sc2")
    assert again.test_metrics == run.test_metrics
    out = export_checkpoint(run.best_checkpoint, tmp_path / "hub")
    loaded = SequenceModel.from_pretrained(out).eval()
    batch = pad_collate([digits.test[i] for i in range(8)])
    torch.testing.assert_close(loaded(batch["inputs"], batch.get("valid")),
                               run.model.eval()(batch["inputs"], batch.get("valid")))
    run.model.save_pretrained(tmp_path / "direct")  # the joint model saved as its classifier
    direct = SequenceModel.from_pretrained(tmp_path / "direct").eval()
    torch.testing.assert_close(direct(batch["inputs"], batch.get("valid")),
                               run.model.eval()(batch["inputs"], batch.get("valid")))


def test_the_joint_loss_changes_training(digits, tmp_path):
    plain = train_from_scratch(digits, MODEL, cfg(epochs=1), tmp_path / "a")
    joint = train_from_scratch(digits, MODEL, cfg(epochs=1, aux_denoise=1.0), tmp_path / "b")
    w = "backbone.encoder.embed.weight"
    assert not torch.equal(plain.model.state_dict()[w], joint.model.state_dict()[w])


def test_finetune_takes_the_joint_loss_and_pretraining_refuses_it(digits, tmp_path):
    obj = ObjectiveConfig("masked", 0.5, "ce")
    with pytest.raises(ValueError, match="aux_denoise"):
        pretrain(digits, MODEL, obj, cfg(aux_denoise=1.0), tmp_path / "bad")
    pt = pretrain(digits, MODEL, obj, cfg(epochs=1), tmp_path / "pt")
    ft = finetune(digits, pt.best_checkpoint, cfg(epochs=1, aux_denoise=0.5), tmp_path / "ft")
    assert "train_denoise_loss" in ft.history


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="aux_denoise"):
        TrainConfig(aux_denoise=-1.0)
    reg = TaskSpec("reg", seq_len=64, num_classes=None, d_input=1)
    with pytest.raises(ValueError, match="regression"):
        JointDenoising(reg, 1.0)


PAIR = TaskSpec("pairs", seq_len=64, num_classes=2, vocab_size=12, pair=True)


def pair_items(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"inputs": torch.randint(N_SPECIAL, 12, (20 - i,), generator=g),
             "inputs2": torch.randint(N_SPECIAL, 12, (14 - 2 * i,), generator=g),
             "label": torch.tensor(i % 2)} for i in range(n)]


def test_a_pair_task_corrupts_and_reconstructs_both_documents():
    items = pair_items(3)
    read = JointDenoising(PAIR, 0.5).epoch_data(items, seed=0, epoch=2)
    got = [read[i] for i in range(3)]
    for i, it in enumerate(got):  # the documents' positions as the pretraining view numbers them
        assert torch.equal(it["masked"], mask_positions(20 - i, CORRUPT_RATIO, 0, 2, 2 * i))
        assert torch.equal(it["masked2"], mask_positions(14 - 2 * i, CORRUPT_RATIO, 0, 2,
                                                         2 * i + 1))
    batch = pad_collate(got)
    torch.manual_seed(0)
    model = joint_model(MODEL, PAIR).train()
    loss, stats = JointDenoising(PAIR, 0.5).step(model, batch, torch.Generator().manual_seed(7))

    g = torch.Generator().manual_seed(7)
    seen = corrupt(batch["inputs"], batch["masked"], PAIR, g)
    seen2 = corrupt(batch["inputs2"], batch["masked2"], PAIR, g)
    logits, recon = model(seen, batch["valid"], batch["masked"], inputs2=seen2,
                          valid2=batch["valid2"], masked2=batch["masked2"], aux=True)
    assert recon.shape[0] == 6  # both documents of 3 pairs
    per_doc = [F.cross_entropy(recon[i, :n], batch["inputs"][i, :n], reduction="sum")
               for i, n in enumerate([20, 19, 18])]
    per_doc += [F.cross_entropy(recon[3 + i, :n], batch["inputs2"][i, :n], reduction="sum")
                for i, n in enumerate([14, 12, 10])]
    aux = sum(per_doc) / (57 + 36)
    torch.testing.assert_close(loss, F.cross_entropy(logits, batch["label"]) + 0.5 * aux)
    # evaluation: the dual encoder on the clean pair
    model.eval()
    ref = classifier_model(MODEL, PAIR)
    ref.load_state_dict({k: v for k, v in model.state_dict().items()
                         if not k.startswith("aux_head.")})
    ref.eval()
    torch.testing.assert_close(
        model(batch["inputs"], batch["valid"], inputs2=batch["inputs2"], valid2=batch["valid2"]),
        ref(batch["inputs"], batch["valid"], inputs2=batch["inputs2"], valid2=batch["valid2"]))


def test_a_pair_task_trains_with_the_joint_loss(tmp_path):
    from spt.data.task import Task
    task = Task(PAIR, pair_items(8), pair_items(4, 1), pair_items(4, 2))
    run = train_from_scratch(task, MODEL, cfg(aux_denoise=1.0, batch_size=4), tmp_path / "p")
    assert bool((run.history["train_denoise_loss"] > 0).all())
    out = export_checkpoint(run.best_checkpoint, tmp_path / "hub")
    assert type(SequenceModel.from_pretrained(out)).__name__ == "DualEncoderModel"
