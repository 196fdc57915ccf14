"""The step's path "graphs" (TrainConfig.paths): the micro-step over static buffers
(spt.train.graphs) trains exactly like the eager step. On a CPU that path runs without capture; the
GPU tests capture and replay it."""
import dataclasses

import pytest
import torch
import torch.nn as nn

import spt.train.graphs as G
from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.models.model import pretraining_model
from spt.ssm_config import SSMConfig
from spt.train import distributed as D
from spt.train import pretrain, train_from_scratch
from spt.train.graphs import GraphedStep
from spt.train.objectives import Denoising
from spt.train.optim import build_optimizer
from spt.train.passes import autocast

TINY = TransformerConfig(d_model=16, n_layers=2, n_heads=2, d_ff=32, dropout=0.0, max_len=64)
S4 = SSMConfig(kind="s4d", d_model=8, n_layers=2, d_state=8, max_len=64, dropout=0.0,
               norm="batch", prenorm=False)
OBJ = ObjectiveConfig("masked", 0.5, "l1")


@pytest.fixture(scope="module")
def task():  # 36 training images, batch 16: the epoch ends in a smaller batch of 4
    return digits_task(size=8, n_train=36, val_size=16, test_size=16)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=2, progress=False, device="cpu",
                                 weight_decay=0.1, wd_groups="all"), **kw})


def _batches(device="cpu", rounds=1):
    """Micro-batches of three shapes: full length without padding (valid None), padded, and a
    smaller last one; no "masked": the objective draws its masks from the step's generator."""
    g = torch.Generator().manual_seed(5)
    out = []
    for b, L, pad in [(4, 20, 0), (4, 20, 0), (4, 24, 5), (4, 20, 0), (4, 24, 3), (3, 20, 0)] * rounds:
        valid = torch.ones(b, L, dtype=torch.bool)
        valid[0, L - pad:] = False
        out.append({"inputs": torch.randn(b, L, 1, generator=g).to(device),
                    "valid": valid.to(device) if pad else None,
                    "label": torch.zeros(b, dtype=torch.long, device=device)})
    return out


def _train(model_cfg, spec, graphed: bool, accum: int, device="cpu", rounds=1, amp=True):
    """3 * rounds optimiser steps (two micro-batches each when accum=2) the way fit() takes them:
    -> (losses, the gradients seen by each optimiser step, final weights, what the GraphedStep did:
    {"captured", "replays", "shapes"})."""
    device = torch.device(device)
    torch.manual_seed(0)
    model = pretraining_model(model_cfg, spec, OBJ).to(device)
    model.register_parameter("spare", nn.Parameter(torch.ones(3, device=device)))  # never used
    model.train()
    c = cfg(accum_steps=accum, device=str(device), amp=amp)
    opt, obj = build_optimizer(model, c), Denoising(OBJ, spec)
    gen = torch.Generator(device=device).manual_seed(1)
    step = GraphedStep(model, model, obj, c, device, gen) if graphed else None
    torch.manual_seed(2)  # dropout
    losses, grads = [], []
    for i, batch in enumerate(_batches(device, rounds)):
        if step is not None:
            loss, _ = step(batch)
        else:
            with autocast(device, c):
                loss, _ = obj.step(model, batch, gen)
            (loss / accum).backward()
        losses.append(loss.detach().clone())
        if (i + 1) % accum:
            continue
        if step is not None:
            step.prepare_step()
        grads.append({n: None if p.grad is None else p.grad.clone()
                      for n, p in model.named_parameters()})
        torch.nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip)
        opt.step()
        if step is not None:
            step.zero_grad()
        else:
            opt.zero_grad(set_to_none=True)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    info = None
    if step is not None:
        info = {"captured": step.captured, "replays": step.replays, "shapes": len(step.shapes)}
        step.close()
    return losses, grads, state, info


def _assert_same(a, b, exact=True):
    close = (lambda x, y, msg: torch.testing.assert_close(x, y, rtol=0, atol=0, msg=msg)) if exact \
        else (lambda x, y, msg: torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, msg=msg))
    (la, ga, sa), (lb, gb, sb) = a[:3], b[:3]
    for i, (x, y) in enumerate(zip(la, lb)):
        close(y, x, f"loss {i}")
    for i, (x, y) in enumerate(zip(ga, gb)):
        assert x.keys() == y.keys()
        for k in x:
            assert (x[k] is None) == (y[k] is None), k
            if x[k] is not None:
                close(y[k], x[k], f"step {i} grad {k}")
    for k in sa:
        close(sb[k], sa[k], k)


@pytest.mark.parametrize("model, accum", [(TINY, 1), (dataclasses.replace(TINY, dropout=0.2), 2),
                                          (S4, 2)],
                         ids=["transformer", "transformer-dropout-accum", "s4d-batchnorm-accum"])
def test_the_static_step_equals_the_eager_step(task, model, accum):
    eager = _train(model, task.spec, False, accum)
    static = _train(model, task.spec, True, accum)
    _assert_same(eager, static)
    assert eager[1][0]["spare"] is None and static[1][0]["spare"] is None  # AdamW skips it
    assert torch.equal(static[2]["spare"], torch.ones(3))
    assert static[3] == {"captured": 0, "replays": 0, "shapes": 3}  # CPU: buffers, no capture


def test_shapes_beyond_the_limit_run_over_the_batch_itself(task, monkeypatch):
    monkeypatch.setattr(G, "MAX_SHAPES", 1)
    eager = _train(TINY, task.spec, False, 1)
    static = _train(TINY, task.spec, True, 1)
    _assert_same(eager, static)
    assert static[3]["shapes"] == 1


@pytest.mark.parametrize("model, stage", [(dataclasses.replace(TINY, dropout=0.1), "pretrain"),
                                          (S4, "scratch")], ids=["transformer-pretrain", "s4d-scratch"])
def test_fit_with_cuda_graphs_trains_exactly_like_eager(task, tmp_path, model, stage, monkeypatch):
    """Through fit(), with accumulation and a smaller last batch: the history, the weights and the
    optimiser state are the eager run's."""
    calls = []
    real = GraphedStep.forward_backward
    monkeypatch.setattr(GraphedStep, "forward_backward",
                        lambda self, batch: calls.append(batch) or real(self, batch))

    def run(c, out):
        if stage == "pretrain":
            return pretrain(task, model, OBJ, c, out)
        return train_from_scratch(task, model, c, out)
    a = run(cfg(accum_steps=2), tmp_path / "eager")
    b = run(cfg(accum_steps=2, paths={"step": "graphs"}), tmp_path / "graphs")
    assert a.steps == b.steps == 2 * 2
    assert a.paths["step"] == "eager" and b.paths["step"] == "graphs"
    assert len(calls) == 2 * 3  # every micro-batch of the captured run, none of the eager one
    for k in a.history.data_vars:
        if k != "time":
            assert a.history[k].values.tolist() == b.history[k].values.tolist(), k
    for (k, pa), pb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(pa, pb), k
    assert all(p.grad is None for p in b.model.parameters())  # released when fit ends
    oa = torch.load(tmp_path / "eager" / "last.pt", weights_only=False)["optimizer"]
    ob = torch.load(tmp_path / "graphs" / "last.pt", weights_only=False)["optimizer"]
    for sa, sb in zip(oa["state"].values(), ob["state"].values()):
        for k in sa:
            assert torch.equal(sa[k], sb[k]), k


def test_the_step_path_is_checked():
    with pytest.raises(ValueError, match="compile=True or grad_checkpointing=True"):
        TrainConfig(paths={"step": "graphs"}, compile=True)
    with pytest.raises(ValueError, match="compile=True or grad_checkpointing=True"):
        TrainConfig(paths={"step": "graphs"}, grad_checkpointing=True)
    with pytest.raises(ValueError, match="TrainConfig.paths\\['step'\\] = 'yes'"):
        TrainConfig(paths={"step": "yes"})
    m = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="torchrun"):
        GraphedStep(m, m, None, TrainConfig(), torch.device("cpu"),
                    env=D.DistEnv(rank=0, world_size=2))


def test_an_old_config_with_cuda_graphs_is_the_same_run():
    """cuda_graphs (True, False or None), the step's switch before paths, never separates runs."""
    from spt.config import to_dict
    from spt.same_run import differences
    now = to_dict(cfg(paths={"step": "graphs"}))
    for value in (True, False, None):
        old = {**{k: v for k, v in now.items() if k != "paths"}, "cuda_graphs": value}
        assert differences({"train_config": old}, {"train_config": now}) == []


# ------------------------------------------------------------------ captured on CUDA
@pytest.mark.gpu
@pytest.mark.parametrize("model", [dataclasses.replace(TINY, dropout=0.2),
                                   dataclasses.replace(S4, dropout=0.1)],
                         ids=["transformer-dropout", "s4d-batchnorm"])
@pytest.mark.parametrize("accum", [1, 2])
def test_captured_step_equals_the_eager_step_on_cuda(task, model, accum):
    """Float32: every shape is captured after its warm-up runs (the smaller last batch too), and
    the replays draw the eager step's dropout and masks."""
    eager = _train(model, task.spec, False, accum, device="cuda", rounds=3, amp=False)
    static = _train(model, task.spec, True, accum, device="cuda", rounds=3, amp=False)
    _assert_same(eager, static, exact=False)
    assert static[3] == {"captured": 3, "replays": 18 - 3 * G.WARMUP, "shapes": 3}


@pytest.mark.gpu
def test_fit_with_cuda_graphs_on_cuda(task, tmp_path, monkeypatch):
    """bf16 autocast, dropout, accumulation; the smaller last batch is captured from epoch 3 on."""
    captured = []
    real = GraphedStep._capture
    monkeypatch.setattr(GraphedStep, "_capture",
                        lambda self, shape, sig: captured.append(sig) or real(self, shape, sig))
    model = dataclasses.replace(TINY, dropout=0.1)
    c = dict(epochs=4, accum_steps=2, device="cuda", paths="reference")
    a = pretrain(task, model, OBJ, cfg(**c), tmp_path / "eager")
    b = pretrain(task, model, OBJ, cfg(**{**c, "paths": {"step": "graphs"}}), tmp_path / "graphs")
    assert len(captured) == 2  # batches of 16 and the last one of 4 (no padding: valid None)
    for (k, pa), pb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        torch.testing.assert_close(pb, pa, rtol=1e-4, atol=1e-5, msg=k)
    torch.testing.assert_close(b.history["train_loss"].values, a.history["train_loss"].values,
                               rtol=1e-4, atol=1e-6)
