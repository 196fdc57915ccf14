"""Throughput switches: activation checkpointing (same gradients), torch.compile (same training),
resuming with speed-only settings changed, and the bench scripts' --smoke runs (CUDA graphs:
test_graphs.py)."""
import csv
import dataclasses
import functools
import importlib.util
from pathlib import Path

import pytest
import torch

from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.models import classifier_model
from spt.models.model import pretraining_model
from spt.ssm_config import SSMConfig
from spt.train import train_from_scratch
from spt.train.objectives import Denoising
from spt.train.run_setup import set_grad_checkpointing

BENCH = Path(__file__).resolve().parents[1] / "bench"
TINY = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_len=64)


@pytest.fixture(scope="module")
def task():
    return digits_task(size=8, n_train=32, val_size=16, test_size=16)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=1, progress=False, device="cpu"),
                          **kw})


def _grads(model, spec, objective, on: bool):
    """Gradients (and buffers) of one masked-denoising step from a fixed seed."""
    torch.manual_seed(0)
    m = pretraining_model(model, spec, objective)
    set_grad_checkpointing(m, on)
    m.train()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 40, 1, generator=g)
    valid = torch.ones(3, 40, dtype=torch.bool)
    valid[1, 30:] = False
    torch.manual_seed(2)  # dropout masks: checkpointing must replay the same ones
    loss, _ = Denoising(objective, spec).step(m, {"inputs": x, "valid": valid},
                                               torch.Generator().manual_seed(3))
    loss.backward()
    return ({n: p.grad.clone() for n, p in m.named_parameters()},
            {n: b.clone() for n, b in m.named_buffers()})


@pytest.mark.parametrize("model", [
    dataclasses.replace(TINY, n_layers=2, dropout=0.2, local_block=16),
    SSMConfig(kind="s4", d_model=8, n_layers=2, d_state=8, max_len=64, dropout=0.2, norm="batch",
              prenorm=False),
    SSMConfig(kind="s4d", d_model=8, n_layers=2, d_state=8, max_len=64, dropout=0.1),
], ids=["transformer-local", "s4-batchnorm-postnorm", "s4d"])
def test_activation_checkpointing_gives_identical_gradients(task, model, monkeypatch):
    import spt.models.ssm as ssm_mod
    import spt.models.stack as stack_mod
    calls = []
    for mod in (ssm_mod, stack_mod):
        real = mod.checkpoint
        monkeypatch.setattr(mod, "checkpoint",
                            functools.partial(lambda real, *a, **k: calls.append(1) or real(*a, **k),
                                              real))
    obj = ObjectiveConfig("masked", 0.5, "l1")
    g0, b0 = _grads(model, task.spec, obj, on=False)
    assert not calls
    g1, b1 = _grads(model, task.spec, obj, on=True)
    assert len(calls) == 2  # one recomputed unit per layer
    assert g0.keys() == g1.keys() and len(g0) > 5
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-5, atol=1e-7, msg=k)
    for k in b0:  # BatchNorm running statistics are updated once, not again in the recompute
        torch.testing.assert_close(b1[k], b0[k], rtol=0, atol=0, msg=k)


def test_grad_checkpointing_switch_reaches_the_layers_and_rejects_models_without_it(task):
    m = classifier_model(TINY, task.spec)
    set_grad_checkpointing(m, True)
    assert m.backbone.layers.grad_checkpointing
    with pytest.raises(ValueError, match="grad_checkpointing"):
        set_grad_checkpointing(torch.nn.Linear(2, 2), True)


def test_compile_switch_trains_like_eager(task, tmp_path, monkeypatch):
    """TrainConfig.compile routes the training forward through torch.compile. Inductor's C++
    code generation takes minutes on 2 CPU cores, so here dynamo traces the model and runs the
    captured graph eagerly (backend="eager"); the GPU test below uses the real compiler."""
    calls = []
    real = torch.compile

    def spy(model, **kw):
        calls.append(model)
        return real(model, backend="eager", **kw)

    monkeypatch.setattr(torch, "compile", spy)
    a = train_from_scratch(task, TINY, cfg(), tmp_path / "eager")
    b = train_from_scratch(task, TINY, cfg(compile=True), tmp_path / "compiled")
    assert len(calls) == 1
    for (k, pa), pb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        torch.testing.assert_close(pb, pa, rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.gpu
def test_compile_with_inductor_on_gpu(task, tmp_path):
    m = TINY
    a = train_from_scratch(task, m, cfg(device="cuda", amp=False), tmp_path / "eager")
    b = train_from_scratch(task, m, cfg(device="cuda", amp=False, compile=True), tmp_path / "c")
    for (k, pa), pb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        torch.testing.assert_close(pb.cpu(), pa.cpu(), rtol=1e-3, atol=1e-4, msg=k)


def test_resume_may_change_speed_settings_but_not_the_math(task, tmp_path):
    def stop(step):
        if step == 1:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train_from_scratch(task, TINY, cfg(epochs=2, ckpt_every=1, paths={"step": "graphs"}),
                           tmp_path / "r", on_step=stop)
    r = train_from_scratch(task, TINY, cfg(epochs=2, ckpt_every=1, grad_checkpointing=True,
                                           prefetch_factor=2, distributed="fsdp"),
                           tmp_path / "r", resume=True)
    assert r.steps == 4
    # the recorded captured step cannot run with activation checkpointing: the same step, eager
    assert r.paths["step"] == "eager"
    with pytest.raises(ValueError, match="lr"):
        train_from_scratch(task, TINY, cfg(epochs=2, lr=1e-2), tmp_path / "r", resume=True)


def test_train_config_checks_the_new_fields():
    with pytest.raises(ValueError, match="distributed"):
        TrainConfig(distributed="horovod")
    with pytest.raises(ValueError, match="prefetch_factor"):
        TrainConfig(prefetch_factor=0)
    with pytest.raises(ValueError, match="num_workers"):
        TrainConfig(num_workers=-1)


def _bench(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_train_throughput_smoke(capsys, tmp_path, monkeypatch):
    """--graphs measures each row eagerly and captured (uncaptured on a CPU: the same losses);
    --csv writes every row; a failing row is reported and the others still run."""
    bench = _bench("train_throughput")
    real = bench.measure_training_step

    def measure(name, *a, **k):
        if name.startswith("s4:image"):
            raise RuntimeError("a broken row")
        return real(name, *a, **k)
    monkeypatch.setattr(bench, "measure_training_step", measure)
    reports = bench.main(["--smoke", "--graphs", "--csv", str(tmp_path / "rows.csv")])
    assert [r.graphs for r in reports] == [False, True] * 3
    for r in reports:
        assert r.tokens_per_s > 0 and r.flops_per_step > 0 and 0 < r.mfu
    out = capsys.readouterr().out
    assert "MFU" in out and "speed-up" in out and "s4:image/s4" in out and "a broken row" in out
    rows = list(csv.DictReader(open(tmp_path / "rows.csv")))
    assert [(r["config"], r["mode"]) for r in rows][:3] == [
        ("transformer:text/masked", "eager"), ("transformer:text/masked", "graphs"),
        ("s4:image/s4", "eager")]
    assert len(rows) == 7 and "a broken row" in rows[2]["error"]
    graphed = [r for r in rows if r["mode"] == "graphs"]
    assert all(float(r["speedup"]) > 0 and float(r["max_loss_diff"]) == 0 for r in graphed)


def test_bench_train_throughput_pinned_ssm_paths_smoke():
    """--match keeps the SSM rows; --kernel-path / --conv-path pin every SSM layer ("gemm" exists
    for DLR only: an S4 keeps its reference kernel); the rest stays at its reference."""
    reports = _bench("train_throughput").main(["--smoke", "--match", "s4:", "--kernel-path",
                                               "gemm", "--conv-path", "manual"])
    assert [r.name for r in reports] == ["s4:image/s4", "s4:pathx/s4"]
    assert all(r.paths == {"fft_conv": "manual", "s4_kernel": "torch", "step": "eager"}
               and r.step_s > 0 for r in reports)


def test_bench_attention_long_smoke(capsys, tmp_path):
    """Every method runs, except flex's backward on the CPU (torch has none): that row says so
    and the run goes on; the CSV holds every row."""
    import csv
    res = _bench("attention_long").main(["--smoke", "--csv", str(tmp_path / "out.csv")])
    assert {m for _, m in res} == {"dense", "local", "local-flex", "bool-mask"}
    failed = {key for key, r in res.items() if "error" in r}
    assert failed == {(128, "local-flex")}
    assert all(r["ms"] > 0 for key, r in res.items() if key not in failed)
    out = capsys.readouterr().out
    assert "of ideal" in out and "no backward on the CPU" in out and "dense pattern" in out
    rows = list(csv.DictReader(open(tmp_path / "out.csv")))
    assert len(rows) == 8 and float(rows[5]["ideal_speedup"]) == 1.6  # L=128, local: 4 blocks
    assert float(rows[1]["max_err"]) < 1e-4


def test_bench_attention_long_forward_runs_flex_on_cpu():
    res = _bench("attention_long").main(["--smoke", "--forward", "--causal",
                                         "--methods", "local-flex", "dense"])
    assert all("error" not in r and r["ms"] > 0 for r in res.values()) and len(res) == 4


def test_bench_pathx256_step_smoke():
    out = _bench("pathx256_step").main(["--smoke"])
    assert [r.name for r, _ in out] == ["transformer:pathx256", "s4:pathx256"]
    assert all(r.step_s > 0 and r.seq_len == 256 for r, _ in out)


def test_bench_ssm_kernels_smoke(tmp_path, capsys):
    """One process, every path of every case (L = 61: the manual FFT length 125 is not 2L), each
    row written to the CSV; the reference, default and manual layer rows all measured."""
    out = tmp_path / "rows.csv"
    rows = _bench("ssm_kernels").main(["--smoke", "--csv", str(out)])
    assert {r["kind"] for r in rows} == {"s4", "s4d", "dlr"}
    for r in rows:
        if r["part"] == "layer" and r["kernel"] in ("ref", "fast"):
            assert r["ms"] > 0 and r["vs_default"] > 0 and r["vs_ref"] > 0 and not r["error"], r
    assert len(out.read_text().strip().splitlines()) == len(rows) + 1
    assert "vs_def" in capsys.readouterr().out
