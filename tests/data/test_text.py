"""Text (IMDb parquet) and Retrieval (AAN TSV) readers on official-format fixtures."""
import pytest
import torch

from official_formats import aan_release, imdb_hub, parquet
from spt.data import DataFormatError, DataMissingError, EOS_ID
from spt.data.text import decode_bytes, load_retrieval, load_text


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


def test_retrieval_pairs_as_one_sequence(tmp_path):
    aan_release(tmp_path)
    task = load_retrieval(tmp_path)
    assert (len(task.train), len(task.val), len(task.test)) == (3, 1, 2)
    assert task.spec.seq_len == 8001 and task.spec.vocab_size == 260
    item = task.train[1]
    ids = item["inputs"]
    sep = (ids == EOS_ID).nonzero().flatten().tolist()
    assert len(sep) == 1
    assert decode_bytes(ids[: sep[0]]) == "Parsing trees"
    assert decode_bytes(ids[sep[0] + 1:]) == "Unrelated \u00e9t\u00e9 text"
    assert [int(task.train[i]["label"]) for i in range(3)] == [1, 0, 1]
    assert decode_bytes(task.test[1]["inputs"]) == "z" and task.test[1]["inputs"][0] == EOS_ID
    short = load_retrieval(tmp_path, doc_len=5)
    assert short.spec.seq_len == 11
    assert short.train[2]["inputs"].tolist() == [4 + ord("x")] * 5 + [EOS_ID] + [4 + ord("y")] * 5


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
