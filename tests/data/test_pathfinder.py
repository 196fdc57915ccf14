"""Pathfinder reader on a release-layout fixture; images from spt.data.pathfinder_generator through
the same reader."""
from collections import deque

import numpy as np
import pytest
import torch
from official_formats import pathfinder_release

from spt.data import DataFormatError, DataMissingError
from spt.data.pathfinder import load_pathfinder
from spt.data.pathfinder_generator import PathfinderKnobs, generate_pathfinder, write_pathfinder


def _pixel_to_key(v: float) -> tuple:
    v = int(round(v))
    return v // 10, v % 10


def test_release_layout_labels_and_80_10_10_split(tmp_path):
    _, labels = pathfinder_release(tmp_path, n_folders=3, per_folder=10)  # 30 images
    task = load_pathfinder(tmp_path, 32)
    s = task.spec
    assert (s.name, s.seq_len, s.d_input, s.num_classes) == ("pathfinder", 1024, 1, 2)
    assert s.mask_ratio == 0.5
    assert (len(task.train), len(task.val), len(task.test)) == (24, 3, 3)
    seen = []
    for split in (task.train, task.val, task.test):
        for item in split:
            x = item["inputs"]
            assert x.shape == (1024, 1) and x.dtype == torch.float32
            assert float(x.min()) >= -1 and float(x.max()) <= 1
            pixel = (float(x[0, 0]) + 1) * 127.5
            key = _pixel_to_key(pixel)
            assert int(item["label"]) == labels[key]
            seen.append(key)
    assert sorted(seen) == sorted(labels)  # every image once, no overlap between splits
    again = load_pathfinder(tmp_path, 32)  # fixed seed: the same split every time
    assert np.array_equal(again.val.index, task.val.index)


def test_known_empty_release_image_is_skipped_and_reported(tmp_path):
    # 11 images: 10 readable ones, the fewest whose 80/10/10 cut leaves none of the splits empty
    pathfinder_release(tmp_path, difficulty="curv_baseline", n_folders=1, per_folder=11,
                       empty={(0, 172 % 10)})  # stand-in name below
    d = tmp_path / "lra_release" / "pathfinder32" / "curv_baseline"
    # rename the empty sample to the release's known-empty file name
    (d / "imgs/0/sample_2.png").rename(d / "imgs/0/sample_172.png")
    meta = (d / "metadata/0.npy").read_text().replace("sample_2.png", "sample_172.png")
    (d / "metadata/0.npy").write_text(meta)
    with pytest.warns(UserWarning, match="sample_172.png"):
        task = load_pathfinder(tmp_path, 32, difficulty="curv_baseline")
    assert len(task.train) + len(task.val) + len(task.test) == 10


def test_other_empty_or_corrupt_png_is_an_error(tmp_path):
    d, _ = pathfinder_release(tmp_path, n_folders=1, per_folder=5, empty={(0, 3)})
    with pytest.raises(DataFormatError, match=r"sample_3.png \(0.npy:4\): cannot decode"):
        load_pathfinder(tmp_path, 32)
    (d / "imgs/0/sample_3.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(DataFormatError, match=r"sample_3.png \(0.npy:4\)"):
        load_pathfinder(tmp_path, 32)
    (d / "imgs/0/sample_3.png").unlink()
    with pytest.raises(DataFormatError, match=r"sample_3.png \(0.npy:4\): cannot read"):
        load_pathfinder(tmp_path, 32)


def test_malformed_metadata_and_missing_folder(tmp_path):
    with pytest.raises(DataMissingError, match="spt data prepare pathx .*generate pathfinder"):
        load_pathfinder(tmp_path, 128)
    d, _ = pathfinder_release(tmp_path, n_folders=1, per_folder=3)
    with open(d / "metadata/0.npy", "a") as f:
        f.write("imgs/0 sample_0.png 0\n")
    with pytest.raises(DataFormatError, match=r"0.npy:4: expected"):
        load_pathfinder(tmp_path, 32)


def test_binary_npy_metadata_is_read_too(tmp_path):
    d, labels = pathfinder_release(tmp_path, n_folders=1, per_folder=10)
    rows = [line.split() for line in (d / "metadata/0.npy").read_text().splitlines()]
    (d / "metadata/0.npy").unlink()
    np.save(d / "metadata/0.npy", np.array(rows))
    task = load_pathfinder(tmp_path, 32)
    got = sorted(int(task.train.labels[i]) for i in range(len(task.train)))
    assert len(got) == 8 and sum(got) + int(task.val.labels.sum() + task.test.labels.sum()) == 5


def _components(img: np.ndarray) -> np.ndarray:
    """4-connected component ids of the non-zero pixels (an independent flood fill)."""
    comp = np.full(img.shape, -1)
    n = 0
    for start in zip(*np.nonzero(img)):
        if comp[start] >= 0:
            continue
        comp[start] = n
        todo = deque([start])
        while todo:
            i, j = todo.popleft()
            for a, b in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)):
                if 0 <= a < img.shape[0] and 0 <= b < img.shape[1] and img[a, b] and comp[a, b] < 0:
                    comp[a, b] = n
                    todo.append((a, b))
        n += 1
    return comp


def test_generated_label_means_markers_on_one_contour():
    # solid contours (no gaps) and no distractors: the label is then visible as connectivity
    knobs = PathfinderKnobs(contour_length=6, n_distractors=0, paddle_margin=0.0,
                            paddle_length=5.0, paddle_thickness=1.5, marker_radius=3.5)
    rng = np.random.default_rng(0)
    images, labels = generate_pathfinder(40, 64, rng, knobs)
    assert images.shape == (40, 64, 64) and images.dtype == np.uint8
    assert 10 < labels.sum() < 30
    for img, y in zip(images, labels):
        comp = _components(img > 60)
        # markers: the solid discs, the only parts that survive an erosion of the bright pixels
        marks = _components(_erode(img > 200, 1))
        ids, sizes = np.unique(marks[marks >= 0], return_counts=True)
        assert len(ids) == 2
        blobs = ids[np.argsort(sizes)[-2:]]
        where = [tuple(np.argwhere(marks == b)[0]) for b in blobs]
        same = comp[where[0]] == comp[where[1]]
        assert same == bool(y)


def _erode(mask: np.ndarray, r: int) -> np.ndarray:
    out = mask.copy()
    for di in range(-r, r + 1):
        for dj in range(-r, r + 1):
            out &= np.roll(np.roll(mask, di, 0), dj, 1)
    return out


def test_generated_images_read_by_the_release_reader(tmp_path):
    out = tmp_path / "lra_release" / "pathfinder32" / "curv_contour_length_14"
    write_pathfinder(out, 25, 32, seed=1, per_folder=10, batch=10)
    assert sorted(p.name for p in (out / "metadata").iterdir()) == ["0.npy", "1.npy", "2.npy"]
    task = load_pathfinder(tmp_path, 32)
    assert len(task.train) + len(task.val) + len(task.test) == 25
    rng = np.random.default_rng(1)  # the same images, regenerated in the same batches
    imgs, labels = zip(*(generate_pathfinder(n, 32, rng) for n in (10, 10, 5)))
    imgs, labels = np.concatenate(imgs), np.concatenate(labels)
    full = task.train.select(np.arange(len(task.train)))
    for ds in (full, task.val, task.test):
        for pos, row in enumerate(ds.index):
            item = ds[pos]
            got = np.round((item["inputs"][:, 0].numpy() + 1) * 127.5).astype(np.uint8)
            assert np.array_equal(got, imgs[row].reshape(-1))
            assert int(item["label"]) == labels[row]
    with pytest.raises(FileExistsError):
        write_pathfinder(out, 5, 32)


def test_extra_train_adds_easier_images_to_train_only(tmp_path):
    from spt.data.fractions import subset_size
    from spt.data.pathfinder import EASIER
    from spt.data.registry import load_task

    _, labels = pathfinder_release(tmp_path, n_folders=3, per_folder=10)  # 30 hard images
    _, base = pathfinder_release(tmp_path, difficulty="curv_baseline", n_folders=1, per_folder=7)
    _, nine = pathfinder_release(tmp_path, difficulty="curv_contour_length_9", n_folders=2,
                                 per_folder=4)
    plain = load_pathfinder(tmp_path, 32)
    task = load_pathfinder(tmp_path, 32, extra_train=EASIER)
    assert len(task.train) == 24 + 7 + 8 and "curv_baseline" in task.spec.description
    for split in ("val", "test"):  # the hard set's, untouched
        a, b = getattr(plain, split), getattr(task, split)
        assert np.array_equal(a.index, b.index)
        assert all(torch.equal(a[i]["inputs"], b[i]["inputs"]) for i in range(len(a)))
    for i in range(24):
        assert torch.equal(task.train[i]["inputs"], plain.train[i]["inputs"])
    extra = [_pixel_to_key((float(task.train[i]["inputs"][0, 0]) + 1) * 127.5)
             for i in range(24, 39)]
    assert extra == sorted(base) + sorted(nine)  # every easier image once, in metadata order
    want = [base[k] for k in sorted(base)] + [nine[k] for k in sorted(nine)]
    assert [int(task.train[i]["label"]) for i in range(24, 39)] == want
    assert task.train.labels.tolist()[24:] == want
    import pickle
    again = pickle.loads(pickle.dumps(task.train))  # DataLoader workers started by "spawn"
    assert torch.equal(again[30]["inputs"], task.train[30]["inputs"])
    tokens = load_pathfinder(tmp_path, 32, tokens=True, extra_train=EASIER)
    assert tokens.train[30]["inputs"].dtype == torch.long and len(tokens.train) == 39
    half = load_task("pathfinder", tmp_path, fraction=0.5, extra_train=EASIER)
    assert len(half.train) == subset_size(39, 0.5) and len(half.val) == 3
    with pytest.raises(ValueError, match="extra_train"):
        load_pathfinder(tmp_path, 32, extra_train="curv_baseline")
    import shutil
    shutil.rmtree(tmp_path / "lra_release" / "pathfinder32" / "curv_baseline")
    with pytest.raises(DataMissingError, match="curv_baseline/metadata not found.*"
                       "--contour-length 6 --difficulty curv_baseline"):
        load_pathfinder(tmp_path, 32, extra_train=EASIER)
    shutil.rmtree(tmp_path / "lra_release" / "pathfinder32" / "curv_contour_length_9")
    with pytest.raises(DataMissingError, match="curv_contour_length_9/metadata not found.*"
                       "generate pathfinder --resolution 32 --contour-length 9 --root"):
        load_pathfinder(tmp_path, 32, extra_train=("curv_contour_length_9",))
