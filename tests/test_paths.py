"""Implementation paths (spt.kernels.paths, spt.train.paths): one vocabulary and one setter; the
measured choice skips a candidate that disagrees with the reference or raises, and takes a correct
faster one; a run records its paths and a resumed run keeps them; the cache stays readable under
concurrent writers; paths never enter a result's identity."""
import json
import multiprocessing
import time

import pytest
import torch
import torch.nn as nn

import spt.train.paths as P
from spt.config import TrainConfig, TransformerConfig, to_dict
from spt.data import digits_task
from spt.kernels.paths import PATHS, candidates_of, choosers, set_paths
from spt.model_config import model_config_from_dict
from spt.models.model import build_layers
from spt.same_run import differences
from spt.ssm_config import SSMConfig
from spt.train import paths_cache, pretrain, train_from_scratch
from spt.train.measure import MARGIN, Trial, measure_module, pick

S4D = SSMConfig(kind="s4d", d_model=8, n_layers=2, d_state=8, max_len=64, dropout=0.0)


def _every_family():
    from spt.free_conv_config import FreeConvConfig
    from spt.mixer_config import MIXER_CONFIGS
    from spt.sgconv_config import SGConvConfig
    cfgs = [TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1),
            TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1, local_block=8),
            SGConvConfig(d_model=8, n_layers=1, max_len=32, kernel_dim=8),
            FreeConvConfig(d_model=8, n_layers=1, max_len=32)]
    cfgs += [SSMConfig(kind=k, d_model=8, n_layers=1, d_state=8, max_len=32)
             for k in ("s4", "s4d", "dlr")]
    cfgs += [cls(d_model=64, n_layers=1) for cls in MIXER_CONFIGS]
    return cfgs


def test_every_module_with_paths_speaks_the_one_vocabulary():
    kinds = set()
    for cfg in _every_family():
        for name, m in choosers(build_layers(cfg)).items():
            kinds.add(m.path_kind)
            assert set(m.paths) <= set(PATHS), (cfg, name, m.paths)
            assert m.paths[0] == "torch" and m.path == "torch", (cfg, name)
            assert set(candidates_of(m)) <= set(m.paths) and candidates_of(m)[0] == "torch"
    assert kinds == {"attention", "fft_conv", "s4_kernel", "s4d_kernel", "dlr_kernel",
                     "selective_scan", "ssd", "gla", "gated_delta_rule", "linear_scan"}


def test_set_paths_sets_by_kind_by_name_or_by_word_and_says_what_it_set():
    layers = build_layers(S4D)
    got = set_paths(layers, {"fft_conv": "manual", "blocks.1": "torch"})  # the name wins
    assert got == {"blocks.0": "manual", "blocks.0.kernel": "torch", "blocks.1": "torch",
                   "blocks.1.kernel": "torch"}
    assert set(set_paths(layers, "ref").values()) == {"ref", "torch"}  # fft_conv has no "ref"
    assert set(set_paths(layers, "reference").values()) == {"torch"}
    with pytest.raises(ValueError, match="name no module of this model"):
        set_paths(layers, {"attention": "flex"})
    with pytest.raises(ValueError, match="path must be one of \\('torch', 'manual'\\)"):
        set_paths(layers, {"fft_conv": "gemm"})
    with pytest.raises(ValueError, match="not 'reference', a path"):
        set_paths(layers, "fastest")


class Toy(nn.Module):
    """A module with four paths: the reference (slow), one 1% off, one that raises, one right."""

    path_kind = "toy"
    paths = ("torch", "manual", "gemm", "dense")
    path = "torch"

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        y = x @ self.w
        if self.path == "torch":
            time.sleep(0.01)
        if self.path == "manual":
            return y * 1.01
        if self.path == "gemm":
            raise RuntimeError("no kernel for these shapes")
        return y


def test_a_wrong_and_a_raising_candidate_are_skipped_with_their_reasons_and_a_right_one_taken():
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    trials = {t.path: t for t in measure_module(Toy(), (x,), {}, torch.device("cpu"),
                                                TrainConfig(), repeats=2)}
    assert trials["manual"].skipped.startswith("disagrees with the reference (0.01 > 0.001)")
    assert trials["gemm"].skipped == "RuntimeError: no kernel for these shapes"
    assert trials["dense"].skipped == "" and trials["dense"].error == 0.0
    assert trials["dense"].seconds < trials["torch"].seconds
    assert pick(list(trials.values()), "torch") == "dense"
    # a faster path within MARGIN of the reference does not replace it
    near = [Trial("torch", 1.0, 0.0), Trial("manual", 1 - MARGIN / 2, 0.0)]
    assert pick(near, "torch") == "torch"


@pytest.fixture
def measuring(monkeypatch, tmp_path):
    """Runs of a few steps measure (as runs of MIN_STEPS or more do), into a fresh cache."""
    monkeypatch.setattr(P, "MIN_STEPS", 1)
    monkeypatch.setattr(P, "MEASURE_SHARE", 1e6)
    monkeypatch.setenv("SPT_PATHS_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=2, progress=False, device="cpu"),
                          **kw})


def test_a_run_takes_the_reference_where_the_fast_path_is_off_by_one_percent(measuring, monkeypatch):
    """Through fit: fft_conv's "manual" path made 1% wrong is refused; the run records "torch"
    and the cached measurement says why."""
    import spt.kernels.fftconv as F
    real = F._FFTConv.apply
    monkeypatch.setattr(F._FFTConv, "apply", lambda u, k: 1.01 * real(u, k))
    task = digits_task(size=8, n_train=32, val_size=16, test_size=16)
    r = train_from_scratch(task, S4D, _cfg(), measuring / "run")
    assert r.paths["fft_conv"] == "torch" and r.paths["step"] in ("eager", "graphs")
    entries = [json.loads(f.read_text()) for f in (measuring / "cache").glob("*.json")]
    conv = [e for e in entries if e["key"].get("group", "").startswith("SSMBlock")]
    assert len(conv) == 1 and conv[0]["choice"] == "torch"
    manual = next(t for t in conv[0]["trials"] if t["path"] == "manual")
    assert manual["skipped"].startswith("disagrees with the reference")
    ck = torch.load(measuring / "run" / "best.pt", weights_only=False)
    assert {n: p for n, p in ck["paths"].items() if n.endswith("blocks.0")} == \
        {"backbone.layers.blocks.0": "torch"}


def test_a_second_run_of_the_same_shapes_answers_from_the_cache(measuring):
    task = digits_task(size=8, n_train=32, val_size=16, test_size=16)
    with P.tuning() as found:
        train_from_scratch(task, S4D, _cfg(epochs=1), measuring / "a")
        train_from_scratch(task, S4D, _cfg(epochs=1), measuring / "b")
    (_, a), (_, b) = found
    assert {c.how for c in a.choices if c.kind != "step"} == {"measured"}
    assert {c.how for c in b.choices} == {"cached"} and b.seconds < a.seconds
    assert a.paths == b.paths


def test_a_resumed_run_keeps_the_paths_its_last_pt_recorded(tmp_path):
    """Killed at step 2 while running fft_conv "manual", resumed with paths="reference": the
    recorded path runs on, and the weights are the uninterrupted run's bit for bit."""
    task = digits_task(size=8, n_train=32, val_size=16, test_size=16)
    pinned = _cfg(ckpt_every=1, paths={"fft_conv": "manual"})
    whole = pretrain(task, S4D, _objective(), pinned, tmp_path / "whole")

    def stop(step):
        if step == 2:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        pretrain(task, S4D, _objective(), pinned, tmp_path / "cut", on_step=stop)
    again = pretrain(task, S4D, _objective(), _cfg(ckpt_every=1, paths="reference"),
                     tmp_path / "cut", resume=True)
    assert whole.paths["fft_conv"] == again.paths["fft_conv"] == "manual"
    for (k, a), b in zip(whole.model.state_dict().items(), again.model.state_dict().values()):
        assert torch.equal(a, b), k
    fresh = pretrain(task, S4D, _objective(), _cfg(ckpt_every=1, paths="reference"),
                     tmp_path / "reference")
    assert fresh.paths["fft_conv"] == "torch"


def _objective():
    from spt.config import ObjectiveConfig
    return ObjectiveConfig("masked", 0.5, "l1")


def test_paths_never_enter_a_runs_identity():
    for spec in ("reference", {"fft_conv": "manual", "step": "graphs"}, {"others": "reference"}):
        assert differences({"t": to_dict(TrainConfig())}, {"t": to_dict(TrainConfig(paths=spec))}) == []
    # what older files stored: an attention backend, a local backend, cuda_graphs
    old_model = {"type": "TransformerConfig", "d_model": 16, "n_heads": 2, "attention": "flash",
                 "local_backend": "flex"}
    assert model_config_from_dict(old_model) == TransformerConfig(d_model=16, n_heads=2)
    now = to_dict(TransformerConfig(d_model=16, n_heads=2))
    assert differences({"m": old_model | {k: v for k, v in now.items() if k not in old_model}},
                       {"m": {**now, "type": "TransformerConfig"}}) == []
    assert differences({"t": {**to_dict(TrainConfig()), "cuda_graphs": True}},
                       {"t": to_dict(TrainConfig())}) == []


def test_a_bad_paths_setting_is_named():
    with pytest.raises(ValueError, match="TrainConfig.paths must be 'auto', 'reference' or a "
                                         "mapping"):
        TrainConfig(paths="fast")
    with pytest.raises(ValueError, match="TrainConfig.paths\\['fft_conv'\\] = 'quick': a path is one"):
        TrainConfig(paths={"fft_conv": "quick"})
    with pytest.raises(ValueError, match="TrainConfig.paths\\['others'\\] = 'torch'"):
        TrainConfig(paths={"others": "torch"})
    assert TrainConfig(paths=[["fft_conv", "manual"]]).paths == (("fft_conv", "manual"),)


def _writer(cache: str, key: dict, n: int, seed: int) -> None:
    import os
    os.environ["SPT_PATHS_CACHE"] = cache
    for i in range(n):
        paths_cache.write(key, {"choice": "manual" if (i + seed) % 2 else "torch",
                                "trials": [{"path": "torch", "pad": "x" * 20_000}]})


@pytest.mark.serial
def test_concurrent_writers_leave_a_readable_cache(tmp_path, monkeypatch):
    """Four processes write one key 40 times each while this one reads it: every read is a whole
    entry (or none yet), never a torn one. (Forked: nothing to import again.)"""
    monkeypatch.setenv("SPT_PATHS_CACHE", str(tmp_path))
    key = {"device": "cpu: test", "group": "one"}
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), key, 40, s)) for s in range(4)]
    for p in procs:
        p.start()
    reads = []
    while any(p.is_alive() for p in procs):
        reads.append(paths_cache.read(key))
    for p in procs:
        p.join()
        assert p.exitcode == 0
    whole = [r for r in reads if r is not None]
    assert whole and all(r["choice"] in ("torch", "manual") and r["key"] == key for r in whole)
    assert paths_cache.read(key)["trials"][0]["path"] == "torch"
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
    (tmp_path / paths_cache.entry_path(key).name).write_text("{cut sho")  # a damaged entry
    assert paths_cache.read(key) is None  # is measured again, not fatal
