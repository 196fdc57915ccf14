"""Text (IMDb parquet) and Retrieval (AAN TSV) readers on official-format fixtures."""
import numpy as np
import pytest
import torch
from official_formats import aan_release, imdb_hub, parquet

from spt.data import EOS_ID, DataFormatError, DataMissingError
from spt.data.cache import cached_arrays
from spt.data.text import AAN_FILES, DOC_LEN, decode_bytes, load_retrieval, load_text


def test_imdb_bytes_splits_and_holdout(tmp_path):
    imdb_hub(tmp_path, n_train=20, n_test=6)
    task = load_text(tmp_path)
    s = task.spec
    assert (s.vocab_size, s.num_classes, s.seq_len, s.mask_ratio) == (260, 2, 4096, 0.15)
    assert (len(task.train), len(task.val), len(task.test)) == (18, 2, 6)  # 10% of train held out
    texts = {decode_bytes(task.train[i]["inputs"]) for i in range(18)}
    texts |= {decode_bytes(task.val[i]["inputs"]) for i in range(2)}
    want = {f"review {i}: {'great' if i % 2 else 'awful'} film, caf\u00e9" for i in range(20)}
    assert texts == want
    item = task.train[0]
    assert item["inputs"].dtype == torch.long and int(item["inputs"].min()) >= 4
    # 'é' is two UTF-8 bytes, so the byte sequence is one longer than the string
    assert len(item["inputs"]) == len(decode_bytes(item["inputs"])) + 1
    for i in range(18):
        text = decode_bytes(task.train[i]["inputs"])
        assert int(task.train[i]["label"]) == int(text.split()[1].rstrip(":")) % 2
    assert task.test[0]["label"].dtype == torch.long
    assert set(task.val.labels.tolist()) <= {0, 1}


def test_imdb_truncates_to_seq_len(tmp_path):
    imdb_hub(tmp_path)
    task = load_text(tmp_path, seq_len=10)
    assert max(len(task.train[i]["inputs"]) for i in range(len(task.train))) == 10


def test_truncated_parquet_names_the_file(tmp_path):
    imdb_hub(tmp_path)
    p = tmp_path / "imdb" / "plain_text" / "test-00000-of-00001.parquet"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(DataFormatError,
                       match=r"test-00000-of-00001.parquet: not a readable parquet"):
        load_text(tmp_path)


def test_imdb_bad_label_names_record_and_missing_folder(tmp_path):
    with pytest.raises(DataMissingError, match="spt data prepare text"):
        load_text(tmp_path)
    imdb_hub(tmp_path)
    parquet(tmp_path / "imdb" / "plain_text" / "test-00000-of-00001.parquet",
            {"text": ["a", "b", "c"], "label": [0, 1, 7]})
    with pytest.raises(DataFormatError, match="record 2"):
        load_text(tmp_path)


def test_retrieval_items_are_two_documents(tmp_path):
    aan_release(tmp_path)
    with pytest.warns(UserWarning, match=r"1 pair\(s\) with an empty document .*test.tsv:2"):
        task = load_retrieval(tmp_path)
    assert (len(task.train), len(task.val), len(task.test)) == (3, 1, 2)
    s = task.spec
    assert s.pair and (s.seq_len, s.vocab_size, s.num_classes) == (DOC_LEN, 260, 2) == (4000, 260, 2)
    item = task.train[1]
    assert set(item) == {"inputs", "inputs2", "label"}
    assert item["inputs"].dtype == item["inputs2"].dtype == torch.long
    assert decode_bytes(item["inputs"]) == "Parsing trees"
    assert decode_bytes(item["inputs2"]) == "Unrelated \u00e9t\u00e9 text"
    assert EOS_ID not in item["inputs"].tolist() + item["inputs2"].tolist()  # no separator
    assert [int(task.train[i]["label"]) for i in range(3)] == [1, 0, 1]
    assert task.train.labels.tolist() == [1, 0, 1]
    empty = task.test[1]
    assert len(empty["inputs"]) == 0 and decode_bytes(empty["inputs2"]) == "z"
    with pytest.warns(UserWarning, match="empty document"):
        short = load_retrieval(tmp_path, doc_len=5)
    assert short.spec.seq_len == 5
    assert short.train[2]["inputs"].tolist() == [4 + ord("x")] * 5
    assert short.train[2]["inputs2"].tolist() == [4 + ord("y")] * 5
    assert task.train.lengths().tolist() == [12 + 20, 13 + 20, 50 + 7]  # both documents (é: 2 bytes)
    sub = task.train.select([0, 2])  # fractions of the training split keep both documents
    assert decode_bytes(sub[1]["inputs"]) == "x" * 50 and decode_bytes(sub[1]["inputs2"]) == "y" * 7


def test_retrieval_truncates_each_document_to_4000_bytes(tmp_path):
    aan_release(tmp_path, {"train": [("1", "a", "b", "p" * 4100, "q" * 3999)],
                           "eval": [("0", "c", "d", "r" * 5000, "s")],
                           "test": [("0", "e", "f", "t", "u")]})
    task = load_retrieval(tmp_path)
    assert [len(task.train[0][k]) for k in ("inputs", "inputs2")] == [4000, 3999]
    assert [len(task.val[0][k]) for k in ("inputs", "inputs2")] == [4000, 1]


def test_retrieval_cache_of_the_one_sequence_layout_is_rebuilt(tmp_path):
    """A cache written by the reader's earlier layout (one array doc1 <eos> doc2) is not misread."""
    d = aan_release(tmp_path)

    def old_build(w):
        tokens = w.ragged("tokens", np.uint16)
        for _ in range(6):
            tokens.append(np.asarray([4, EOS_ID, 5], np.uint16))
        w.put("labels", np.zeros(6, np.int64))
        return {"counts": {"train": 3, "val": 1, "test": 2}}

    cached_arrays(d, f"aan-D{DOC_LEN}", 1, [d / f for f in AAN_FILES.values()], old_build)
    task = load_retrieval(tmp_path)
    assert decode_bytes(task.train[0]["inputs"]) == "Neural nets."
    assert decode_bytes(task.train[0]["inputs2"]) == "We cite neural nets."
    assert task.train.labels.tolist() == [1, 0, 1]


@pytest.mark.parametrize("line, match", [
    ("1\tid\tid\tonly four", "new_aan_pairs.eval.tsv:2: expected 5 tab-separated fields"),
    ("maybe\tid\tid\ta\tb", "new_aan_pairs.eval.tsv:2: label"),
    ("2\tid\tid\ta\tb", "new_aan_pairs.eval.tsv:2: label"),
])
def test_retrieval_malformed_row(tmp_path, line, match):
    d = aan_release(tmp_path)
    with open(d / "new_aan_pairs.eval.tsv", "a") as f:
        f.write(line + "\n")
    with pytest.raises(DataFormatError, match=match):
        load_retrieval(tmp_path)


def test_retrieval_missing_file(tmp_path):
    d = aan_release(tmp_path)
    (d / "new_aan_pairs.test.tsv").unlink()
    with pytest.raises(DataMissingError,
                       match="new_aan_pairs.test.tsv not found.*prepare retrieval"):
        load_retrieval(tmp_path)
