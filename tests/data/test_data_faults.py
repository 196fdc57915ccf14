"""Faulty data as users get it: empty splits, sequences of length 0, a changed Pathfinder image
behind an existing cache, a read-only data folder, and out-of-range `spt data generate` arguments.
Each fault must end in one line that names the file (or flag) and the fix."""
import os
import re
import shutil
import tempfile
import warnings
import wave
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from official_formats import imdb_hub, parquet

from spt.data.cli import main
from spt.data.errors import DataFormatError
from spt.data.fixtures import write_fixtures
from spt.data.registry import TASK_DIRS, load_task

FIXTURE_TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "speech", "bidmc")


@pytest.fixture(scope="module")
def fixture_root(tmp_path_factory):
    """Official-format fixtures of the tasks above, written once; tests copy what they change."""
    root = tmp_path_factory.mktemp("fixtures")
    write_fixtures(root, FIXTURE_TASKS)
    return root


@pytest.fixture
def root_of(fixture_root, tmp_path):
    """root_of(task) -> a fresh data root holding a copy of that task's fixture."""
    def copy(task):
        shutil.copytree(fixture_root / TASK_DIRS[task], tmp_path / TASK_DIRS[task])
        return tmp_path
    return copy


# ------------------------------------------------------------------------------ empty splits

def _header_only(path):
    path.write_text("Source\tTarget\n")


def _no_rows(path):  # a parquet file of 0 rows, with the columns and schema of the real one
    pq.write_table(pq.read_table(path).slice(0, 0), path)


def _keep_images(n):
    def cut(d):
        lines = [ln for f in sorted((d / "metadata").glob("*.npy"))
                 for ln in f.read_text().splitlines(keepends=True)]
        for f in (d / "metadata").glob("*.npy"):
            f.write_text("")
        (d / "metadata" / "0.npy").write_text("".join(lines[:n]))
    return cut


def _keep_ts_rows(n):
    def cut(path):
        lines = path.read_text().splitlines(keepends=True)
        start = next(i for i, ln in enumerate(lines) if ln.strip().lower() == "@data") + 1
        path.write_text("".join(lines[:start + n]))
    return cut


# task, the file (relative to the task folder) and how a user ends up with it, the split, the
# words the message must hold
EMPTY_SPLITS = {
    "listops-val-header-only": ("listops", "basic_val.tsv", _header_only, "val",
                                ["basic_val.tsv holds no examples"]),
    "listops-val-empty-file": ("listops", "basic_val.tsv", lambda p: p.write_bytes(b""), "val",
                               ["basic_val.tsv holds no examples"]),
    "retrieval-eval-empty-file": ("retrieval", "new_aan_pairs.eval.tsv",
                                  lambda p: p.write_bytes(b""), "val",
                                  ["new_aan_pairs.eval.tsv holds no examples"]),
    "text-test-parquet-0-rows": ("text", "plain_text/test-00000-of-00001.parquet", _no_rows,
                                 "test", ["test-00000-of-00001.parquet holds no examples"]),
    "text-train-parquet-0-rows": ("text", "plain_text/train-00000-of-00001.parquet", _no_rows,
                                  "train", ["train-00000-of-00001.parquet holds no examples"]),
    "image-test-parquet-0-rows": ("image", "plain_text/test-00000-of-00001.parquet", _no_rows,
                                  "test", ["test-00000-of-00001.parquet holds no examples"]),
    "pathfinder-5-images": ("pathfinder", ".", _keep_images(5), "val",
                            ["metadata/*.npy", "cut of 5 examples", "at least 10 are needed"]),
    "pathfinder-no-images": ("pathfinder", ".", _keep_images(0), "train",
                             ["metadata/*.npy list no images"]),
    "speech-empty-validation-list": ("speech", "validation_list.txt",
                                     lambda p: p.write_text(""), "val",
                                     ["validation_list.txt lists no clips"]),
    "bidmc-2-training-rows": ("bidmc", "BIDMC32HR_TRAIN.ts", _keep_ts_rows(2), "val",
                              ["BIDMC32HR_TRAIN.ts", "cut of 2 examples", "at least 7"]),
}


@pytest.mark.parametrize("case", EMPTY_SPLITS)
def test_an_empty_split_is_an_error_naming_task_split_file_and_fix(root_of, case):
    task, rel, damage, split, words = EMPTY_SPLITS[case]
    root = root_of(task)
    damage(root / TASK_DIRS[task] / rel)
    with pytest.raises(DataFormatError) as err:
        load_task(task, root)
    msg = str(err.value)
    assert msg.startswith(f"task {task!r}: the {split} split is empty (0 examples): ")
    assert all(w in msg for w in words), msg
    assert f"spt data prepare {task} --root {root}" in msg and "\n" not in msg


def test_info_exits_1_with_one_line_on_an_empty_val_file_or_parquet(root_of, capsys):
    root = root_of("listops")
    _header_only(root / TASK_DIRS["listops"] / "basic_val.tsv")
    assert main(["data", "info", "listops", "--root", str(root)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: task 'listops': the val split is empty")
    assert "basic_val.tsv" in captured.err and captured.err.count("\n") == 1
    root = root_of("text")
    _no_rows(root / "imdb/plain_text/test-00000-of-00001.parquet")
    assert main(["data", "info", "text", "--root", str(root), "--json"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: task 'text': the test split is empty")
    assert "test-00000-of-00001.parquet" in err and err.count("\n") == 1


def test_an_empty_review_is_an_error_naming_file_and_record(tmp_path):
    imdb_hub(tmp_path)
    p = parquet(tmp_path / "imdb/plain_text/test-00000-of-00001.parquet",
                {"text": ["fine", "", "good"], "label": [0, 1, 1]})
    with pytest.raises(DataFormatError,
                       match=rf"^{re.escape(str(p))}: record 1: the review is empty \(0 bytes"):
        load_task("text", tmp_path)


def test_a_wav_of_no_samples_is_an_error_naming_the_clip(root_of):
    root = root_of("speech")
    clip = sorted((root / "speech_commands" / "yes").glob("*.wav"))[0]
    with wave.open(str(clip), "wb") as w:  # what a failed conversion leaves: a header, no frames
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
    with pytest.raises(DataFormatError, match=rf"^{re.escape(str(clip))}: the clip holds no"):
        load_task("speech", root)


def test_an_aan_pair_of_two_empty_documents_is_an_error(root_of):
    root = root_of("retrieval")
    p = root / TASK_DIRS["retrieval"] / "new_aan_pairs.test.tsv"
    with open(p, "a") as f:
        f.write("1\tP01-1\tW02-2\t\t\n")
    n = len(p.read_text().splitlines())
    with pytest.raises(DataFormatError, match=rf"^{re.escape(str(p))}:{n}: both documents"):
        load_task("retrieval", root)


# ------------------------------------------------------------- Pathfinder cache and its images

def _all_items(task):
    return [ds[i]["inputs"] for ds in (task.train, task.val, task.test) for i in range(len(ds))]


def test_a_replaced_or_truncated_png_behind_the_cache_is_seen(root_of):
    from official_formats import png_bytes

    root = root_of("pathfinder")
    d = root / TASK_DIRS["pathfinder"]
    task = load_task("pathfinder", root)  # builds the cache
    assert not any(bool((x == 1.0).all()) for x in _all_items(task))
    png = d / "imgs" / "0" / "sample_3.png"
    white = png_bytes(np.full((32, 32), 255, np.uint8))
    assert len(white) != png.stat().st_size
    png.write_bytes(white)  # replaced by another image: the next load reads the new pixels
    task = load_task("pathfinder", root)
    assert sum(bool((x == 1.0).all()) for x in _all_items(task)) == 1
    png.write_bytes(white[: len(white) // 2])  # truncated: the next load names it
    with pytest.raises(DataFormatError, match=r"sample_3.png \(0.npy:4\): cannot decode"):
        load_task("pathfinder", root)
    png.unlink()  # gone: named too
    with pytest.raises(DataFormatError, match=r"sample_3.png \(0.npy:4\): cannot read"):
        load_task("pathfinder", root)


# ------------------------------------------------------------------- a read-only data folder

def test_a_read_only_data_folder_caches_in_one_stable_place_said_once(root_of, tmp_path,
                                                                      monkeypatch):
    from spt.data import cache

    root = root_of("listops")
    data = root / TASK_DIRS["listops"]
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SPT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # where a throwaway folder would go
    os.chmod(data, 0o555)
    try:
        if os.access(data, os.W_OK):
            # running as root: the mode bits do not stop writes, so the folder is made read-only
            # for the cache through the check it uses
            monkeypatch.setattr(cache, "_writable",
                                lambda folder: not Path(folder).resolve().is_relative_to(
                                    data.resolve()))
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            first = load_task("listops", root)
            places = sorted((home / ".cache" / "spt").iterdir())
            meta = places[0] / "listops-L2048" / "meta.json"
            built = meta.stat().st_mtime_ns
            again = load_task("listops", root)
        notes = [str(w.message) for w in said if "not writable" in str(w.message)]
        assert len(places) == 1 and places[0].name.startswith("listops-1000-")
        assert meta.stat().st_mtime_ns == built  # reused, not rebuilt
        assert notes == [f"{data} is not writable: caching its decoded arrays in {places[0]} "
                         f"(set SPT_CACHE_DIR to choose the place)"]
        assert len(first.train) == len(again.train) == 4
        assert not (data / ".spt_cache").exists() and list(tmp.iterdir()) == []
        monkeypatch.setenv("SPT_CACHE_DIR", str(tmp_path / "elsewhere"))
        with pytest.warns(UserWarning, match=re.escape(f"arrays in {tmp_path / 'elsewhere'}/")):
            load_task("listops", root)
        assert [p.name for p in (tmp_path / "elsewhere").iterdir()] == [places[0].name]
    finally:
        os.chmod(data, 0o755)


def test_no_writable_place_for_a_cache_is_one_line_naming_both(root_of, tmp_path, monkeypatch,
                                                               capsys):
    from spt.data import cache

    root = root_of("listops")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # SPT_CACHE_DIR names a file: no folder can be made there
    monkeypatch.setenv("SPT_CACHE_DIR", str(blocked))
    monkeypatch.setattr(cache, "_writable", lambda folder: False)  # the data folder: read-only
    assert main(["data", "info", "listops", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot cache the arrays decoded from {root / TASK_DIRS['listops']}"
                          f": it is not writable and neither is {blocked}/listops-1000-")
    assert err.rstrip().endswith("set SPT_CACHE_DIR to a writable folder") and err.count("\n") == 1


# ------------------------------------------------------------ `spt data generate` arguments

def _usage_error(capsys, argv) -> str:
    """The one error line argparse prints for `argv` (exit code 2), checked to be one line."""
    with pytest.raises(SystemExit) as out:
        main(argv)
    assert out.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage: ") and sum(": error: " in ln for ln in err) == 1
    return err[-1]


BAD_ARGUMENTS = {  # argv after `data generate`, then what the error line must say
    "n-train-negative": (["listops", "--n-train", "-3"],
                         "argument --n-train: must be >= 1, got -3: every split needs examples"),
    "n-val-zero": (["listops", "--n-val", "0"], "argument --n-val: must be >= 1, got 0"),
    "max-length-below-min-length": (
        ["listops", "--max-length", "5"],
        "--max-length 5 leaves no length: an expression needs --min-length 500 < symbols < "
        "--max-length, so --max-length must be at least 502"),
    "max-length-below-smallest-expression": (
        ["listops", "--min-length", "0", "--max-length", "4"],
        "argument --max-length: must be in 5..2049, got 4: symbols, exclusive: the smallest "
        "expression, [OP a b ], has 4 symbols"),
    "max-length-beyond-reader": (["listops", "--max-length", "3000"],
                                 "argument --max-length: must be in 5..2049, got 3000"),
    "max-args-1": (["listops", "--max-args", "1"],
                   "argument --max-args: must be >= 2, got 1: an operator takes 2"),
    "max-depth-1": (["listops", "--max-depth", "1"], "argument --max-depth: must be >= 2, got 1"),
    "min-length-unreachable": (
        ["listops", "--max-depth", "2", "--min-length", "100", "--max-length", "200"],
        "--min-length 100 cannot be met: with --max-depth 2 and --max-args 10 the longest "
        "expression has 12 symbols"),
    "not-an-integer": (["listops", "--n-test", "ten"],
                       "argument --n-test: expected an integer, got 'ten'"),
    "pathfinder-too-few-images": (["pathfinder", "--n-images", "5"],
                                  "argument --n-images: must be >= 10, got 5: the reader's "
                                  "80/10/10 split needs 10 images"),
    "pathfinder-negative-seed": (["pathfinder", "--seed", "-1"],
                                 "argument --seed: must be >= 0, got -1"),
    "pathfinder-no-dashes": (["pathfinder", "--contour-length", "0"],
                             "argument --contour-length: must be >= 1, got 0"),
    "pathfinder-negative-distractors": (["pathfinder", "--n-distractors", "-1"],
                                        "argument --n-distractors: must be >= 0, got -1"),
    "pathfinder-zero-paddle": (["pathfinder", "--paddle-length", "0"],
                               "argument --paddle-length: must be > 0, got 0"),
    "pathfinder-nan-thickness": (["pathfinder", "--paddle-thickness", "nan"],
                                 "argument --paddle-thickness: must be > 0, got nan"),
    "pathfinder-negative-margin": (["pathfinder", "--paddle-margin", "-0.5"],
                                   "argument --paddle-margin: must be >= 0, got -0.5"),
    "pathfinder-continuity": (["pathfinder", "--continuity", "200"],
                              "argument --continuity: must be in 0..180, got 200"),
    "pathfinder-marker": (["pathfinder", "--marker-radius", "-1"],
                          "argument --marker-radius: must be > 0, got -1"),
}


# small sizes first (the argument under test, given later, wins), so that a check that lets a bad
# value through ends quickly instead of generating the default 100,000 examples
SMALL = {"listops": ["--n-train", "2", "--n-val", "2", "--n-test", "2"],
         "pathfinder": ["--n-images", "10"]}


@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_generate_refuses_an_out_of_range_argument_at_parse_time(tmp_path, capsys, case):
    argv, says = BAD_ARGUMENTS[case]
    line = _usage_error(capsys, ["data", "generate", argv[0], "--root", str(tmp_path / "r"),
                                 *SMALL[argv[0]], *argv[1:]])
    assert line.startswith(f"spt data generate {argv[0]}: error: ") and says in line, line
    assert not (tmp_path / "r").exists()  # nothing written


def test_fixtures_refuses_a_negative_seed(tmp_path, capsys):
    line = _usage_error(capsys, ["data", "fixtures", str(tmp_path / "fx"), "--seed", "-2"])
    assert "argument --seed: must be >= 0, got -2" in line
    assert not (tmp_path / "fx").exists()


def test_listops_knobs_with_too_few_expressions_end_in_one_line(tmp_path, capsys):
    # only the 400 expressions "[OP a b ]" have 3 < symbols < 5: 500 can never be found
    argv = ["data", "generate", "listops", "--root", str(tmp_path), "--n-train", "500",
            "--n-val", "1", "--n-test", "1", "--min-length", "3", "--max-length", "5",
            "--max-depth", "2", "--max-args", "2"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ListOps generator: found 400 of 500 distinct expressions")
    assert "ask for fewer examples" in err and err.count("\n") == 1
    assert not (tmp_path / "lra_release").exists()


def test_data_help_describes_the_commands_for_a_user(capsys):
    with pytest.raises(SystemExit) as out:
        main(["data", "--help"])
    assert out.value.code == 0
    text = capsys.readouterr().out
    assert "argparse" not in text and "registered" not in text
    for words in ("`prepare` downloads", "`info` reads", "`generate` writes", "`fixtures` writes"):
        assert words in " ".join(text.split()), words
