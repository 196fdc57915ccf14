"""`spt data fixtures`: tiny official-format data for all ten tasks, read back by the real readers
at the paper's sequence lengths."""
import argparse
import ast
import json
import time
import wave

import pytest
import torch
from official_formats import listops_release

from spt.data import listops as listops_reader
from spt.data.cli import add_data_commands
from spt.data.fixtures import FOLDERS, SPEECH_WORDS, write_fixtures
from spt.data.registry import TASK_DIRS, TASK_NAMES, TASKS, describe_task, load_task, source_of
from spt.data.task import EOS_ID

# what the paper runs: (seq_len, longest item at least) per task
PAPER_LENGTHS = {"listops": (listops_reader.SEQ_LEN, 1900), "text": (4096, 4096),
                 "image": (1024, 1024), "scifar": (1024, 1024), "pathfinder": (1024, 1024),
                 "pathx": (16384, 16384), "pathx256": (65536, 65536), "speech": (16000, 16000),
                 "bidmc": (4000, 4000)}
DOC_LEN = 4000  # Retrieval: per document


def run(argv):
    parser = argparse.ArgumentParser(prog="spt")
    add_data_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def splits(task):
    return {"train": task.train, "val": task.val, "test": task.test}


def labels_of(ds) -> list:
    return [ds[i]["label"].item() for i in range(len(ds))]


def listops_value(source: str) -> int:
    """Independent evaluator of a release-format ListOps Source string (parentheses included)."""
    stack = [[]]
    for tok in source.split():
        if tok in ("(", ")"):
            continue
        if tok.startswith("["):
            stack.append([tok])
        elif tok == "]":
            op, *args = stack.pop()
            s = sorted(args)
            median = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) // 2
            stack[-1].append({"[MIN": s[0], "[MAX": s[-1], "[MED": median,
                              "[SM": sum(s) % 10}[op])
        else:
            stack[-1].append(int(tok))
    (value,) = stack[0]
    return value


def test_tasks_shipped_with_spt_know_their_classes():
    from spt.data.digits import digits_task
    from spt.data.lagged import lagged_task
    for name, task in (("digits", digits_task(size=8, n_train=20, val_size=10, test_size=10)),
                       ("lagged", lagged_task(n_train=20, val_size=10, test_size=10))):
        assert source_of(task.spec) is TASKS[name]
        assert task.spec.num_classes == TASKS[name].classes


def test_folders_are_the_task_dirs():
    assert FOLDERS == TASK_DIRS and set(FOLDERS) == set(TASK_NAMES)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_task_reads_back_at_the_paper_length(tmp_path, name):
    folders = write_fixtures(tmp_path, [name])
    assert folders == {name: tmp_path / TASK_DIRS[name]}
    assert describe_task(name, tmp_path)["generated"] is True
    targets = ("HR", "RR", "SpO2") if name == "bidmc" else (None,)
    for target in targets:
        task = load_task(name, tmp_path, **({"target": target} if target else {}))
        assert source_of(task.spec) is TASKS[name]  # its registry facts are found from its spec
        assert task.spec.num_classes == TASKS[name].classes
        parts = splits(task)
        assert all(len(ds) > 0 for ds in parts.values()), task
        if name == "retrieval":
            _check_retrieval(task)
            continue
        seq_len, reach = PAPER_LENGTHS[name]
        assert task.spec.seq_len == seq_len
        for split, ds in parts.items():
            items = [ds[i]["inputs"] for i in range(len(ds))]
            assert max(x.shape[0] for x in items) <= seq_len
            if name in ("listops", "text", "pathfinder", "pathx", "pathx256", "image",
                        "scifar", "bidmc"):
                assert max(x.shape[0] for x in items) >= reach, split
        _check_labels(name, tmp_path, task, target)


def _check_retrieval(task):
    for split, ds in splits(task).items():
        longest1 = longest2 = 0
        for i in range(len(ds)):
            item = ds[i]
            if "inputs2" in item:  # a pair item: one sequence per document
                doc1, doc2 = item["inputs"], item["inputs2"]
                assert task.spec.seq_len == DOC_LEN
            else:  # one sequence doc1 <eos> doc2
                cut = int((item["inputs"] == EOS_ID).nonzero()[0])
                doc1, doc2 = item["inputs"][:cut], item["inputs"][cut + 1:]
                assert task.spec.seq_len == 2 * DOC_LEN + 1
            longest1, longest2 = max(longest1, len(doc1)), max(longest2, len(doc2))
        assert longest1 == longest2 == DOC_LEN, split  # truncated to 4,000 bytes, both towers
        assert set(labels_of(ds)) == {0, 1}, split


def _check_labels(name, root, task, target):
    parts = splits(task)
    if name == "listops":  # the files' targets are the values of their expressions
        folder = root / TASK_DIRS[name]
        written = set()
        for split in ("train", "val", "test"):
            rows = (folder / f"basic_{split}.tsv").read_text().splitlines()
            assert rows[0] == "Source\tTarget"
            for row in rows[1:]:
                source, value = row.split("\t")
                assert listops_value(source) == int(value)
                written.add(int(value))
            assert 1900 <= max(len(listops_reader.tokenize(r.split("\t")[0]))
                               for r in rows[1:]) < 2000
        assert set().union(*(labels_of(ds) for ds in parts.values())) == written
        assert task.spec.num_classes == 10
    elif name in ("image", "scifar"):  # one training image per class
        assert set(labels_of(task.train) + labels_of(task.val)) == set(range(10))
        assert task.train[0]["inputs"].shape == (1024, 3 if name == "scifar" else 1)
    elif name.startswith("path"):
        for split, ds in parts.items():
            assert set(labels_of(ds)) == {0, 1}, split
    elif name == "text":
        assert set(labels_of(task.train)) == set(labels_of(task.test)) == {0, 1}
    elif name == "speech":  # every one of the 35 words in training; full-second clips everywhere
        assert task.spec.num_classes == 35
        assert set(labels_of(task.train)) == set(range(35))
        for split, ds in parts.items():
            assert any(bool(ds[i]["inputs"][-100:].abs().sum() > 0) for i in range(len(ds)))
    elif name == "bidmc":
        assert task.spec.num_classes is None and task.spec.d_input == 2
        y = torch.cat([task.train.labels, task.val.labels])
        assert float(y.min()) == -1.0 and float(y.max()) == 1.0
        lo, hi = {"HR": (60, 120), "RR": (8, 30), "SpO2": (88, 100)}[target]
        raw = task.test.label_scaler.inverse(task.test.labels)
        assert bool((raw > lo - 1e-3).all() and (raw < hi + 1e-3).all())


def test_files_follow_the_official_conventions(tmp_path):
    """Checked on the files themselves, without our readers."""
    import pyarrow.parquet as pq

    write_fixtures(tmp_path, ["retrieval", "text", "image", "speech", "bidmc", "pathx"])
    # AAN: 5 tab-separated fields, documents as Python bytes literals holding UTF-8
    for split in ("train", "eval", "test"):
        for line in (tmp_path / TASK_DIRS["retrieval"] / f"new_aan_pairs.{split}.tsv"
                     ).read_text().splitlines():
            label, _, _, text1, text2 = line.split("\t")
            assert label in ("0", "1")
            for doc in (text1, text2):
                ast.literal_eval(doc).decode("utf-8")
    # hub parquet: the columns and types of stanfordnlp/imdb and uoft-cs/cifar10
    for name, columns in (("text", "text: string, label: int64"),
                          ("image", "img: struct<bytes: binary, path: string>, label: int64")):
        for split in ("train", "test"):
            schema = pq.read_schema(tmp_path / TASK_DIRS[name] / "plain_text" /
                                    f"{split}-00000-of-00001.parquet")
            assert ", ".join(f"{f.name}: {f.type}" for f in schema) == columns
            features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
            assert features["label"]["_type"] == "ClassLabel"
    # Speech Commands: 35 word folders of 16-bit mono 16 kHz clips of at most one second
    sc = tmp_path / TASK_DIRS["speech"]
    assert sorted(p.name for p in sc.iterdir() if p.is_dir() and p.name in SPEECH_WORDS) == \
        sorted(SPEECH_WORDS) and len(SPEECH_WORDS) == 35
    for path in sc.glob("*/*.wav"):
        with wave.open(str(path)) as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000)
            assert w.getnframes() <= 16000 or path.parent.name == "_background_noise_"
    listed = (sc / "validation_list.txt").read_text().split("\n")
    assert all((sc / rel).is_file() for rel in listed)
    # Monash .ts: header tags, 2 channels x 4000 values, the target last
    lines = (tmp_path / TASK_DIRS["bidmc"] / "BIDMC32SpO2_TEST.ts").read_text().splitlines()
    tags = dict(line[1:].split(" ", 1) for line in lines if line.startswith("@") and " " in line)
    assert tags["problemName"] == "BIDMC32SpO2" and tags["dimensions"] == "2"
    assert tags["seriesLength"] == "4000" and tags["targetlabel"] == "true"
    row = lines[lines.index("@data") + 1].split(":")
    assert [len(c.split(",")) for c in row[:-1]] == [4000, 4000] and float(row[-1]) > 0
    # Pathfinder: metadata as plain text, label in column 3, 128x128 grayscale PNGs
    from PIL import Image

    px = tmp_path / TASK_DIRS["pathx"]
    for meta in (px / "metadata").glob("*.npy"):
        for line in meta.read_text().splitlines():
            folder, name, _, label, *_ = line.split()
            assert label in ("0", "1")
            with Image.open(px / folder / name) as im:
                assert (im.mode, im.size) == ("L", (128, 128))


def test_deterministic_given_the_seed(tmp_path):
    def files(root):
        return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file()}

    kinds = ["listops", "text", "retrieval", "image", "pathfinder", "speech", "bidmc"]
    write_fixtures(tmp_path / "a", kinds, seed=3)  # one task per writer (pathx* as pathfinder)
    write_fixtures(tmp_path / "b", kinds, seed=3)
    assert files(tmp_path / "a") == files(tmp_path / "b")
    write_fixtures(tmp_path / "c", ["listops", "bidmc"], seed=4)
    a, c = files(tmp_path / "a"), files(tmp_path / "c")
    assert all(a[k] != c[k] for k in c if k.suffix in (".tsv", ".ts"))


def test_replaces_its_own_fixture_but_not_other_data(tmp_path):
    def first_test_row(task):  # symbols of the first test item, as read
        ids = task.test[0]["inputs"].tolist()
        return [listops_reader.SYMBOLS[i - listops_reader.VOCAB["[MIN"]] for i in ids]

    write_fixtures(tmp_path, ["listops"])
    before = first_test_row(load_task("listops", tmp_path))  # leaves a cache in the folder
    write_fixtures(tmp_path, ["listops"], seed=1)  # our own fixture: replaced, cache with it
    after = first_test_row(load_task("listops", tmp_path))
    row = (tmp_path / TASK_DIRS["listops"] / "basic_test.tsv").read_text().splitlines()[1]
    assert after == listops_reader.tokenize(row.split("\t")[0]) and after != before
    other = tmp_path / "other"
    listops_release(other)  # data not written by the fixtures
    with pytest.raises(FileExistsError, match="not written by `spt data fixtures`"):
        write_fixtures(other, ["listops"])
    with pytest.raises(ValueError, match="unknown task"):
        write_fixtures(tmp_path, ["listopz"])


def test_all_ten_in_seconds_and_small(tmp_path):
    t0 = time.time()
    write_fixtures(tmp_path)
    size = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    for name in TASK_NAMES:
        load_task(name, tmp_path)
    assert time.time() - t0 < 30  # about 3 s on a 2-core machine
    assert size < 5e6  # about 3 MB


def test_cli_writes_reads_back_and_reports(tmp_path, capsys):
    assert run(["data", "fixtures", str(tmp_path), "--tasks", "listops,retrieval,pathx"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:3]] == ["listops", "retrieval", "pathx"]
    assert f"{tmp_path / TASK_DIRS['pathx']}: train 16, val 2, test 2; longest 16384 " \
           "(seq_len 16384)" in out[2]
    assert "train 4, val 2, test 2; longest 4000" in out[1]
    longest = int(out[0].split("longest ")[1].split()[0])
    assert 1900 <= longest < 2000 and "(seq_len 2048)" in out[0]
    assert out[3].startswith("wrote 3 task(s)")
    assert run(["data", "info", "pathx", "--root", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["generated"] is True
    assert run(["data", "fixtures", str(tmp_path), "--tasks", "listops,nope"]) == 1
    assert "unknown task(s) nope" in capsys.readouterr().err
    listops_release(tmp_path / "real")
    assert run(["data", "fixtures", str(tmp_path / "real"), "--tasks", "listops"]) == 1
    assert capsys.readouterr().err.startswith("error: ")
