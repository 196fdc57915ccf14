"""Study 05 (text-corpus pretraining): the GPT-NeoX classifier wrapper and the smoke study, offline.

No download: GPT-NeoX models here are tiny random configs saved to tmp folders, or the smoke
preset's tiny text LM (trained on CPU in seconds, cached beside the smoke data).
"""
import json
import math

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from spt.data.task import TaskSpec  # noqa: E402
from spt.models.pretrained_lm import LMConfig, lm_classifier, load_lm  # noqa: E402
from spt.studies import text_corpus as tc  # noqa: E402

SPEC = TaskSpec("toy", seq_len=32, num_classes=3, vocab_size=11)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest (and the shared test machine stays responsive) on one thread."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_neox(tmp_path_factory):
    """A random 2-layer GPT-NeoX causal LM saved in the hub layout (what Pythia's repo holds)."""
    torch.manual_seed(0)
    conf = transformers.GPTNeoXConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=32,
                                      max_position_embeddings=64)
    path = tmp_path_factory.mktemp("neox")
    transformers.GPTNeoXForCausalLM(conf).save_pretrained(path)
    return str(path)


def _batch(B=3, L=12):
    g = torch.Generator().manual_seed(2)
    x = torch.randint(4, SPEC.vocab_size, (B, L), generator=g)
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[0, 7:] = False
    return x, valid


def test_pretrained_weights_loaded_random_init_differs(tiny_neox):
    from safetensors.torch import load_file

    saved = load_file(f"{tiny_neox}/model.safetensors")
    pre = lm_classifier(LMConfig(tiny_neox, "pretrained"), SPEC)
    rnd = lm_classifier(LMConfig(tiny_neox, "random"), SPEC)
    k = "layers.1.mlp.dense_4h_to_h.weight"
    assert torch.equal(pre.lm.state_dict()[k], saved[f"gpt_neox.{k}"])
    assert not torch.equal(rnd.lm.state_dict()[k], saved[f"gpt_neox.{k}"])
    assert rnd.lm.config.hidden_size == pre.lm.config.hidden_size == 16
    # the BPE embedding is gone; the task's vocabulary has its own
    assert pre.lm.embed_in is None
    assert pre.encoder.embed.weight.shape == (SPEC.vocab_size, 16)
    assert not any("embed_in" in n for n, _ in pre.named_parameters())


def test_classifier_shapes_padding_and_causality(tiny_neox):
    model = lm_classifier(LMConfig(tiny_neox, "pretrained", pooling="last"), SPEC).eval()
    x, valid = _batch()
    out = model(x, valid)
    assert out.shape == (3, 3) and torch.isfinite(out).all()
    # a padded row gives the same logits as the same row unpadded
    torch.testing.assert_close(out[0], model(x[:1, :7], valid[:1, :7])[0], rtol=1e-5, atol=1e-5)
    # and its padding tokens do not matter
    x2 = x.clone()
    x2[0, 7:] = 5
    torch.testing.assert_close(model(x2, valid)[0], out[0], rtol=1e-5, atol=1e-5)
    # causal: hidden state at t does not depend on tokens after t
    h = lambda ids: model.lm(inputs_embeds=model.encoder(ids), use_cache=False).last_hidden_state  # noqa: E731
    x3 = x.clone()
    x3[:, 6:] = 4
    torch.testing.assert_close(h(x)[:, :6], h(x3)[:, :6], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(h(x)[:, 6:], h(x3)[:, 6:])


def test_continuous_inputs_use_a_linear_projection(tiny_neox):
    spec = TaskSpec("img", seq_len=16, num_classes=4, d_input=1)
    model = lm_classifier(LMConfig(tiny_neox, "random", pooling="mean"), spec)
    out = model(torch.randn(2, 16, 1), torch.ones(2, 16, dtype=torch.bool))
    assert out.shape == (2, 4)
    out.sum().backward()
    assert model.encoder.proj.weight.grad is not None


def test_bad_sources_and_configs(tmp_path):
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="GPT-NeoX"):
        load_lm(LMConfig(str(other)))
    with pytest.raises(ValueError, match="init"):
        LMConfig("x", init="pile")
    with pytest.raises(ValueError, match="unknown preset"):
        tc.preset("huge")
    with pytest.raises(ValueError, match="data_root"):
        tc.run("paper", tmp_path)


def test_paper_preset_is_table5_pythia_row():
    rows = {r.name: r for r in tc.preset("paper").tasks}
    want = {"listops": (5e-5, 64), "text": (5e-4, 16), "retrieval": (1e-4, 256),
            "image": (7e-5, 64), "pathfinder": (1e-4, 1024)}
    assert {k: (r.lr, r.batch_size) for k, r in rows.items()} == want
    p = tc.preset("paper")
    for r in rows.values():
        cfg = r.train_config(p, "cuda")
        assert cfg.batch_size * cfg.accum_steps == r.batch_size and cfg.weight_decay == 0.0
    assert p.source == "EleutherAI/pythia-70m-deduped"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    n = torch.get_num_threads()
    ds = tc.run("smoke", out, device="cpu")
    assert torch.get_num_threads() == n  # the smoke preset's one thread per cell is restored
    return out, ds


def test_smoke_run_dims_and_finite_metrics(smoke_run):
    _, ds = smoke_run
    assert dict(ds.sizes)["task"] == 2 and list(ds.init.values) == ["pretrained", "random"]
    assert set(ds.task.values) == {"listops", "digits"} and list(ds.seed.values) == [0]
    for v in ("test_accuracy", "val_accuracy", "steps", "curve_train_loss", "curve_val_accuracy"):
        assert np.isfinite(ds[v].values).all(), v
    assert ((ds.test_accuracy >= 0) & (ds.test_accuracy <= 1)).all()
    assert (ds.steps > 0).all()
    assert ds.sizes["epoch"] == tc.preset("smoke").epochs
    t = tc.table(ds)
    assert "pretrained (paper)" in t.index and math.isclose(t.loc["pretrained (paper)", "listops"], 43.05)


def test_second_run_skips_every_cell(smoke_run, capsys):
    out, ds = smoke_run
    files = sorted((out / tc.STUDY).glob("*.nc"))
    assert len(files) == 4
    stamps = [f.stat().st_mtime_ns for f in files]
    capsys.readouterr()
    again = tc.run("smoke", out, device="cpu")
    assert "4 already done, 0 to run" in capsys.readouterr().out
    assert [f.stat().st_mtime_ns for f in files] == stamps
    np.testing.assert_array_equal(again.test_accuracy.values, ds.test_accuracy.values)
