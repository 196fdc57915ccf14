"""A small S4 and a small DLR pretrain and finetune on the embedded digits task through the same
training functions as the Transformer; the pretrained checkpoint feeds the kernel analysis."""
import pytest
import torch

from spt.analysis.kernel_decay import kernel_decay, kernel_decay_comparison
from spt.config import ObjectiveConfig, TrainConfig
from spt.data.digits import digits_task
from spt.ssm_config import SSMConfig
from spt.train.checkpoint import load_checkpoint
from spt.train.runs import finetune, pretrain, train_from_scratch


@pytest.fixture(scope="module")
def task():
    return digits_task(size=8, n_train=64)


@pytest.mark.parametrize("kind,d_state", [("s4", 16), ("dlr", 32)])
def test_ssm_pretrains_and_finetunes_on_digits(task, tmp_path, kind, d_state):
    cfg = SSMConfig(kind=kind, d_model=16, n_layers=2, d_state=d_state, max_len=64)
    train = TrainConfig(epochs=2, batch_size=32, lr=3e-3, progress=False, device="cpu")
    pt = pretrain(task, cfg, ObjectiveConfig(kind="masked", mask_ratio=0.5, loss="l1"), train,
                  tmp_path / "pt")
    ckpt = load_checkpoint(tmp_path / "pt" / "best.pt")
    assert ckpt["model_config"]["type"] == "SSMConfig"
    assert ckpt["model_config"]["kind"] == kind
    ft = finetune(task, tmp_path / "pt" / "best.pt", train, tmp_path / "ft")
    assert 0.0 <= ft.test_metrics["accuracy"] <= 1.0
    assert all(torch.isfinite(p).all() for p in ft.model.parameters())
    kernel_params = [k for k in ckpt["model"] if ".kernel." in k]
    assert kernel_params and all(k in ft.model.state_dict() for k in kernel_params)
    # the analysis runs on the pretrained model
    decay = kernel_decay(pt.model, 64)
    assert decay.dims == ("layer", "lag") and decay.shape == (2, 64)
    assert torch.isfinite(torch.as_tensor(decay.values)).all()
    ds = kernel_decay_comparison(pt.model, 64)
    assert set(ds.data_vars) == {"model", "baseline"}


def test_causal_s4_pretrains_with_next_token_objective(task, tmp_path):
    cfg = SSMConfig(kind="s4d", d_model=8, n_layers=1, d_state=8, max_len=64, causal=True,
                    pooling="last")
    train = TrainConfig(epochs=1, batch_size=64, lr=3e-3, progress=False, device="cpu")
    pretrain(task, cfg, ObjectiveConfig(kind="causal", loss="l1"), train, tmp_path / "pt")
    sc = train_from_scratch(task, cfg, train, tmp_path / "sc")
    assert "accuracy" in sc.test_metrics
