"""LRA Retrieval as a dual encoder: pair batches, one shared backbone, [u, v, u*v, u-v] head,
single-document self-pretraining, and the hub round trip of a pair classifier (tiny CPU models)."""
import sys
from pathlib import Path

import pytest
import torch

from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig, replace
from spt.data.collate import pad_collate
from spt.data.pairs import NO_LABEL, documents_task
from spt.data.task import TaskSpec
from spt.data.text import DOC_LEN, load_retrieval
from spt.models.heads import pair_features, pool
from spt.models.model import Backbone, DualEncoderModel, SequenceModel, classifier_model
from spt.paper import ssm_row, transformer_row
from spt.ssm_config import SSMConfig
from spt.train import finetune, pretrain, train_from_scratch
from spt.train.objectives import Supervised
from spt.train.passes import to_device as _to

sys.path.insert(0, str(Path(__file__).parent / "data"))
from official_formats import aan_release  # noqa: E402

PAIR = TaskSpec("retrieval", seq_len=DOC_LEN, num_classes=2, vocab_size=260, pair=True)
TINY = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_len=4096)
TINY_S4 = SSMConfig(kind="s4", d_model=8, n_layers=1, d_state=8, max_len=64, dropout=0.0)


def _pair_batch(B=3, L1=20, L2=13, seed=1):
    """Pair items of different lengths, collated as the engine collates them."""
    g = torch.Generator().manual_seed(seed)
    items = [{"inputs": torch.randint(4, 260, (L1 - i,), generator=g),
              "inputs2": torch.randint(4, 260, (L2 - 2 * i,), generator=g),
              "label": torch.tensor(i % 2)} for i in range(B)]
    return pad_collate(items)


def test_pad_collate_pads_the_second_document_on_its_own():
    batch = _pair_batch(B=3, L1=20, L2=13)
    assert batch["inputs"].shape == (3, 20) and batch["inputs2"].shape == (3, 13)
    assert batch["valid"].sum(1).tolist() == [20, 19, 18]
    assert batch["valid2"].sum(1).tolist() == [13, 11, 9]
    assert int(batch["inputs2"][2, 9:].abs().sum()) == 0  # PAD_ID
    with pytest.raises(ValueError, match="mixes pair and single-sequence"):
        ones = torch.ones(3, dtype=torch.long)
        pad_collate([{"inputs": ones, "label": torch.tensor(0)},
                     {"inputs": ones, "inputs2": ones, "label": torch.tensor(0)}])


# ------------------------------------------------------- (a) the paper's presets on 4000-byte pairs
@pytest.mark.parametrize("which", ["transformer_masked", "s4"])
def test_paper_retrieval_configs_train_on_two_4000_byte_documents(tmp_path, which):
    """Study 01's sinusoidal Transformer (max_len 4096) and study 02's S4 take a real pair batch."""
    if which == "s4":
        cfg = ssm_row("retrieval", "s4").model
        cfg = replace(cfg, d_model=8, n_layers=1, d_state=8)
    else:
        cfg = transformer_row("retrieval", "masked").model
        assert (cfg.positions, cfg.max_len) == ("sinusoidal", 4096)
        cfg = replace(cfg, d_model=16, n_layers=1, n_heads=2, d_ff=32)
    aan_release(tmp_path, {"train": [("1", "a", "b", "p" * 4500, "q" * 4200),
                                     ("0", "c", "d", "r" * 4001, "s" * 4000)],
                           "eval": [("0", "e", "f", "t", "u")],
                           "test": [("0", "g", "h", "v", "w")]})
    task = load_retrieval(tmp_path)
    assert task.spec.seq_len <= cfg.max_len
    batch = pad_collate([task.train[0], task.train[1]])
    assert batch["inputs"].shape == batch["inputs2"].shape == (2, 4000)
    torch.manual_seed(0)
    model = classifier_model(cfg, task.spec)
    loss, stats = Supervised(task.spec).step(model, _to(batch, torch.device("cpu")))  # as fit does
    loss.backward()
    assert torch.isfinite(loss) and float(stats["n"]) == 2
    assert all(p.grad is not None for p in model.backbone.parameters() if p.requires_grad)


# ------------------------------------------------------- (b) one shared backbone, [u, v, u*v, u-v]
def test_towers_share_one_backbone_and_encode_each_document_alone():
    torch.manual_seed(0)
    model = classifier_model(TINY, PAIR).eval()
    assert isinstance(model, DualEncoderModel)
    assert sum(isinstance(m, Backbone) for m in model.modules()) == 1
    single = classifier_model(TINY, replace(PAIR, pair=False))
    assert model.backbone.state_dict().keys() == single.backbone.state_dict().keys()
    assert model.head.mlp[0].in_features == 4 * TINY.d_model
    b = _pair_batch()
    out = model(b["inputs"], b["valid"], inputs2=b["inputs2"], valid2=b["valid2"])
    assert out.shape == (3, 2)
    # the same as encoding and pooling each document on its own, unpadded
    with torch.no_grad():
        for i in range(3):
            x1 = b["inputs"][i, b["valid"][i]][None]
            x2 = b["inputs2"][i, b["valid2"][i]][None]
            u = pool(model.backbone(x1), None, TINY.pooling)
            v = pool(model.backbone(x2), None, TINY.pooling)
            torch.testing.assert_close(out[i], model.head.mlp(pair_features(u, v))[0],
                                       rtol=1e-5, atol=1e-5)


def test_pair_features_and_swapping_the_documents():
    u, v = torch.randn(2, 5), torch.randn(2, 5)
    f, g = pair_features(u, v), pair_features(v, u)
    torch.testing.assert_close(f, torch.cat([u, v, u * v, u - v], -1))
    torch.testing.assert_close(g, torch.cat([f[:, 5:10], f[:, :5], f[:, 10:15], -f[:, 15:]], -1))
    torch.manual_seed(0)
    model = classifier_model(TINY, PAIR).eval()
    b = _pair_batch()
    def fwd(m, first, second):  # first, second: "" or "2", which document goes where
        return m(b[f"inputs{first}"], b[f"valid{first}"], inputs2=b[f"inputs{second}"],
                 valid2=b[f"valid{second}"])

    ab, ba = fwd(model, "", "2"), fwd(model, "2", "")
    assert not torch.allclose(ab, ba, atol=1e-4)  # the head sees the order (u, v, u-v)
    with torch.no_grad():  # equal weights on u and v and none on u-v: only u-v's sign differed
        w = model.head.mlp[0].weight.view(TINY.d_model, 4, TINY.d_model)
        w[:, 1] = w[:, 0]
        w[:, 3] = 0
    torch.testing.assert_close(fwd(model, "", "2"), fwd(model, "2", ""), rtol=1e-5, atol=1e-5)


def test_pair_model_errors_name_the_fix():
    model = classifier_model(TINY, PAIR)
    b = _pair_batch()
    with pytest.raises(ValueError, match="inputs2"):
        model(b["inputs"], b["valid"])
    with pytest.raises(ValueError, match="inputs2"):
        Supervised(PAIR).step(model, {k: b[k] for k in ("inputs", "valid", "label")})
    from spt.models.model import pretraining_model
    with pytest.raises(ValueError, match="documents_task"):
        pretraining_model(TINY, PAIR, ObjectiveConfig("masked", 0.15, "ce"))


# ------------------------------------------------------- (c) pretrain on documents, then finetune
def test_pretrain_sees_single_documents_then_finetune_and_scratch(tmp_path):
    rows = {"train": [("1", "a1", "b1", "neural nets " * 5, "we cite neural nets"),
                      ("0", "a2", "b2", "parsing trees", "z" * 4100),
                      ("1", "a3", "b3", "x" * 50, "y" * 7)],
            "eval": [("0", "c1", "d1", "foo", "bar"), ("1", "c2", "d2", "cite", "cited")],
            "test": [("1", "e1", "f1", "baz", "qux"), ("0", "e2", "f2", "", "z")]}
    aan_release(tmp_path / "data", rows)
    task = load_retrieval(tmp_path / "data")
    docs = documents_task(task)
    assert len(docs.train) == 2 * len(task.train) == 6 and len(docs.val) == 4
    assert not docs.spec.pair and docs.spec.seq_len == 4000 and docs.spec.vocab_size == 260
    items = [docs.train[j] for j in range(6)]
    assert all(set(it) == {"inputs", "label"} and int(it["label"]) == NO_LABEL for it in items)
    assert max(len(it["inputs"]) for it in items) == 4000
    assert torch.equal(items[3]["inputs"], task.train[1]["inputs2"])

    tcfg = TrainConfig(lr=1e-3, batch_size=2, epochs=1, progress=False, seed=0)
    steps = []
    pt = pretrain(task, TINY, ObjectiveConfig("masked", 0.15, "ce"), tcfg, tmp_path / "pt",
                  on_step=steps.append)
    # a step reads both documents of 2 pairs (the authors' AAN collate): 3 pairs, 2 steps
    assert steps == [1, 2]
    from spt.train.passes import epoch_batches
    for epoch in range(3):
        batches = epoch_batches(6, 2, 0, epoch, group=2)
        assert [len(b) for b in batches] == [4, 2]
        assert sorted(j for b in batches for j in b) == list(range(6))
        assert all(b[k] // 2 == b[k + 1] // 2 and b[k] % 2 == 0 for b in batches
                   for k in range(0, len(b), 2))  # documents 2i and 2i + 1 side by side
    assert epoch_batches(6, 2, 0, 1) == epoch_batches(6, 2, 0, 1, group=1)
    ck = torch.load(pt.best_checkpoint, weights_only=False)
    assert ck["spec"]["pair"] is False and ck["spec"]["name"] == "retrieval-documents"
    assert isinstance(pt.model, SequenceModel) and not isinstance(pt.model, DualEncoderModel)

    ft = finetune(task, pt.best_checkpoint, replace(tcfg, lr=1e-12, grad_clip=None),
                  tmp_path / "ft")
    assert isinstance(ft.model, DualEncoderModel)
    for name, p in ft.model.backbone.state_dict().items():  # loaded strictly by name
        torch.testing.assert_close(p, ck["model"][f"backbone.{name}"], rtol=0, atol=1e-8, msg=name)
    assert set(ft.test_metrics) == {"loss", "accuracy"}
    sc = train_from_scratch(task, TINY, tcfg, tmp_path / "sc")
    assert isinstance(sc.model, DualEncoderModel) and 0.0 <= sc.test_metrics["accuracy"] <= 1.0
    assert sc.steps == 2  # 3 pairs in batches of 2


# ------------------------------------------------------- (d) hub round trip
@pytest.mark.parametrize("cfg", [replace(TINY, max_len=32, positions="learned"), TINY_S4],
                         ids=["transformer", "s4"])
def test_pair_classifier_hub_round_trip(tmp_path, cfg):
    torch.manual_seed(0)
    model = classifier_model(cfg, replace(PAIR, seq_len=24)).eval()
    b = _pair_batch()
    want = model(b["inputs"], b["valid"], inputs2=b["inputs2"], valid2=b["valid2"])
    model.save_pretrained(tmp_path / "m")
    assert "dual-encoder" in (tmp_path / "m" / "README.md").read_text()
    torch.manual_seed(123)
    loaded = SequenceModel.from_pretrained(tmp_path / "m")
    assert isinstance(loaded, DualEncoderModel) and TaskSpec(**loaded.hub_config["spec"]).pair
    got = loaded(b["inputs"], b["valid"], inputs2=b["inputs2"], valid2=b["valid2"])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    fresh = classifier_model(cfg, replace(PAIR, seq_len=24)).eval()
    other = fresh(b["inputs"], b["valid"], inputs2=b["inputs2"], valid2=b["valid2"])
    assert not torch.equal(other, want)  # so the round trip could fail
