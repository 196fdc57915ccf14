"""Study 05 (text-corpus pretraining): the GPT-NeoX classifier wrapper and the smoke study, offline.

No download: GPT-NeoX models here are tiny random configs saved to tmp folders with a byte-level
tokenizer.json, or the smoke preset's tiny text LM (trained on CPU in seconds, cached beside the
smoke data).
"""
import json
import math

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from spt.data import listops  # noqa: E402
from spt.data.task import N_SPECIAL, PAD_ID, TaskSpec  # noqa: E402
from spt.models.pretrained_lm import (  # noqa: E402
    LMConfig,
    LMInputMap,
    byte_chars,
    lm_classifier,
    lm_token_table,
    load_lm,
    task_symbols,
)
from spt.models.tiny_lm import TINY_PAD, TINY_VOCAB, byte_tokenizer  # noqa: E402
from spt.studies import text_corpus as tc  # noqa: E402

# ListOps ids 4..18: operators span several LM tokens, so the mapping expands sequences.
SPEC = TaskSpec("listops", seq_len=32, num_classes=3, vocab_size=listops.VOCAB_SIZE)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest (and the shared test machine stays responsive) on one thread."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_neox(tmp_path_factory):
    """A random 2-layer GPT-NeoX causal LM + byte-level tokenizer.json in the hub layout (what
    Pythia's repo holds)."""
    torch.manual_seed(0)
    conf = transformers.GPTNeoXConfig(vocab_size=TINY_VOCAB, hidden_size=16, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=32,
                                      max_position_embeddings=64)
    path = tmp_path_factory.mktemp("neox")
    transformers.GPTNeoXForCausalLM(conf).save_pretrained(path)
    byte_tokenizer().save(str(path / "tokenizer.json"))
    return str(path)


@pytest.fixture(scope="module")
def smoke_lm():
    """The smoke preset's tiny text LM folder (trained offline on first use, then cached)."""
    return tc.resolve_source(LMConfig(tc.SMOKE_LM), tc.settings("smoke").tiny).source


def _batch(B=3, L=12):
    g = torch.Generator().manual_seed(2)
    x = torch.randint(N_SPECIAL, SPEC.vocab_size, (B, L), generator=g)
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
    # the LM's own input embedding is kept, bitwise, and is the only one (no task embedding)
    assert torch.equal(pre.lm.embed_in.weight, saved["gpt_neox.embed_in.weight"])
    assert not torch.equal(rnd.lm.embed_in.weight, saved["gpt_neox.embed_in.weight"])
    assert pre.encoder is None and rnd.encoder is None
    # both arms map task ids onto the same LM ids; only the embeddings' values differ
    assert torch.equal(pre.inputs.ids, rnd.inputs.ids)


def test_smoke_lm_keeps_its_embedding_and_sees_its_own_ids_of_a_text(smoke_lm):
    """Regression: the classifier once replaced the LM's input embedding by a new one over the
    task vocabulary; now task bytes become the LM's ids of the same characters."""
    from safetensors.torch import load_file

    spec = TaskSpec("text", seq_len=64, num_classes=2, vocab_size=N_SPECIAL + 256)
    model = lm_classifier(LMConfig(smoke_lm, "pretrained"), spec)
    saved = load_file(f"{smoke_lm}/model.safetensors")["gpt_neox.embed_in.weight"]
    assert torch.equal(model.lm.embed_in.weight, saved)
    assert model.encoder is None and not any("encoder" in n for n, _ in model.named_parameters())

    text = "Pythia reads [bytes] 1-2-3, ünïcödé too.\n"
    task_ids = torch.tensor([[N_SPECIAL + b for b in text.encode("utf-8")]])
    ids, valid = model.inputs(task_ids, None)
    lm_ids = tokenizers.Tokenizer.from_file(f"{smoke_lm}/tokenizer.json").encode(text).ids
    assert ids[0].tolist() == lm_ids == list(text.encode("utf-8"))
    assert valid is None
    # the classifier's input vectors are the LM's own embedding rows of those ids
    x, _ = model.embed(task_ids)
    assert torch.equal(x[0], saved[lm_ids])


def test_listops_and_pixel_symbols_map_to_the_lms_tokens_of_their_text(smoke_lm):
    tok = tokenizers.Tokenizer.from_file(f"{smoke_lm}/tokenizer.json")
    model = lm_classifier(LMConfig(smoke_lm, "random"), SPEC)
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    ops = ["[MAX", "2", "9", "]"]  # "]" is shown as "X", as in the authors' ListOps text
    x = torch.tensor([[listops.VOCAB[s] for s in ops] + [PAD_ID] * 2,
                      [listops.VOCAB[s] for s in ops[1:]] + [PAD_ID] * 3])
    valid = x != PAD_ID
    ids, v = model.inputs(x, valid)
    want = [enc("[MAX") + enc("2") + enc("9") + enc("X"), enc("2") + enc("9") + enc("X")]
    assert [row[m].tolist() for row, m in zip(ids, v)] == want
    assert v.sum(1).tolist() == [len(w) for w in want] and ids.shape[1] == len(want[0])
    assert (ids[~v] == TINY_PAD).all()  # right-padded with the LM's <|padding|>

    digits = TaskSpec("digits8", seq_len=64, num_classes=10, vocab_size=N_SPECIAL + 17)
    pix = lm_classifier(LMConfig(smoke_lm, "random"), digits)
    ids, _ = pix.inputs(torch.tensor([[N_SPECIAL + 7, N_SPECIAL + 16]]))
    assert ids[0].tolist() == enc("7") + enc("16")


def test_token_table_follows_a_pythia_like_tokenizer():
    """Specials at 0 / 1 and bytes from 2 (Pythia's layout), with merges: ids are the tokenizer's,
    not the bytes, and multi-character symbols take its BPE pieces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    chars = byte_chars()
    vocab = {"<|endoftext|>": 0, "<|padding|>": 1, **{c: 2 + b for b, c in enumerate(chars)}}
    vocab.update({"MA": 258, "MAX": 259, "13": 260, "137": 261})
    merges = [("M", "A"), ("MA", "X"), ("1", "3"), ("13", "7")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|padding|>"])

    table = lm_token_table(tok, [b" ", b"\xe9", b"[MAX", b"137", b"X"])
    assert table[:N_SPECIAL] == [(1,), (0,), (0,), (0,)]  # pad; mask, unk, eos -> <|endoftext|>
    assert table[N_SPECIAL:] == [(2 + 32,), (2 + 0xE9,), (2 + ord("["), 259), (261,),
                                 (2 + ord("X"),)]
    pix = task_symbols(TaskSpec("pathfinder", 1024, 2, vocab_size=N_SPECIAL + 256))
    assert pix[137] == b"137" and len(pix) == 256
    image = task_symbols(TaskSpec("image", 1024, 10, vocab_size=N_SPECIAL + 256))  # tokens=True
    assert image == pix
    assert task_symbols(SPEC)[listops.VOCAB["]"] - N_SPECIAL] == b"X"


def test_input_map_expands_rows_in_place():
    m = LMInputMap([(9,), (9,), (9,), (9,), (5,), (6, 7), (8, 8, 8)], pad_id=9)
    x = torch.tensor([[5, 4, 6, 0], [4, 4, 0, 0]])
    ids, v = m(x, x != 0)
    assert ids.tolist() == [[6, 7, 5, 8, 8, 8], [5, 5, 9, 9, 9, 9]]
    assert v.sum(1).tolist() == [6, 2] and not v[1, 2:].any()


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
    ids, _ = model.inputs(x)
    h = lambda i: model.lm(input_ids=i, use_cache=False).last_hidden_state  # noqa: E731
    ids3 = ids.clone()
    ids3[:, 6:] = 40
    torch.testing.assert_close(h(ids)[:, :6], h(ids3)[:, :6], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(h(ids)[:, 6:], h(ids3)[:, 6:])


def test_pair_task_encodes_each_document(tiny_neox):
    spec = TaskSpec("retrieval", seq_len=16, num_classes=2, vocab_size=N_SPECIAL + 256, pair=True)
    model = lm_classifier(LMConfig(tiny_neox, "random"), spec).eval()
    g = torch.Generator().manual_seed(3)
    a, b = torch.randint(4, 260, (2, 9), generator=g), torch.randint(4, 260, (2, 5), generator=g)
    out = model(a, None, inputs2=b, valid2=None)
    assert out.shape == (2, 2)
    # document pairs are independent rows
    torch.testing.assert_close(model(a[:1], None, inputs2=b[:1])[0], out[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="inputs2"):
        model(a)


def test_continuous_inputs_use_a_linear_projection(tiny_neox):
    spec = TaskSpec("img", seq_len=16, num_classes=4, d_input=1)
    model = lm_classifier(LMConfig(tiny_neox, "random", pooling="mean"), spec)
    out = model(torch.randn(2, 16, 1), torch.ones(2, 16, dtype=torch.bool))
    assert out.shape == (2, 4)
    assert model.lm.embed_in is None and model.inputs is None
    out.sum().backward()
    assert model.encoder.proj.weight.grad is not None


def test_fresh_input_embedding_is_the_named_alternative(tiny_neox):
    model = lm_classifier(LMConfig(tiny_neox, "pretrained", input_embedding="fresh"), SPEC)
    # the LM's embedding is gone; the task's vocabulary has its own
    assert model.lm.embed_in is None and model.inputs is None
    assert model.encoder.embed.weight.shape == (SPEC.vocab_size, 16)
    assert not any("embed_in" in n for n, _ in model.named_parameters())
    x, valid = _batch()
    assert model(x, valid).shape == (3, 3)


def test_lm_head_is_mlp_by_default_or_one_linear(tiny_neox):
    pair = TaskSpec("retrieval", seq_len=16, num_classes=2, vocab_size=N_SPECIAL + 256, pair=True)
    assert LMConfig(tiny_neox).head == "mlp"
    assert lm_classifier(LMConfig(tiny_neox, "random"), SPEC).head.kind == "mlp"
    for spec, d_in in ((SPEC, 16), (pair, 4 * 16)):
        model = lm_classifier(LMConfig(tiny_neox, "random", head="linear"), spec).eval()
        lins = [m for m in model.head.modules() if isinstance(m, torch.nn.Linear)]
        assert [(m.in_features, m.out_features) for m in lins] == [(d_in, spec.num_classes)]
        assert [n for n, _ in model.head.named_parameters()] == ["linear.weight", "linear.bias"]
    x, valid = _batch()
    assert model(x[:2], valid[:2], inputs2=x[1:], valid2=valid[1:]).shape == (2, 2)
    with pytest.raises(ValueError, match=r"LMConfig\.head='conv' is not one of \['mlp', 'linear'\]"):
        LMConfig("x", head="conv")


def test_bad_sources_and_configs(tmp_path):
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="GPT-NeoX"):
        load_lm(LMConfig(str(other)))
    with pytest.raises(ValueError, match="init"):
        LMConfig("x", init="pile")
    with pytest.raises(ValueError, match="input_embedding"):
        LMConfig("x", input_embedding="bpe")
    # token tasks need the LM's tokenizer.json; the error says how to get it
    no_tok = tmp_path / "neox"
    transformers.GPTNeoXConfig(vocab_size=TINY_VOCAB, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32).save_pretrained(no_tok)
    with pytest.raises(FileNotFoundError, match="tokenizer.json.*input_embedding='fresh'"):
        lm_classifier(LMConfig(str(no_tok), "random"), SPEC)
    byte_tokenizer().save(str(no_tok / "tokenizer.json"))
    with pytest.raises(ValueError, match="no text form"):
        lm_classifier(LMConfig(str(no_tok), "random"), TaskSpec("toy", 8, 2, vocab_size=11))
    with pytest.raises(ValueError, match="unknown preset"):
        tc.settings("huge")
    with pytest.raises(ValueError, match="data_root"):
        tc.STUDY.run("paper", tmp_path)


def test_paper_preset_is_table5_pythia_row():
    rows = {r.name: r for r in tc.settings("paper").tasks}
    want = {"listops": (5e-5, 64), "text": (5e-4, 16), "retrieval": (1e-4, 256),
            "image": (7e-5, 64), "pathfinder": (1e-4, 1024)}
    assert {k: (r.lr, r.batch_size) for k, r in rows.items()} == want
    p = tc.settings("paper")
    for r in rows.values():
        cfg = r.train_config(p, "cuda")
        assert cfg.batch_size * cfg.accum_steps == r.batch_size and cfg.weight_decay == 0.0
    assert p.source == "EleutherAI/pythia-70m-deduped"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    n = torch.get_num_threads()
    ds = tc.STUDY.run("smoke", out, device="cpu")
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
    assert ds.sizes["epoch"] == tc.settings("smoke").epochs
    t = tc.table(ds)
    assert "pretrained (paper)" in t.index and math.isclose(t.loc["pretrained (paper)", "listops"], 43.05)


def test_second_run_skips_every_cell(smoke_run, capsys):
    out, ds = smoke_run
    files = sorted((out / tc.STUDY).glob("*.nc"))
    assert len(files) == 4
    stamps = [f.stat().st_mtime_ns for f in files]
    capsys.readouterr()
    again = tc.STUDY.run("smoke", out, device="cpu")
    assert "4 already done, 0 to run" in capsys.readouterr().out
    assert [f.stat().st_mtime_ns for f in files] == stamps
    np.testing.assert_array_equal(again.test_accuracy.values, ds.test_accuracy.values)


def test_a_tokenizer_with_gpt_neox_gaps_maps_every_task():
    """GPT-NeoX-20B's vocabulary (Pythia's) has no byte-level token for the 13 bytes that never
    occur in UTF-8; every token task still maps, those bytes to <|endoftext|> like <unk>."""
    from spt.models.pretrained_lm import NOT_IN_UTF8
    assert NOT_IN_UTF8 == {0xC0, 0xC1} | set(range(0xF5, 0x100)) and len(NOT_IN_UTF8) == 13
    tok = byte_tokenizer(without=NOT_IN_UTF8)
    eot = tok.token_to_id("<|endoftext|>")
    for spec in (TaskSpec("text", 4096, 2, vocab_size=N_SPECIAL + 256),
                 TaskSpec("retrieval", 4000, 2, vocab_size=N_SPECIAL + 256, pair=True),
                 SPEC,
                 TaskSpec("image", 1024, 10, vocab_size=N_SPECIAL + 256),
                 TaskSpec("pathfinder", 1024, 2, vocab_size=N_SPECIAL + 256)):
        table = lm_token_table(tok, task_symbols(spec))
        assert len(table) == spec.vocab_size
        if spec.name in ("text", "retrieval"):
            assert all(table[N_SPECIAL + b] == (eot,) for b in NOT_IN_UTF8)
            assert table[N_SPECIAL + ord("a")] == (ord("a"),) and table[N_SPECIAL + 0xC3] == (0xC3,)
    lacking = byte_tokenizer(without=frozenset({ord("a")}))
    with pytest.raises(ValueError, match="no byte-level token for byte 0x61"):
        lm_token_table(lacking, task_symbols(TaskSpec("text", 64, 2, vocab_size=N_SPECIAL + 256)))
