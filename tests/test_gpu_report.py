"""`make gpu-report` (bench/gpu_report.py), rehearsed on the CPU so it cannot rot between GPU runs:
every section runs at tiny sizes through the same guards and writes the same files."""
from __future__ import annotations

import csv
import importlib.util
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.serial  # the report's sections in processes under a time guard

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_report", ROOT / "bench" / "gpu_report.py")
gpu_report = importlib.util.module_from_spec(spec)
sys.modules["gpu_report"] = gpu_report  # its dataclasses look their module up there
spec.loader.exec_module(gpu_report)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_gpu_report_rehearsal_on_cpu_runs_every_section(tmp_path):
    """Slow by necessity: the rehearsal runs every section of `make gpu-report` at its smoke size,
    so that a GPU session's one call cannot fail on a section never run."""
    out = tmp_path / "report"
    assert gpu_report.main(["--out", str(out), "--smoke", "--budget", "400"]) == 0
    text = (out / "report.md").read_text()
    names = [s.name for s in gpu_report.sections(out, True, sys.executable)]
    assert names == ["env", "tests", "throughput", "attention", "ssm", "mixers", "pathx256", "check"]
    for name in names:
        assert f"| {name} | ok |" in text, text
        assert name == "env" or (out / f"{name}.csv").exists(), name
    assert len(list(out.iterdir())) <= 8  # a device machine returns at most 8 files
    env = gpu_report.env_of(text.split("### env")[1])
    assert env["cuda_available"] == "False" and float(env["copy_gbs"]) > 0
    assert "card: none (CPU)" in text and f"commit {env['commit']}" in text
    steps = _rows(out / "throughput.csv")
    assert {r["backends"] for r in steps} == {"default", "gemm+manual", "paths"}
    assert {r["mode"] for r in steps if r["backends"] == "default"} == {"eager", "graphs"}
    paths = [r for r in steps if r["backends"] == "paths"]  # bench/paths.py's two smoke rows
    assert len(paths) == 2 and all(float(r["auto_ms"]) > 0 and float(r["best_ms"]) > 0
                                   and float(r["overhead_s"]) > 0 for r in paths)
    assert "measured paths within 1.05x of the best fixed paths on every paper row" in text
    tests = _rows(out / "tests.csv")
    assert tests and all(t["outcome"] == "skipped" for t in tests)  # gpu tests, no GPU
    assert {t["test"].split("::")[0] for t in tests} >= {"tests.test_attention", "tests.test_mixer_gla"}
    (cell,) = _rows(out / "check.csv")
    assert cell["status"] == "pass" and float(cell["pretrain_step_s"]) > 0
    assert "## Targets" in text and "CPU rehearsal" in text


def test_gpu_report_guard_kills_a_hanging_section_and_its_children(tmp_path):
    hang = ("import subprocess, sys, time; print('started', flush=True); "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)")
    s = gpu_report.Section("hang", "a section that hangs", 1, [sys.executable, "-c", hang])
    t0 = time.monotonic()
    gpu_report.run_guarded(s, 2.0, gpu_report.child_env(True))
    assert time.monotonic() - t0 < 20
    assert s.status == "timed out after 2 s" and "started" in s.output
    crash = gpu_report.Section("crash", "a section that fails", 10,
                               [sys.executable, "-c", "raise SystemExit(3)"])
    gpu_report.run_guarded(crash, 10, gpu_report.child_env(True))
    assert crash.status == "failed (exit 3)"


def test_gpu_report_reads_the_targets_off_the_csvs(tmp_path):
    with open(tmp_path / "tests.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["test", "outcome", "seconds", "message"])
        w.writeheader()
        w.writerow({"test": "a", "outcome": "passed", "seconds": 3.0, "message": ""})
        w.writerow({"test": "b", "outcome": "passed", "seconds": 31.0, "message": ""})
    rows = gpu_report.targets(tmp_path)
    assert rows[0][2] is False and "30 s or more: b" in rows[0][1]
    assert all(met is False for _, _, met in rows[1:])  # no bench CSVs: nothing is met
    fields = ["config", "family", "task", "variant", "mode", "step_ms", "speedup",
              "max_loss_diff", "error"]
    with open(tmp_path / "throughput.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerow({"config": "transformer:image/masked", "family": "transformer", "task": "image",
                    "variant": "masked", "mode": "graphs", "speedup": 3.4, "max_loss_diff": 0})
        w.writerow({"config": "transformer:pathfinder/masked", "family": "transformer",
                    "task": "pathfinder", "variant": "masked", "mode": "graphs", "speedup": 2.1})
        for variant, ms in (("s4", 70.0), ("dlr", 150.0)):
            w.writerow({"config": f"s4:pathx/{variant}", "family": "s4", "task": "pathx",
                        "variant": variant, "mode": "eager", "step_ms": ms})
    got = {what: (measured, met) for what, measured, met in gpu_report.throughput_targets(tmp_path)}
    assert got["captured step of transformer:image/masked: >= 3x the eager step's tokens/s"][1]
    assert not got["captured step of transformer:pathfinder/masked: >= 3x the eager step's tokens/s"][1]
    assert got["DLR's step on pathx within 2x of S4's (default paths: 70.0 ms)"] == (
        "default 150.0 ms (2.14x)", False)


def test_gpu_report_refuses_an_unknown_section(tmp_path):
    with pytest.raises(SystemExit, match="no section"):
        gpu_report.main(["--out", str(tmp_path), "--smoke", "--only", "tset"])


def test_gpu_report_reads_attention_targets_per_length(tmp_path):
    fields = ["L", "method", "speedup_vs_dense", "fraction_of_ideal", "error"]
    rows = [(4096, "local", 1.0, ""), (4096, "local-flex", 0.5, ""),
            (16384, "local", 1.3, 0.45), (16384, "local-flex", 1.9, 0.8)]
    with open(tmp_path / "attention.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        for L, method, speed, frac in rows:
            w.writerow({"L": L, "method": method, "speedup_vs_dense": speed,
                        "fraction_of_ideal": frac})
        w.writerow({"L": 16384, "method": "dense", "speedup_vs_dense": 1.0})
    got = {what: met for what, _, met in gpu_report.attention_targets(tmp_path)}
    assert got == {"L=4096: neighbour-block no slower than dense (within 5%)": True,
                   "L=16384: neighbour-block no slower than dense (within 5%)": True,
                   "L=16K: neighbour-block >= 0.7 of its ideal sparsity speed-up": True}
