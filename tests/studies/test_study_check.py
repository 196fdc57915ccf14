"""`spt study check`: the dry run of every cell of a preset at the real shapes, on fixtures in the
official formats at full length (spt.data.fixtures).

CI checks every study's paper preset on the cells that take seconds on a CPU (CHEAP below); the
16K-64K cells (PathX, PathX-256, Speech Commands) run under `make check-paper`.
"""
from __future__ import annotations

import pytest

from spt.cli import main
from spt.data.fixtures import write_fixtures
from spt.studies import STUDIES
from spt.studies.commands.check import DryRun, check

# One cell of each study's paper preset that runs in seconds on two CPU cores: an SPT cell where
# the study has one (pretraining, finetuning from its checkpoint, evaluation), but a scratch cell for
# the three whose SPT cells cost a minute or more each at full length (03, 04, 07: the Image
# scratch cell for 04, as its Text cells cost as much again; their pretraining and
# finetuning at full length run in the other studies' cells). Every cell of every study runs under
# `make check-paper` (see the README for its time).
CHEAP = {
    "01_lra_transformers": "task=image init=masked",
    "02_transformers_vs_s4": "task=pathfinder model=transformer init=spt",
    "03_explicit_priors": "task=listops model=s4 ssm_init=random init=scratch",
    "04_data_scales": "task=image fraction=0.005 init=scratch",
    "05_text_corpus_pretraining": "task=image ",
    "06_kernel_decay": "task=listops",
    # BIDMC's S4 (N = 256) spends minutes of a CPU on its HiPPO C-tilde (dense 256 x 256 powers)
    "07_additional_modalities": "task=scifar model=s4 init=scratch",
    "08_compute_tied": "task=image model=transformer spt_share=0.2",
    "09_model_scales": "model=s4 size=100000.0 init=spt",
    "13_modern_architectures": "task=image model=lru init=masked",
    "14_priors_and_range": "task=listops model=s4 prior=free_conv init=spt",
}


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    root = tmp_path_factory.mktemp("fixtures")
    write_fixtures(root)
    return root


def test_every_study_is_covered():
    assert set(CHEAP) == set(STUDIES)


# Study 05 finetunes Pythia-70M: its weights and tokenizer come from the hub, which tests never
# reach (HF_HUB_OFFLINE=1). Offline its cells fail with the hub's own error; on a machine with the
# model downloaded they run like the others.
OFFLINE_ONLY = {"05_text_corpus_pretraining"}


def test_the_pythia_study_says_when_pythia_is_not_downloaded(fixtures):
    results = check("05_text_corpus_pretraining", data_root=str(fixtures), device="cpu",
                    only=CHEAP["05_text_corpus_pretraining"])
    assert len(results) == 2
    assert all("huggingface" in r.error.lower() or "pythia" in r.error.lower() for r in results)


@pytest.mark.parametrize("study", sorted(set(CHEAP) - OFFLINE_ONLY))
def test_paper_preset_dry_run_passes_on_full_length_fixtures(study, fixtures):
    """Slow for some studies by necessity: a step of a paper model at its full sequence length on a
    CPU (what a GPU run would meet first)."""
    results = check(study, preset="paper", data_root=str(fixtures), batch=2, device="cpu",
                    only=CHEAP[study])
    assert results, f"no cell of {study} matched {CHEAP[study]!r}"
    failed = [f"{r.coords}: {r.error}" for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    for r in results:
        assert r.params > 0 and r.seq_len >= 1024 and r.peak_bytes > 0
        assert r.stage_times, r.line()


def test_retrieval_cells_run_at_two_documents_of_4000_bytes(fixtures):
    """Each Retrieval document is encoded separately at LRA's 4,000 bytes (the sinusoidal
    Transformer of study 01 crashed on `doc1 <eos> doc2` sequences of up to 8,001 tokens; study
    02's S4 at the paper's size: tests/test_retrieval_pair.py). Batch 1: one pair, its two
    documents a pretraining step, which is what this checks (the length), in half the time of
    the default 2. Slow (about 30 s) because it must be: a four-layer Transformer's forward and
    backward at 4,000 tokens on a CPU is the thing checked."""
    results = check("01_lra_transformers", data_root=str(fixtures), device="cpu",
                    only="task=retrieval init=masked", batch=1)
    assert len(results) == 1 and all(r.ok for r in results), [r.error for r in results]
    assert all(r.seq_len == 4000 for r in results)


def test_a_failing_cell_is_reported_and_the_others_go_on(fixtures, tmp_path, capsys):
    """A data root missing one task's files: that cell fails with its error, the command exits 1.
    Slow by necessity: the passing cell is a full-length dry run."""
    import shutil
    root = tmp_path / "data"
    shutil.copytree(fixtures, root)
    # a truncated image file in the CIFAR parquet is a readable error for that task only
    for f in (root / "cifar10").rglob("*.parquet"):
        f.write_bytes(f.read_bytes()[:100])
    code = main(["study", "check", "01_lra_transformers", "-p", "data_root", str(root),
                 "--only", "task=(listops|image) init=scratch", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 1
    lines = [l for l in out.splitlines() if l.startswith("01_lra_transformers ") and "task=" in l]
    assert len(lines) == 2
    assert any("task=listops" in l and l.rstrip().endswith("pass") for l in lines)
    assert any("task=image" in l and "FAIL" in l for l in lines)
    assert "2 cells: 1 passed, 1 failed" in out


def test_dry_run_keeps_the_presets_settings_but_one_step():
    from spt.config import TrainConfig
    cfg = TrainConfig(lr=3e-4, batch_size=64, epochs=200, patience=10, accum_steps=4,
                      weight_decay=0.1)
    d = DryRun(batch=2, device="cpu").train(cfg)
    assert (d.lr, d.weight_decay, d.schedule) == (3e-4, 0.1, cfg.schedule)
    assert (d.batch_size, d.max_steps, d.epochs, d.accum_steps, d.patience) == (2, 1, 1, 1, None)
    with pytest.raises(ValueError, match="batch"):
        DryRun(batch=0)


def test_check_estimates_each_stage_from_its_timed_step_and_the_plan(fixtures, capsys):
    from spt.studies import plan
    from spt.studies.commands.check import TIMED_STEPS
    only = CHEAP["02_transformers_vs_s4"]
    (r,) = check("02_transformers_vs_s4", data_root=str(fixtures), device="cpu", only=only)
    assert r.ok and set(r.step_seconds) == set(r.estimate_h) == {"pretrain", "finetune"}
    assert TIMED_STEPS == 2 and all(s > 0 for s in r.step_seconds.values())
    plans = {p.stage: p for p in plan("02_transformers_vs_s4", preset="paper")
             if p.cell == only}
    for stage, hours in r.estimate_h.items():
        p = plans[stage]  # sized by the paper's split sizes, not the fixtures'
        seconds = (p.cap * r.step_seconds[stage] * p.batch / 2
                   + p.validations * p.examples["val"] * r.eval_seconds[stage])
        assert hours == pytest.approx(min(seconds / 3600, p.budget_h))
        assert r.unbounded_h[stage] == pytest.approx(seconds / 3600)
    assert r.hours == pytest.approx(sum(r.estimate_h.values())) and r.seeds == 1
    assert "est" in r.line() and f"{r.hours:9.1f} h" in r.line()


def test_the_cost_table_sums_cells_and_their_seeds():
    from spt.studies.commands.check_results import CellCheck, cost_table
    a = CellCheck("x", {"task": "a"}, estimate_h={"pretrain": 1.0, "finetune": 2.0},
                  unbounded_h={"pretrain": 1.0, "finetune": 30.0}, seeds=3)
    b = CellCheck("x", {"task": "b"}, estimate_h={"scratch": 0.5}, unbounded_h={"scratch": 0.5},
                  seeds=3)
    c = CellCheck("y", {"task": "c"}, error="RuntimeError: boom")
    df = cost_table([a, b, c], "cpu")
    assert df.loc["x"].to_dict() == {"cells": 2, "estimated": 2, "seeds": 3,
                                     "hours_one_seed": 3.5, "hours_all_seeds": 10.5,
                                     "cut_by_budget": 1, "unbounded_one_seed": 31.5}
    assert df.loc["y", "estimated"] == 0 and df.index.name == "study (cpu)"


def test_the_check_command_prints_the_estimate_and_its_assumption(fixtures, capsys):
    """Slow by necessity: the command's own dry run of a paper cell at full length."""
    code = main(["study", "check", "06_kernel_decay", "-p", "data_root", str(fixtures),
                 "--only", CHEAP["06_kernel_decay"], "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    assert "estimated wall time on cpu" in out and "step cap x" in out
    assert "hours_all_seeds" in out
    # the paths the timed steps ran, which the estimate therefore assumes
    assert "paths (1 cell): pretrain: fft_conv torch, s4_kernel torch, step eager" in out, out
    assert "--tune, or `spt tune`, measures them first" in out


def test_study_05_paper_dry_run_passes_every_cell_with_gpt_neox_tokenizer_gaps(
        fixtures, tmp_path, monkeypatch):
    """All 10 cells of study 05's paper preset (5 tasks x pretrained / random) with a GPT-NeoX
    whose tokenizer lacks the 13 bytes Pythia's lacks: a tiny random GPT-NeoX stands in for
    Pythia-70M, which tests cannot download."""
    import dataclasses

    import transformers

    from spt.models.pretrained_lm import NOT_IN_UTF8
    from spt.models.tiny_lm import TINY_VOCAB, byte_tokenizer
    from spt.studies import text_corpus as tc

    conf = transformers.GPTNeoXConfig(vocab_size=TINY_VOCAB, hidden_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=32,
                                      max_position_embeddings=4096)
    folder = tmp_path / "neox"
    transformers.GPTNeoXForCausalLM(conf).save_pretrained(folder)
    byte_tokenizer(without=NOT_IN_UTF8).save(str(folder / "tokenizer.json"))
    paper = dataclasses.replace(tc.SETTINGS["paper"], source=str(folder))
    monkeypatch.setitem(tc.SETTINGS, "paper", paper)
    results = check("05_text_corpus_pretraining", data_root=str(fixtures), device="cpu")
    assert len(results) == 10
    failed = [f"{r.coords}: {r.error}" for r in results if not r.ok]
    assert not failed, "\n".join(failed)


def test_dry_run_at_the_stages_own_batch_keeps_batch_and_accumulation():
    from spt.config import TrainConfig
    cfg = TrainConfig(batch_size=64, accum_steps=2, eval_batch_size=100, epochs=200)
    d = DryRun(batch=None, device="cpu", steps=2).train(cfg)
    assert (d.batch_size, d.accum_steps, d.eval_batch_size, d.max_steps) == (64, 2, 100, 2)
    h = DryRun(batch=None, device="cpu", steps=2, split=4).train(cfg)
    assert (h.batch_size, h.accum_steps, h.eval_batch_size) == (16, 8, 25)
    with pytest.raises(ValueError, match="split"):
        DryRun(batch=None, split=0)


def test_a_limit_with_fill_repeats_the_longest_examples():
    import torch

    from spt.studies.machinery.arms import longest
    data = [{"inputs": torch.zeros(n)} for n in (5, 9, 7)]
    assert len(longest(data, 7)) == 3 and longest(data, 2).indices == [1, 2]
    assert longest(data, 7, fill=True).indices == [0, 1, 2, 0, 1, 2, 0]


def test_check_at_the_stages_own_batch_needs_no_batch_scaling(capsys):
    """The smoke preset's stages at their own batch (32): the estimate is the timed step times the
    step cap, with no scaling by the batch."""
    from spt.studies import plan
    only = "task=listops init=masked"
    (r,) = check("01_lra_transformers", preset="smoke", batch=None, device="cpu", only=only)
    assert r.ok, r.error
    assert "each stage's own batch" in capsys.readouterr().out
    plans = {p.stage: p for p in plan("01_lra_transformers", preset="smoke") if p.cell == only}
    for stage, hours in r.unbounded_h.items():
        p = plans[stage]
        seconds = (p.cap * r.step_seconds[stage]
                   + p.validations * p.examples["val"] * r.eval_seconds[stage])
        assert hours == pytest.approx(seconds / 3600)


def test_a_cell_out_of_memory_is_retried_with_half_the_batch():
    import torch

    from spt.studies.commands.check import run_check
    from spt.studies.machinery.cells import Cell
    from spt.studies.machinery.job import FunctionJob

    def oom(run_dir):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def fits(run_dir):
        import xarray as xr
        return xr.Dataset({"params": 10.0, "seq_len": 64.0})

    tried = []

    def halved(split):
        tried.append(split)
        return {"task=a": Cell({"task": "a"}, None, FunctionJob(oom if split < 4 else fits, {}))}

    logged = []
    cells = [Cell({"task": "a"}, None, FunctionJob(oom, {}))]
    (r,) = run_check("x", cells, torch.device("cpu"), logged.append, dry_batch=None, halved=halved)
    assert tried == [2, 4] and r.ok and r.split == 4 and r.params == 10
    assert "batch / 4, accumulation x 4" in logged[-1]
    assert sum("retrying" in line for line in logged) == 2
    (r,) = run_check("x", cells, torch.device("cpu"), logged.append)
    assert not r.ok and r.oom and r.split == 1  # a fixed batch is not retried


def test_distinct_cells_keep_one_per_task_and_model(fixtures):
    import json

    from spt.studies.commands.check import distinct_cells
    from spt.studies.registry import study
    cells = study("01_lra_transformers").cells("paper", data_root=str(fixtures), seeds=[0])
    kept = distinct_cells(cells)
    assert 0 < len(kept) < len(cells)
    tasks = {c.coords["task"] for c in cells}
    assert {c.coords["task"] for c in kept} == tasks
    models = {(c.coords["task"], json.dumps(c.config["arm"]["model"], sort_keys=True))
              for c in cells}
    assert len(kept) == len(models)
    assert all(c.config["arm"]["objective"] for c in kept)  # the SPT arm covers both stages


def test_the_check_command_reads_its_batch(fixtures):
    from spt.studies.cli import _check_batch
    cpu, cuda = __import__("torch").device("cpu"), __import__("torch").device("cuda")
    assert (_check_batch(None, cpu), _check_batch(None, cuda)) == (2, None)
    assert (_check_batch("stage", cpu), _check_batch("8", cuda)) == (None, 8)
    with pytest.raises(ValueError, match="--batch must be a whole number >= 1 or 'stage'"):
        _check_batch("big", cpu)
