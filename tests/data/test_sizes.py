"""Planned split sizes: the official counts through the readers' own split rules, checked against
what the readers return on fixtures in the official formats."""
import json

import numpy as np
import pytest
from official_formats import pathfinder_release

from spt.data.datasets import RaggedTokenDataset
from spt.data.fixtures import write_fixtures
from spt.data.fractions import FRACTIONS, nested_subset, subset_size
from spt.data.generated import GENERATED_MARK
from spt.data.registry import TASK_NAMES, load_task
from spt.data.sizes import (
    PAPER_TASKS,
    official_counts,
    paper_split_sizes,
    skipped_images,
    split_sizes,
)

PAPER = {  # what the rules make of the official counts (the counts and their sources: sizes.py)
    "listops": (96_000, 2_000, 2_000),
    "text": (22_500, 2_500, 25_000),
    "retrieval": (147_086, 18_090, 17_437),
    "image": (45_000, 5_000, 10_000),
    "scifar": (45_000, 5_000, 10_000),
    "pathfinder": (160_000, 20_000, 20_000),
    "pathx": (160_000, 20_000, 20_000),
    "pathx256": (160_000, 20_000, 20_000),
    "speech": (84_843, 9_981, 11_005),
    "bidmc": (4_758, 792, 2_399),
}
TARGETS = {"bidmc": [{"target": t} for t in ("HR", "RR", "SpO2")]}


def _sizes(task) -> tuple:
    return len(task.train), len(task.val), len(task.test)


def test_every_paper_task_has_sizes():
    assert set(PAPER_TASKS) == set(TASK_NAMES) == set(PAPER)
    for name, want in PAPER.items():
        for options in TARGETS.get(name, [{}]):
            got = paper_split_sizes(name, **options)
            assert (got["train"], got["val"], got["test"]) == want, name
            assert all(isinstance(v, int) for v in got.values())


def test_fractions_are_the_nested_subset_sizes():
    for name in PAPER_TASKS:
        full = paper_split_sizes(name)
        trains = [paper_split_sizes(name, f)["train"] for f in FRACTIONS]
        assert trains == [subset_size(full["train"], f) for f in FRACTIONS], name
        assert trains == sorted(trains) and trains[-1] == full["train"]
        assert all(paper_split_sizes(name, f)["val"] == full["val"] for f in FRACTIONS)
    n = paper_split_sizes("image")["train"]  # the size nested_subset itself keeps, at full scale
    ds = RaggedTokenDataset(np.zeros(n, np.uint8), np.arange(n + 1), np.arange(n) % 10)
    for f in FRACTIONS:
        assert len(nested_subset(ds, f)) == paper_split_sizes("image", f)["train"]


def test_pathfinder_counts_drop_the_file_the_reader_skips(tmp_path):
    assert skipped_images(32, "curv_baseline") == 1 and skipped_images(128, "curv_baseline") == 0
    baseline = paper_split_sizes("pathfinder", difficulty="curv_baseline")
    assert sum(baseline.values()) == sum(paper_split_sizes("pathfinder").values()) - 1
    # the release's known-empty file in a fixture: the reader keeps 10 of 11 images, as the rule
    # says (10, so that the 80/10/10 cut leaves no split empty)
    pathfinder_release(tmp_path, difficulty="curv_baseline", n_folders=1, per_folder=11,
                       empty={(0, 2)})
    d = tmp_path / "lra_release" / "pathfinder32" / "curv_baseline"
    (d / "imgs/0/sample_2.png").rename(d / "imgs/0/sample_172.png")
    (d / "metadata/0.npy").write_text((d / "metadata/0.npy").read_text()
                                      .replace("sample_2.png", "sample_172.png"))
    with pytest.warns(UserWarning, match="sample_172.png"):
        task = load_task("pathfinder", tmp_path, difficulty="curv_baseline")
    want = split_sizes("pathfinder", {"images": 11 - skipped_images(32, "curv_baseline")})
    assert _sizes(task) == (want["train"], want["val"], want["test"])


@pytest.fixture(scope="module")
def fixture_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fixtures")
    return root, write_fixtures(root)


def _fixture_counts(name: str, folder) -> dict:
    """The counts of the files spt.data.fixtures wrote, keyed as split_sizes takes them."""
    written = json.loads((folder / GENERATED_MARK).read_text())["counts"]
    if name == "speech":  # the word clips, and the two lists
        return {"clips": sum(written.values()), "val": written["val"], "test": written["test"]}
    return written


@pytest.mark.parametrize("name", PAPER_TASKS)
def test_rule_matches_the_reader_on_official_format_fixtures(fixture_root, name):
    root, folders = fixture_root
    counts = _fixture_counts(name, folders[name])
    assert set(counts) == set(official_counts(name))
    for options in TARGETS.get(name, [{}]):
        for fraction in (1.0, 0.5, 0.1):
            task = load_task(name, root, fraction=fraction, **options)
            want = split_sizes(name, counts, fraction)
            assert _sizes(task) == (want["train"], want["val"], want["test"]), (name, fraction)


def test_bad_input_names_the_parameter_and_the_choices():
    with pytest.raises(ValueError, match="unknown task 'cifar'; choose from listops, text"):
        paper_split_sizes("cifar")
    with pytest.raises(ValueError, match=r"bidmc target must be one of \('RR', 'HR', 'SpO2'\)"):
        paper_split_sizes("bidmc", target="BP")
    with pytest.raises(ValueError, match=r"task 'text' has no option\(s\) \['tokens'\]; its "
                                         r"loader takes \['seq_len'\]"):
        paper_split_sizes("text", tokens=True)
    with pytest.raises(ValueError, match="pathx difficulty must be one of"):
        paper_split_sizes("pathx", difficulty="curv_contour_length_20")
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\]"):
        paper_split_sizes("listops", 1.5)
    with pytest.raises(ValueError, match=r"counts must have the keys \['clips', 'val', 'test'\]"):
        split_sizes("speech", {"train": 10, "val": 1, "test": 1})
    assert paper_split_sizes("image", tokens=True) == paper_split_sizes("image")  # known options
    assert paper_split_sizes("speech", standardise="global") == paper_split_sizes("speech")
