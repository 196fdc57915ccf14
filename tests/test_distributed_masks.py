"""Masked pretraining on 2 ranks (torchrun, gloo, CPU) equals pretraining in one process.

Each example's mask depends only on (seed, epoch, dataset index) (it is drawn when the item is
read: spt.train.objectives.MaskedItems), so how a global batch is cut over ranks - and how each
rank pads its part - changes nothing. The task has sequences of different lengths, so the ranks' parts
are padded differently, and the last global batch holds one example, so rank 1 runs a weight-0
dummy shard.
This file is also the worker torchrun launches (``__main__`` at the bottom).
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data.task import N_SPECIAL, Task, TaskSpec

pytestmark = pytest.mark.serial  # torchrun with two ranks on a port of its own

HERE = Path(__file__).resolve()
MODEL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_len=48)
OBJECTIVE = ObjectiveConfig("masked", 0.3, "ce")
SPEC = TaskSpec("ragged", seq_len=48, num_classes=3, vocab_size=N_SPECIAL + 8)


class RaggedTokens(Dataset):
    """n token sequences of 8..40 tokens with a little structure (runs of a repeated symbol)."""

    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.lengths = torch.randint(8, 41, (n,), generator=g).tolist()
        self.items = [torch.randint(N_SPECIAL, SPEC.vocab_size, (L // 2 + 1,), generator=g)
                      .repeat_interleave(2)[:L] for L in self.lengths]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return {"inputs": self.items[i], "label": torch.tensor(i % 3)}


def make_task() -> Task:
    return Task(SPEC, RaggedTokens(33, 0), RaggedTokens(13, 1), RaggedTokens(9, 2))


def make_cfg() -> TrainConfig:
    return TrainConfig(lr=3e-3, batch_size=8, epochs=2, ckpt_every=None, progress=False, seed=0,
                       device="cpu", weight_decay=0.01)


def _launch(out: Path, nproc: int = 2, timeout: int = 180):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           str(nproc), str(HERE), str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"torchrun failed ({p.returncode}):\n{p.stdout[-3000:]}\n"
                             f"{p.stderr[-3000:]}")


def test_two_rank_masked_pretraining_matches_one_process(tmp_path):
    from spt.train import pretrain
    torch.set_num_threads(1)
    single = pretrain(make_task(), MODEL, OBJECTIVE, make_cfg(), tmp_path / "single")
    _launch(tmp_path / "two")
    one = torch.load(tmp_path / "single" / "last.pt", weights_only=False)
    two = torch.load(tmp_path / "two" / "last.pt", weights_only=False)
    assert two["world_size"] == 2 and two["state"]["step"] == one["state"]["step"] == 10
    d = MODEL.d_model
    for k, a in one["model"].items():
        b = two["model"][k]
        if k.endswith("attn.qkv.bias"):  # the key bias has true gradient 0 (see test_distributed)
            a, b = torch.cat([a[:d], a[2 * d:]]), torch.cat([b[:d], b[2 * d:]])
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, msg=k)
    rows, hist = two["state"]["history"], single.history
    for m in ("train_loss", "train_accuracy", "val_loss", "val_accuracy"):
        assert [r[m] for r in rows] == pytest.approx(hist[m].values.tolist(), rel=1e-5), m


if __name__ == "__main__":
    from spt.train import pretrain
    from spt.train.distributed import process_group
    torch.set_num_threads(1)
    with process_group("cpu"):
        pretrain(make_task(), MODEL, OBJECTIVE, make_cfg(), Path(sys.argv[1]))
