"""`spt data info | generate | prepare` through an argparse parser, as spt/cli.py wires them."""
import argparse
import json

import pytest
from official_formats import (
    aan_release,
    bidmc_archive,
    cifar_hub,
    imdb_hub,
    listops_release,
    pathfinder_release,
    speech_release,
)

from spt.data.cli import add_data_commands
from spt.data.registry import TASK_NAMES, load_task


def run(argv):
    parser = argparse.ArgumentParser(prog="spt")
    add_data_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


FIXTURES = {  # task -> (writer, expected info)
    "listops": (listops_release, {"splits": {"train": 5, "val": 5, "test": 5}, "seq_len": 2048,
                                  "num_classes": 10, "vocab_size": 19}),
    "text": (imdb_hub, {"splits": {"train": 18, "val": 2, "test": 6}, "seq_len": 4096,
                        "num_classes": 2, "vocab_size": 260}),
    "retrieval": (aan_release, {"splits": {"train": 3, "val": 1, "test": 2}, "seq_len": 4000,
                                "num_classes": 2, "vocab_size": 260}),
    "image": (cifar_hub, {"splits": {"train": 18, "val": 2, "test": 10}, "seq_len": 1024,
                          "num_classes": 10, "d_input": 1}),
    "scifar": (cifar_hub, {"splits": {"train": 18, "val": 2, "test": 10}, "seq_len": 1024,
                           "num_classes": 10, "d_input": 3}),
    "pathfinder": (lambda r: pathfinder_release(r, 32), {
        "splits": {"train": 16, "val": 2, "test": 2}, "seq_len": 1024, "num_classes": 2,
        "d_input": 1}),
    "pathx": (lambda r: pathfinder_release(r, 128, n_folders=1), {
        "splits": {"train": 8, "val": 1, "test": 1}, "seq_len": 16384, "num_classes": 2,
        "d_input": 1}),
    "pathx256": (lambda r: pathfinder_release(r, 256, n_folders=1), {
        "splits": {"train": 8, "val": 1, "test": 1}, "seq_len": 65536, "num_classes": 2,
        "d_input": 1}),
    "speech": (speech_release, {"splits": {"train": 6, "val": 3, "test": 3}, "seq_len": 16000,
                                "num_classes": 35, "d_input": 1}),
    "bidmc": (bidmc_archive, {"splits": {"train": 12, "val": 2, "test": 5}, "seq_len": 50,
                              "num_classes": None, "d_input": 2}),
}


def test_every_task_has_a_fixture():
    assert set(FIXTURES) == set(TASK_NAMES) and len(TASK_NAMES) == 10


@pytest.mark.parametrize("task", TASK_NAMES)
def test_info_json_on_official_format_fixture(tmp_path, capsys, task):
    writer, expected = FIXTURES[task]
    writer(tmp_path)
    assert run(["data", "info", task, "--root", str(tmp_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {k: info[k] for k in expected} == expected
    assert info["task"] == task and info["generated"] is False
    # the Task itself agrees and its items have the advertised shapes
    t = load_task(task, tmp_path)
    item = t.train[0]
    assert item["inputs"].shape[0] <= info["seq_len"]
    if "d_input" in info:
        assert item["inputs"].shape[1:] == (info["d_input"],)
    else:
        assert item["inputs"].ndim == 1 and int(item["inputs"].max()) < info["vocab_size"]
    # second read comes from the cache and says the same
    assert run(["data", "info", task, "--root", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == info


def test_info_human_readable_and_fraction(tmp_path, capsys):
    listops_release(tmp_path)
    assert run(["data", "info", "listops", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "splits: train 5, val 5, test 5" in out and "vocab_size 19" in out
    assert len(load_task("listops", tmp_path, fraction=0.5).train) == 2


def test_errors_are_one_line_exit_1(tmp_path, capsys):
    assert run(["data", "info", "pathx", "--root", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: data root") and "spt data prepare pathx" in err
    assert "Traceback" not in err
    d = listops_release(tmp_path)
    (d / "basic_test.tsv").write_text("Source\tTarget\n( [MAX 1 ] )\n")
    assert run(["data", "info", "listops", "--root", str(tmp_path)]) == 1
    assert "basic_test.tsv:2" in capsys.readouterr().err


def test_generate_then_info(tmp_path, capsys):
    root = str(tmp_path)
    assert run(["data", "generate", "listops", "--root", root, "--n-train", "30", "--n-val", "5",
                "--n-test", "5", "--min-length", "3", "--max-length", "60",
                "--max-depth", "5"]) == 0
    assert run(["data", "generate", "pathfinder", "--root", root, "--resolution", "64",
                "--n-images", "20"]) == 0
    capsys.readouterr()
    assert run(["data", "info", "listops", "--root", root, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["splits"] == {"train": 30, "val": 5, "test": 5} and info["generated"] is True
    assert run(["data", "generate", "listops", "--root", root, "--n-train", "1"]) == 1
    assert "--force" in capsys.readouterr().err
    from spt.data.pathfinder import load_pathfinder
    task = load_pathfinder(tmp_path, 64)
    assert task.spec.seq_len == 4096 and len(task.train) == 16
