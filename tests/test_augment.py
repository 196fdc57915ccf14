"""Data augmentation (spt.data.augment, spt.data.image_ops): ListOps operand shuffles keep the
value; each image op against a hand-computed case; the AutoAugment table; the per-task pipelines
keep shape, dtype and range; items are deterministic in (seed, epoch, index)."""
import random

import numpy as np
import pytest
import torch

from spt.data import image_ops as ops
from spt.data.augment import (
    CIFAR10_POLICY,
    augment_pathfinder,
    autoaugment,
    magnitude,
    shuffle_listops,
    to_intensities,
)
from spt.data.digits import TensorSequenceDataset
from spt.data.listops import END, VOCAB, evaluate, generate_listops, tokenize
from spt.data.registry import TASKS, augmented, has_augmentation, source_of
from spt.data.task import N_SPECIAL, TaskSpec

ID_TO_SYMBOL = {i: s for s, i in VOCAB.items() if s != "[SUM"}


def value_of(ids) -> int:
    """The value of a ListOps token sequence, by the release's semantics (listops.evaluate)."""
    stack = [[]]
    for t in (ID_TO_SYMBOL[int(i)] for i in ids):
        if t.startswith("["):
            stack.append([t])
        elif t == END:
            node = stack.pop()
            stack[-1].append(evaluate(node[0], node[1:]))
        else:
            stack[-1].append(int(t))
    (value,) = stack[0]
    return value


def ids_of(source: str) -> np.ndarray:
    return np.array([VOCAB[t] for t in tokenize(source)])


LISTOPS = TaskSpec(name="listops", seq_len=2048, num_classes=10, vocab_size=19, mask_ratio=0.1)


def grey(rows) -> np.ndarray:
    """A hand-written grey image: rows of intensities -> (H, W, 1) float."""
    return np.asarray(rows, dtype=np.float64)[..., None]


# -------------------------------------------------------------------------------------- ListOps

def test_listops_shuffle_keeps_value_tokens_and_length_and_changes_order():
    rng = np.random.default_rng(0)
    examples = generate_listops(200, random.Random(0), max_depth=5, max_args=5, min_length=10,
                                max_length=120)
    changed = 0
    for source, label in examples:
        ids = ids_of(source)
        assert value_of(ids) == label  # the test's evaluator agrees with the generator
        out = shuffle_listops(ids, rng)
        assert value_of(out) == label
        assert len(out) == len(ids) and sorted(out.tolist()) == sorted(ids.tolist())
        changed += not np.array_equal(out, ids)
    assert changed > 0.8 * len(examples)


def test_listops_shuffle_moves_subtrees_whole():
    ids = ids_of("[MAX 1 [MIN 2 3 ] 4 ]")
    seen = {tuple(shuffle_listops(ids, np.random.default_rng(s)).tolist()) for s in range(200)}
    # the root's 3 operands in 3! orders, times the 2 orders of [MIN 2 3 ]
    assert len(seen) == 12
    mn, two, three, end = VOCAB["[MIN"], VOCAB["2"], VOCAB["3"], VOCAB["]"]
    for s in seen:
        assert s[0] == VOCAB["[MAX"] and s[-1] == end
        k = s.index(mn)
        assert s[k:k + 4] in ((mn, two, three, end), (mn, three, two, end))
    assert shuffle_listops(ids_of("7"), np.random.default_rng(0)).tolist() == [VOCAB["7"]]


def test_listops_shuffle_rejects_bad_tokens():
    with pytest.raises(ValueError, match="not a ListOps symbol"):
        shuffle_listops(np.array([VOCAB["[MAX"], VOCAB["1"], 0, VOCAB["]"]]),
                        np.random.default_rng(0))
    with pytest.raises(ValueError, match="never closed"):
        shuffle_listops(ids_of("[MAX 1 2 ]")[:-1], np.random.default_rng(0))


# ---------------------------------------------------------------------------------- image ops

def test_photometric_ops_on_hand_computed_pixels():
    img = grey([[0, 100], [200, 255]])
    assert ops.invert(img)[..., 0].tolist() == [[255, 155], [55, 0]]
    assert ops.solarize(img, 128)[..., 0].tolist() == [[0, 100], [55, 0]]
    assert ops.posterize(grey([[0, 100], [203, 255]]), 2)[..., 0].tolist() == [[0, 64],
                                                                                [192, 192]]
    assert ops.autocontrast(grey([[50, 100], [100, 150]]))[..., 0].tolist() == [[0, 127.5],
                                                                                [127.5, 255]]
    assert ops.brightness(img, 1.5)[..., 0].tolist() == [[0, 150], [255, 255]]
    # contrast blends with the mean (138.75)
    np.testing.assert_allclose(ops.contrast(img, 0.0)[..., 0], np.full((2, 2), 138.75))
    np.testing.assert_array_equal(ops.color(img, 0.3), img)  # grey: nothing to saturate
    # equalize: 4 pixels of distinct values -> step = (4 - 1) // 255 = 0 -> unchanged
    np.testing.assert_array_equal(ops.equalize(img), img)


def test_equalize_spreads_a_histogram():
    # 300 pixels at 10, 300 at 20, 424 at 30 (a 32x32 image): step = 600 // 255 = 2,
    # lut[10] = 0, lut[20] = (300 + 1) // 2 = 150, lut[30] = (600 + 1) // 2 = 300 -> 255
    v = np.array([10] * 300 + [20] * 300 + [30] * 424, dtype=np.float64).reshape(32, 32, 1)
    out = ops.equalize(v)
    assert sorted(set(out.ravel().tolist())) == [0, 150, 255]


def test_sharpness_blends_with_the_smoothed_interior_only():
    img = grey([[0, 0, 0], [0, 13, 0], [0, 0, 0]])
    out = ops.sharpness(img, 0.0)  # factor 0: the smoothed image itself
    assert out[1, 1, 0] == 5.0 and out[0, 0, 0] == 0.0  # (13 * 5) / 13; border kept
    np.testing.assert_array_equal(ops.sharpness(img, 1.0), img)


def test_geometric_ops_on_hand_computed_pixels():
    img = grey([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    assert ops.hflip(img)[..., 0].tolist() == [[3, 2, 1], [6, 5, 4], [9, 8, 7]]
    assert ops.vflip(img)[..., 0].tolist() == [[7, 8, 9], [4, 5, 6], [1, 2, 3]]
    assert ops.affine(img, translate=(1, 0))[..., 0].tolist() == [[0, 1, 2], [0, 4, 5],
                                                                  [0, 7, 8]]
    assert ops.affine(img, translate=(0, -1), fill=9)[..., 0].tolist() == [[4, 5, 6], [7, 8, 9],
                                                                           [9, 9, 9]]
    # shear_x 1: x_in = x_out - y_out; the top row reads from the right, the bottom from the left
    assert ops.affine(img, shear=(1.0, 0.0))[..., 0].tolist() == [[2, 3, 0], [4, 5, 6],
                                                                  [0, 7, 8]]
    # a quarter turn counter-clockwise, on an odd and an even side
    np.testing.assert_array_equal(ops.affine(img, angle=90.0), np.rot90(img))
    four = np.arange(16.0).reshape(4, 4, 1)
    np.testing.assert_array_equal(ops.affine(four, angle=-90.0), np.rot90(four, -1))
    np.testing.assert_array_equal(ops.affine(four), four)


# ------------------------------------------------------------------------------- AutoAugment

def test_cifar10_policy_table():
    assert len(CIFAR10_POLICY) == 25 and all(len(sub) == 2 for sub in CIFAR10_POLICY)
    assert CIFAR10_POLICY[0] == (("Invert", 0.1, None), ("Contrast", 0.2, 6))
    assert CIFAR10_POLICY[-1] == (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None))
    # torchvision's magnitudes: 10 bins each
    assert [magnitude("Posterize", k, 32) for k in range(10)] == [8, 8, 7, 7, 6, 6, 5, 5, 4, 4]
    assert magnitude("TranslateX", 9, 32) == 14  # int(150 / 331 * 32)
    assert magnitude("Solarize", 0, 32) == 255 and magnitude("Solarize", 9, 32) == 0
    assert magnitude("Rotate", 9, 32) == 30 and magnitude("Sharpness", 9, 32) == pytest.approx(0.9)


def test_autoaugment_keeps_shape_and_range_and_varies():
    img = np.random.default_rng(0).integers(0, 256, (8, 8, 1)).astype(np.float64)
    outs = [autoaugment(img, np.random.default_rng(s)) for s in range(50)]
    assert all(o.shape == img.shape and o.min() >= 0 and o.max() <= 255 for o in outs)
    assert sum(not np.array_equal(o, img) for o in outs) > 25


# -------------------------------------------------------------------- items and determinism

def pixel_items(spec: TaskSpec, n: int = 6, side: int = 8):
    """n random items in spec's pixel encoding."""
    g = torch.Generator().manual_seed(0)
    if spec.is_tokens:
        x = torch.randint(0, spec.vocab_size - N_SPECIAL, (n, side * side), generator=g) + N_SPECIAL
    elif spec.levels:
        k = torch.randint(0, spec.levels, (n, side * side, 1), generator=g).float()
        x = 2 * k / (spec.levels - 1) - 1
    else:
        x = torch.randn(n, side * side, 1, generator=g)
    return TensorSequenceDataset(x, torch.arange(n) % 2)


SPECS = [TaskSpec(name="image", seq_len=64, num_classes=10, vocab_size=N_SPECIAL + 256),
         TaskSpec(name="image", seq_len=64, num_classes=10, d_input=1),
         TaskSpec(name="digits8", seq_len=64, num_classes=10, vocab_size=N_SPECIAL + 17),
         TaskSpec(name="digits8", seq_len=64, num_classes=10, d_input=1),
         TaskSpec(name="pathfinder", seq_len=64, num_classes=2, d_input=1, levels=256),
         TaskSpec(name="pathx", seq_len=64, num_classes=2, vocab_size=N_SPECIAL + 256)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{'tok' if s.is_tokens else 'f'}")
def test_pixel_items_keep_format_and_are_deterministic(spec):
    ds = pixel_items(spec)
    a, b = augmented(ds, spec, seed=3, epoch=1), augmented(ds, spec, seed=3, epoch=1)
    other = augmented(ds, spec, seed=3, epoch=2)
    differs = 0
    for i in range(len(ds)):
        x, y = ds[i]["inputs"], a[i]["inputs"]
        assert y.shape == x.shape and y.dtype == x.dtype and a[i]["label"] == ds[i]["label"]
        if spec.is_tokens:
            assert N_SPECIAL <= y.min() and y.max() < spec.vocab_size
        elif spec.levels:
            k = (y + 1) * (spec.levels - 1) / 2
            assert torch.allclose(k, k.round(), atol=1e-4) and y.min() >= -1 and y.max() <= 1
        else:
            assert y.min() >= x.min() - 1e-5 and y.max() <= x.max() + 1e-5
        assert torch.equal(y, b[i]["inputs"])  # same (seed, epoch, i): same item
        assert torch.equal(a[i]["inputs"], y)  # and again, in any order
        differs += not torch.equal(y, other[i]["inputs"])
    assert differs >= len(ds) - 1  # another epoch: another augmentation


def test_pixel_round_trip_is_exact():
    for spec in SPECS:
        x = pixel_items(spec)[0]["inputs"]
        img, back = to_intensities(x, spec)
        assert img.shape == (8, 8, 1) and img.min() >= 0 and img.max() <= 255
        torch.testing.assert_close(back(img), x)


def test_pathfinder_pipeline_flips_and_keeps_the_picture():
    # a bright dot at the top left: after any draw it stays a single dot somewhere
    img = np.zeros((32, 32, 1))
    img[8, 8] = 255.0
    corners = set()
    for s in range(40):
        out = augment_pathfinder(img, np.random.default_rng(s))
        assert (out > 0).sum() <= 1
        if (out > 0).any():
            r, c = np.argwhere(out[..., 0] > 0)[0]
            corners.add((r < 16, c < 16))
    assert len(corners) == 4  # both flips happen


def test_other_keys_pass_through_and_listops_items():
    ids = torch.from_numpy(ids_of("[SM 1 [MED 2 3 4 ] 5 ]"))
    ds = [{"inputs": ids, "label": torch.tensor(9), "extra": "kept"}]
    item = augmented(ds, LISTOPS, seed=0, epoch=0)[0]
    assert item["extra"] == "kept" and item["inputs"].dtype == ids.dtype
    assert value_of(item["inputs"]) == value_of(ids) == 9


def test_tasks_with_and_without_augmentation():
    for name in ("listops", "image", "scifar", "digits16", "digits16_on32", "pathfinder",
                 "pathx", "pathx256"):
        assert has_augmentation(TaskSpec(name=name, seq_len=4, num_classes=2, d_input=1))
    text = TaskSpec(name="text", seq_len=4, num_classes=2, vocab_size=10)
    assert not has_augmentation(text)
    with pytest.raises(ValueError, match="'text'.*listops") as e:
        augmented([], text, seed=0, epoch=0)
    assert all(n in str(e.value) for n, s in TASKS.items() if s.augmentation)
    assert source_of(TaskSpec(name="pathx256", seq_len=4, num_classes=2, d_input=1)) is \
        TASKS["pathx256"]
    assert source_of(TaskSpec(name="mine", seq_len=4, num_classes=2, d_input=1)) is None
    bad = TensorSequenceDataset(torch.zeros(1, 63, 1), torch.zeros(1, dtype=torch.long))
    with pytest.raises(ValueError, match="63 pixels"):
        augmented(bad, SPECS[1], 0, 0)[0]


def test_photometric_ops_match_pil():
    """PIL's ImageOps / ImageEnhance (what torchvision's ops follow) on a random 8-bit image: equal
    up to PIL's rounding to integers (Contrast: PIL also rounds the mean, hence up to 1.5)."""
    from PIL import Image, ImageEnhance, ImageOps

    u8 = np.random.default_rng(1).integers(20, 230, (12, 12), dtype=np.uint8)
    u8[0, 0], u8[5, 5] = 3, 250
    pil, img = Image.fromarray(u8, "L"), u8.astype(np.float64)[..., None]
    cases = [(ImageOps.invert(pil), ops.invert(img)),
             (ImageOps.solarize(pil, 100), ops.solarize(img, 100)),
             (ImageOps.posterize(pil, 3), ops.posterize(img, 3)),
             (ImageOps.autocontrast(pil), ops.autocontrast(img)),
             (ImageOps.equalize(pil), ops.equalize(img)),
             (ImageEnhance.Brightness(pil).enhance(1.4), ops.brightness(img, 1.4)),
             (ImageEnhance.Contrast(pil).enhance(0.3), ops.contrast(img, 0.3)),
             (ImageEnhance.Sharpness(pil).enhance(1.8), ops.sharpness(img, 1.8)),
             (ImageEnhance.Sharpness(pil).enhance(0.2), ops.sharpness(img, 0.2))]
    for k, (want, got) in enumerate(cases):
        np.testing.assert_allclose(got[..., 0], np.asarray(want, dtype=np.float64), atol=1.5,
                                   err_msg=f"case {k}")


def test_augmented_items_pickle_for_worker_processes():
    import pickle

    for spec in SPECS[:2] + [LISTOPS]:
        ds = ([{"inputs": torch.from_numpy(ids_of("[MAX 1 2 3 ]")), "label": torch.tensor(3)}]
              if spec is LISTOPS else pixel_items(spec))
        a = augmented(ds, spec, seed=1, epoch=4)
        assert torch.equal(pickle.loads(pickle.dumps(a))[0]["inputs"], a[0]["inputs"])


# ------------------------------------------------------------- TrainConfig.augment in training
def _train_cfg(**kw):
    from spt.config import TrainConfig
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=1, progress=False, seed=0), **kw})


def test_training_reads_the_augmented_items_and_only_in_training(tmp_path, monkeypatch):
    from spt.config import TransformerConfig
    from spt.data import digits_task
    from spt.train import engine, train_from_scratch
    task = digits_task(size=8, n_train=32, val_size=20, test_size=20, tokens=True)
    model = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0,
                              max_len=64)
    calls = []

    def spy(dataset, spec, seed, epoch):
        calls.append((dataset is task.train, spec.name, seed, epoch))
        return augmented(dataset, spec, seed, epoch)
    monkeypatch.setattr(engine, "augmented", spy)
    plain = train_from_scratch(task, model, _train_cfg(epochs=2), tmp_path / "a")
    assert not calls
    aug = train_from_scratch(task, model, _train_cfg(epochs=2, augment=True), tmp_path / "b")
    assert calls == [(True, "digits8", 0, 0), (True, "digits8", 0, 1)]  # train split, each epoch
    w = "backbone.encoder.embed.weight"
    assert not torch.equal(plain.model.state_dict()[w], aug.model.state_dict()[w])


def test_augment_on_a_task_without_one_is_refused_before_training(tmp_path):
    from spt.data.lagged import lagged_task
    from spt.ssm_config import SSMConfig
    from spt.train import train_from_scratch
    task = lagged_task(seq_len=16, lag=4, symbols=3, n_train=16, val_size=8, test_size=8)
    model = SSMConfig(kind="s4d", d_model=8, n_layers=1, d_state=4, max_len=16)
    with pytest.raises(ValueError, match="lagged"):
        train_from_scratch(task, model, _train_cfg(augment=True), tmp_path / "c")
    assert not (tmp_path / "c" / "last.pt").exists()
