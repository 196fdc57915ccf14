"""The embedded digits task: fixed, disjoint, stratified splits; nested subsets; canvas; tokens."""
import pytest
import torch

from spt.data import digits_task
from spt.data.task import N_SPECIAL


def as_set(ds):
    return {tuple(ds[i]["inputs"].flatten().tolist()) + (int(ds[i]["label"]),) for i in range(len(ds))}


def test_splits_are_fixed_disjoint_and_stratified():
    a, b = digits_task(size=8), digits_task(size=8)
    assert (len(a.train), len(a.val), len(a.test)) == (1797 - 800, 300, 500)
    assert torch.equal(a.train.inputs, b.train.inputs)  # independent of any run seed
    tr, va, te = as_set(a.train), as_set(a.val), as_set(a.test)
    assert not (tr & te) and not (va & te) and not (tr & va)
    counts = torch.bincount(a.test.labels, minlength=10)
    assert counts.min() == 50 and counts.max() == 50


def test_training_subsets_are_nested():
    small, big, full = (digits_task(size=8, n_train=n) for n in (50, 200, None))
    assert torch.equal(small.train.inputs, big.train.inputs[:50])
    assert torch.equal(big.train.inputs, full.train.inputs[:200])
    assert torch.equal(small.test.inputs, full.test.inputs)
    assert len(digits_task(size=8, fraction=0.1).train) == round(0.1 * 997)
    with pytest.raises(ValueError, match="n_train"):
        digits_task(size=8, n_train=5000)


def test_upsampled_continuous_inputs_are_standardised():
    t = digits_task(size=16, n_train=100)
    x = t.train[0]["inputs"]
    assert x.shape == (256, 1) and x.dtype == torch.float32 and t.spec.seq_len == 256
    full = digits_task(size=16).train.inputs
    assert abs(full.mean().item()) < 1e-4 and abs(full.std().item() - 1) < 1e-3


def test_canvas_places_each_scan_whole_at_a_fixed_offset():
    plain = digits_task(size=8, tokens=True)
    t = digits_task(size=8, canvas=12, tokens=True)
    assert t.spec.seq_len == 144 and t.spec.vocab_size == N_SPECIAL + 17
    offsets = set()
    for i in range(20):
        img = t.train[i]["inputs"].view(12, 12) - N_SPECIAL
        ref = plain.train[i]["inputs"].view(8, 8) - N_SPECIAL
        hits = [(r, c) for r in range(5) for c in range(5)
                if torch.equal(img[r:r + 8, c:c + 8], ref) and img.sum() == ref.sum()]
        assert hits, f"image {i} is not its scan on a blank canvas"
        offsets.add(hits[0])
    assert len(offsets) > 5  # positions vary between images
    assert int(t.train.inputs.min()) == N_SPECIAL and int(t.train.inputs.max()) == N_SPECIAL + 16
