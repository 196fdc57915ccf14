"""The one-call GPU report: every GPU figure spt needs, from one short GPU allocation.

    make gpu-report                                   # on a GPU node: results/gpu-report/
    python bench/gpu_report.py --out DIR [--budget 480]
    python bench/gpu_report.py --out DIR --smoke      # the CPU rehearsal (tests/test_gpu_report.py)

Sections, in this order, each in its own process under its own time guard (a hang or a crash
costs that section only; what it printed and wrote so far is kept):

* ``env``        card, torch, CUDA, Triton, which of flash-attn / fla / mamba-ssm import, the
                 measured bf16 matmul peak and device-to-device copy bandwidth;
* ``tests``      every test marked ``gpu`` (the files that hold one), each with a per-test
                 timeout where pytest-timeout is installed, fla's kernels at one config each;
* ``throughput`` ``bench/train_throughput.py --all``: every paper row, the eager step against the
                 captured one; then ``bench/paths.py`` on the paper presets of studies 01 and 02
                 (every Transformer and S4 row of Tables 4 and 5, on full-length fixtures): the
                 measured paths (TrainConfig.paths="auto") against the reference and the best
                 fixed assignment, and the measuring overhead;
* ``attention``  ``bench/attention_long.py``: dense vs neighbour-block (gather, FlexAttention)
                 vs the dense boolean mask, 1K-64K;
* ``ssm``        ``bench/ssm_kernels.py --gpu-only``: the S4 / S4D / DLR convolution paths;
* ``mixers``     ``bench/mixer_throughput.py --device cuda``: spt's own Mamba / Mamba-2 / GLA /
                 Gated DeltaNet / LRU forms on the GPU;
* ``pathx256``   ``bench/pathx256_step.py``: one PathX-256 training step fits;
* ``check``      ``spt study check`` on CUDA at each stage's own batch, one cell per distinct
                 task and model of every study, on full-length fixtures, until the overall
                 budget runs out; the cells left are named as not checked.

Writes ``report.md`` (each section's status, time, command and output, and the issue's targets
read off the CSVs) and one CSV per section beside it (at most 8 files, so the whole folder can come
back from a machine that returns 8). Without CUDA (``--smoke``) every section runs at tiny sizes
on the CPU, which proves the report end to end; its numbers mean nothing.
"""
from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
DEFAULT_BUDGET_S = 480  # the 8 minutes of wall time for the whole report


@dataclass
class Section:
    """One part of the report: the command its process runs and its time guard (seconds)."""

    name: str
    title: str
    guard_s: float
    command: list
    csv: Optional[str] = None  # the CSV the command writes into the report folder
    status: str = "not run"
    seconds: float = 0.0
    output: str = ""


def sections(out: Path, smoke: bool, python: str) -> list[Section]:
    """The report's sections with their commands; `smoke` shrinks every one to a CPU rehearsal."""
    me = [python, str(Path(__file__).resolve())]
    s = ["--smoke"] if smoke else []
    return [
        Section("env", "Environment", 60, me + ["--section", "env", "--out", str(out)] + s),
        Section("tests", "GPU-marked tests", 120,
                me + ["--section", "tests", "--out", str(out)] + s, csv="tests.csv"),
        Section("throughput", "Training throughput of every paper row (eager vs captured step; "
                "the SSM rows again on pinned kernel paths; the measured paths against the "
                "reference and the best fixed ones)", 210,
                me + ["--section", "throughput", "--out", str(out)] + s, csv="throughput.csv"),
        Section("attention", "Attention, 1K-64K: dense, neighbour-block (gather, flex), bool mask",
                75, [python, str(BENCH / "attention_long.py"), "--csv",
                     str(out / "attention.csv")] + s, csv="attention.csv"),
        Section("ssm", "SSM convolution paths (S4, S4D, DLR), fwd+bwd, on the GPU alone", 75,
                [python, str(BENCH / "ssm_kernels.py"), "--csv", str(out / "ssm.csv")]
                + (s or ["--gpu-only"]), csv="ssm.csv"),
        Section("mixers", "Today's mixers, spt's own forms on the device", 60,
                [python, str(BENCH / "mixer_throughput.py"), "--device", "auto", "--csv",
                 str(out / "mixers.csv")] + (s + ["--mixers", "mamba", "mamba2"] if smoke else []),
                csv="mixers.csv"),
        Section("pathx256", "One PathX-256 training step", 60,
                [python, str(BENCH / "pathx256_step.py"), "--csv", str(out / "pathx256.csv")] + s,
                csv="pathx256.csv"),
        Section("check", "spt study check on the device, one cell per distinct task and model",
                0, me + ["--section", "check", "--out", str(out)] + s, csv="check.csv"),
    ]


# ------------------------------------------------------------------------------- the guard
def run_guarded(sec: Section, guard_s: float, env: dict) -> None:
    """Run the section's command in a new process group; kill the group after `guard_s` seconds.
    Fills status ("ok", "failed (exit N)", "timed out after N s"), seconds and output."""
    t0 = time.monotonic()
    proc = subprocess.Popen(sec.command, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(1.0, guard_s))
        sec.status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        sec.status = f"timed out after {guard_s:.0f} s"
    sec.seconds = time.monotonic() - t0
    sec.output = out.decode("utf-8", "replace")


def child_env(smoke: bool) -> dict:
    """The sections' environment: spt importable from this checkout, unbuffered output, Triton
    compiled on a GPU (interpreted in the rehearsal), fla's autotuning results cached."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TRITON_INTERPRET", "1" if smoke else "0")
    env.setdefault("FLA_CACHE_RESULTS", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("MPLBACKEND", "agg")
    env.setdefault("TQDM_DISABLE", "1")
    return env


# --------------------------------------------------------------------------- the sections
def section_env(out: Path, smoke: bool) -> None:
    """Print what this machine is and can run, one "key value" line each (the report reads them
    back: :func:`env_of`)."""
    import importlib.metadata as md
    import importlib.util
    import platform

    import torch

    from spt.train.throughput import copy_bandwidth, peak_matmul_flops
    rows = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": str(torch.version.cuda), "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        rows.update(card=p.name, memory_gib=round(p.total_memory / 2**30, 1),
                    multiprocessors=p.multi_processor_count)
    for dist, module in (("triton", "triton"), ("flash-attn", "flash_attn"),
                         ("fla-core", "fla"), ("mamba-ssm", "mamba_ssm"),
                         ("netCDF4", "netCDF4"), ("pytest-timeout", "pytest_timeout")):
        try:
            found = importlib.util.find_spec(module) is not None
            rows[dist] = md.version(dist) if found else "not installed"
        except (md.PackageNotFoundError, ValueError):
            rows[dist] = "importable" if found else "not installed"
    device = torch.device("cuda" if torch.cuda.is_available() and not smoke else "cpu")
    rows["matmul_peak_tflops"] = round(peak_matmul_flops(device, n=256 if smoke else None) / 1e12, 3)
    rows["copy_gbs"] = round(copy_bandwidth(device) / 1e9, 1)
    rows["commit"] = _commit()
    for k, v in rows.items():
        print(f"{k:<20} {v}")


def env_of(output: str) -> dict:
    """The {key: value} lines the env section printed."""
    return dict(line.split(None, 1) for line in output.splitlines()
                if len(line.split(None, 1)) == 2 and not line.startswith(" "))


# the SSM rows of the throughput bench again, on the opt-in kernel paths (spt.kernels.vandermonde's
# "gemm" for DLR's shared Lambda, fft_conv's "manual"): DLR's step against S4's
SSM_FAST = ["--match", "s4:", "--kernel-path", "gemm", "--conv-path", "manual"]


def section_throughput(out: Path, smoke: bool) -> int:
    """bench/train_throughput.py over every paper row, eager and captured, then its SSM rows on
    pinned kernel paths, then bench/paths.py (auto against the reference and the best fixed
    paths); one throughput.csv with a "backends" column (the columns of every part)."""
    bench = [sys.executable, str(BENCH / "train_throughput.py")] + (["--smoke"] if smoke else ["--all"])
    paths = [sys.executable, str(BENCH / "paths.py")] + (
        ["--smoke"] if smoke else ["--studies", "01_lra_transformers", "02_transformers_vs_s4",
                                   "--presets", "paper", "-p", "data_root", str(fixtures_root()),
                                   "--device", "cuda", "--repeat", "5"])
    parts = [("default", bench + ["--graphs"]), ("gemm+manual", bench + SSM_FAST),
             ("paths", paths)]
    rows, code = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, cmd in parts:
            path = Path(tmp) / f"{name}.csv"
            print(" ".join(_short(c) for c in cmd[1:]), flush=True)
            code = subprocess.call(cmd + ["--csv", str(path)], cwd=ROOT) or code
            rows += [dict(r, backends=name) for r in read_csv(path)]
    if rows:
        with open(out / "throughput.csv", "w", newline="") as f:
            w = csv.DictWriter(f, list(dict.fromkeys(k for r in rows for k in r)))
            w.writeheader()
            w.writerows(rows)
    return code


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


GPU_TEST_TIMEOUT_S = 60


def gpu_test_files() -> list[str]:
    """The test files that hold a test marked gpu (collecting the whole suite would import
    packages a GPU image may lack, papermill and ipywidgets)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if "pytest.mark.gpu" in p.read_text(encoding="utf-8"))


def section_tests(out: Path, smoke: bool) -> int:
    """Run the gpu-marked tests (skipped without CUDA), one junit row each -> tests.csv."""
    import importlib.util
    xml = out / "tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
           "-o", "addopts=-ra", "--junitxml", str(xml)] + gpu_test_files()
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={GPU_TEST_TIMEOUT_S}")
    print(" ".join(cmd[1:]), flush=True)
    code = subprocess.call(cmd, cwd=ROOT)
    rows = junit_rows(xml) if xml.exists() else []
    xml.unlink(missing_ok=True)
    with open(out / "tests.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["test", "outcome", "seconds", "message"])
        w.writeheader()
        w.writerows(rows)
    return code if code != 5 else 0  # 5: no test collected is not a failure of the report


def junit_rows(path: Path) -> list[dict]:
    """[{test, outcome, seconds, message}] of a pytest junit XML file."""
    import xml.etree.ElementTree as ET
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (el.get("message") or "").splitlines()[0][:200] if el.get("message") else ""
                break
        rows.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                     "seconds": round(float(case.get("time") or 0), 2), "message": message})
    return rows


def fixtures_root() -> Path:
    """Full-length fixtures of every task, written once beside the temporary files (not in the
    report folder, which comes back whole)."""
    root = Path(tempfile.gettempdir()) / "spt-gpu-report-fixtures"
    if not root.exists():
        from spt.data.fixtures import write_fixtures
        write_fixtures(root)
    return root


def section_check(out: Path, smoke: bool, until: float) -> int:
    """`spt study check` of every study on this device, one cell per distinct task and model, at
    each stage's own batch, until `until` (time.monotonic()); writes check.csv as cells finish."""
    import torch

    from spt.studies import STUDIES
    from spt.studies.commands.check import check

    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    only = None
    if smoke:  # the rehearsal: one smoke cell on the generated smoke data
        names, preset, root, only = ["01_lra_transformers"], "smoke", None, "task=listops init=masked"
    else:
        names, preset, root = sorted(STUDIES), "paper", fixtures_root()
    columns = ["study", "cell", "status", "params", "seq_len", "split", "peak_GiB",
               "pretrain_step_s", "finetune_step_s", "scratch_step_s", "est_h", "error"]
    failed = 0
    with open(out / "check.csv", "w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        for i, name in enumerate(names):
            if time.monotonic() >= until:
                for rest in names[i:]:
                    w.writerow({"study": rest, "status": "not checked: the report's time ran out"})
                    print(f"{rest}: not checked (the report's time ran out)")
                break
            results = check(name, preset=preset, data_root=None if root is None else str(root),
                            batch=None, device=device, distinct=True, until=until, only=only)
            for r in results:
                failed += bool(r.error)
                w.writerow(r.row())
            f.flush()
    return 1 if failed else 0


# ------------------------------------------------------------------------------- the report
def read_csv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(row: dict, key: str) -> float:
    try:
        return float(row.get(key) or "nan")
    except ValueError:
        return float("nan")


def test_targets(out: Path) -> list[tuple]:
    """Every GPU test passes, each in under 30 s (tests.csv)."""
    tests = read_csv(out / "tests.csv")
    if not tests:
        return [("every GPU test passes, each in under 30 s", "no rows (tests.csv missing)", False)]
    ran = [t for t in tests if t["outcome"] != "skipped"]
    slow = [t["test"] for t in ran if _num(t, "seconds") >= 30]
    bad = [t["test"] for t in ran if t["outcome"] != "passed"]
    slowest = max((_num(t, "seconds") for t in ran), default=0.0)
    return [("every GPU test passes, each in under 30 s",
             f"{len(ran) - len(bad)} of {len(ran)} ran and passed ({len(tests) - len(ran)} "
             f"skipped); slowest {slowest:.1f} s" + (f"; failed: {', '.join(bad)}" if bad else "")
             + (f"; 30 s or more: {', '.join(slow)}" if slow else ""),
             bool(ran) and not bad and not slow)]


def throughput_targets(out: Path) -> list[tuple]:
    """The captured step lifts the Image and Pathfinder Transformer rows >= 3x; DLR's step is
    within 2x of S4's at every LRA length (throughput.csv)."""
    rows = read_csv(out / "throughput.csv")
    if not rows:
        return [("captured step >= 3x on Image and Pathfinder Transformers; DLR within 2x of S4",
                 "no rows (throughput.csv missing)", False)]
    found = []
    for r in rows:
        if r["family"] == "transformer" and r["task"] in ("image", "pathfinder") \
                and r["mode"] == "graphs":
            x = _num(r, "speedup")
            found.append((f"captured step of {r['config']}: >= 3x the eager step's tokens/s",
                          f"{x:.2f}x (loss difference {r.get('max_loss_diff') or '-'})"
                          if x == x else f"not measured: {r.get('error') or 'no speed-up'}",
                          x >= 3))
    eager = {(r["task"], r["variant"], r.get("backends", "default")): _num(r, "step_ms")
             for r in rows if r["family"] == "s4" and r["mode"] == "eager"}
    for task in sorted({t for t, v, _ in eager if v == "dlr"}):
        s4 = eager.get((task, "s4", "default"), float("nan"))
        dlr = {b: ms for (t, v, b), ms in eager.items() if t == task and v == "dlr" and ms == ms}
        if not dlr or s4 != s4:
            found.append((f"DLR's step on {task} within 2x of S4's", "a row is missing", False))
            continue
        shown = ", ".join(f"{b} {ms:.1f} ms ({ms / s4:.2f}x)" for b, ms in sorted(dlr.items()))
        found.append((f"DLR's step on {task} within 2x of S4's (default paths: {s4:.1f} ms)",
                      shown, min(dlr.values()) / s4 <= 2))
    return found or [("throughput targets", f"{len(rows)} rows, none of the target rows", False)]


# a measured ratio within this of 1 is "no slower" (timing noise between two calls of one kernel)
NOISE = 0.05


def attention_targets(out: Path) -> list[tuple]:
    """Neighbour-block attention (its faster path, gather or flex) never slower than dense at any
    L; at 16K at least 0.7 of its ideal sparsity speed-up over dense (attention.csv)."""
    rows = read_csv(out / "attention.csv")
    if not rows:
        return [("neighbour-block attention never slower than dense; >= 0.7 of ideal at 16K",
                 "no rows (attention.csv missing)", False)]
    found = []
    for L in sorted({int(r["L"]) for r in rows}):
        local = {r["method"]: r for r in rows if int(r["L"]) == L and r["method"].startswith("local")}
        speed = {m: _num(r, "speedup_vs_dense") for m, r in local.items()}
        ok = {m: x for m, x in speed.items() if x == x}
        if not ok:
            found.append((f"L={L}: neighbour-block no slower than dense", "no local row ran", False))
            continue
        best = max(ok, key=ok.get)
        shown = ", ".join(f"{m} {x:.2f}x" for m, x in ok.items())
        found.append((f"L={L}: neighbour-block no slower than dense (within {NOISE:.0%})",
                      f"speed-up over dense: {shown}", ok[best] >= 1 - NOISE))
        if L == 16384:
            frac = {m: _num(local[m], "fraction_of_ideal") for m in ok}
            frac = {m: x for m, x in frac.items() if x == x}
            got = max(frac.values(), default=float("nan"))
            found.append(("L=16K: neighbour-block >= 0.7 of its ideal sparsity speed-up",
                          ", ".join(f"{m} {x:.2f}" for m, x in frac.items()) or "not measured",
                          got >= 0.7))
    if not any(t.startswith("L=16K") for t, _, _ in found):
        found.append(("L=16K: neighbour-block >= 0.7 of its ideal sparsity speed-up",
                      "no 16K row", False))
    return found


# the S4 / S4D / DLR layer (H=256, L=16K, batch 16, fwd+bwd) on one H200 at main 70531b4 (ms)
H200_LAYER_MS = {"s4": 14.8, "s4d": 14.5, "dlr": 18.0}


def ssm_targets(out: Path) -> list[tuple]:
    """Each SSM layer at its longest L: its fastest path >= 3x today's default in the same run
    (ssm.csv); the H200's figures from the issue beside it for reference."""
    rows = [r for r in read_csv(out / "ssm.csv") if r.get("part") == "layer" and r.get("ms")]
    if not rows:
        return [("S4 / S4D / DLR layer at L=16K >= 3x faster than today's default",
                 "no layer rows (ssm.csv missing or empty)", False)]
    found = []
    for kind in sorted({r["kind"] for r in rows}):
        mine = [r for r in rows if r["kind"] == kind]
        L = max(int(r["L"]) for r in mine)
        at = [r for r in mine if int(r["L"]) == L and (r["kernel"], r["conv"]) != ("fast", "torch")
              and r["kernel"] != "ref"]
        best = max(at, key=lambda r: _num(r, "vs_default"), default=None)
        if best is None:
            found.append((f"{kind} layer at L={L}: >= 3x the default", "no fast path ran", False))
            continue
        ref = f"; the issue's H200 default: {H200_LAYER_MS[kind]} ms" if kind in H200_LAYER_MS else ""
        found.append((f"{kind} layer at L={L}: >= 3x the default",
                      f"{best['kernel']} + {best['conv']}: {_num(best, 'ms'):.2f} ms, "
                      f"{_num(best, 'vs_default'):.2f}x{ref}", _num(best, "vs_default") >= 3))
    return found


def paths_targets(out: Path) -> list[tuple]:
    """The measured paths' step within 1.05x of the best fixed assignment on every row
    (throughput.csv's bench/paths.py rows)."""
    rows = [r for r in read_csv(out / "throughput.csv") if r.get("backends") == "paths"]
    if not rows:
        return [("measured paths within 1.05x of the best fixed paths on every paper row",
                 "no rows (bench/paths.py did not run)", False)]
    worst = max(rows, key=lambda r: _num(r, "auto_over_best"))
    ratio = _num(worst, "auto_over_best")
    return [("measured paths within 1.05x of the best fixed paths on every paper row",
             f"{len(rows)} rows; worst {ratio:.3f}x ({worst['row']}: auto "
             f"{_num(worst, 'auto_ms'):.2f} ms, best {_num(worst, 'best_ms'):.2f} ms, the "
             f"reference {_num(worst, 'reference_ms'):.2f} ms); measuring "
             f"{sum(_num(r, 'overhead_s') for r in rows):.0f} s in all", ratio <= 1.05)]


def targets(out: Path) -> list[tuple]:
    """(target, measured, met) rows read off the sections' CSVs; a target whose rows are missing
    says so."""
    return (test_targets(out) + throughput_targets(out) + paths_targets(out)
            + attention_targets(out) + ssm_targets(out))


def write_report(out: Path, secs: list[Section], budget_s: float, smoke: bool) -> Path:
    env = env_of(next((s.output for s in secs if s.name == "env"), ""))
    lines = [f"# spt GPU report{' (CPU rehearsal: its numbers mean nothing)' if smoke else ''}", "",
             f"- card: {env.get('card', 'none (CPU)')}; torch {env.get('torch', '?')}, CUDA "
             f"{env.get('cuda', '?')}, Triton {env.get('triton', '?')}; flash-attn "
             f"{env.get('flash-attn', '?')}, fla {env.get('fla-core', '?')}, mamba-ssm "
             f"{env.get('mamba-ssm', '?')}",
             f"- measured bf16 matmul peak {env.get('matmul_peak_tflops', '?')} TFLOP/s; copy "
             f"{env.get('copy_gbs', '?')} GB/s",
             f"- commit {env.get('commit', _commit())}; date {time.strftime('%Y-%m-%d %H:%M')}; "
             f"budget {budget_s:.0f} s, used {sum(s.seconds for s in secs):.0f} s", "",
             "## Targets", "", "| target | measured | met |", "|---|---|---|"]
    for what, measured, met in targets(out):
        lines.append(f"| {what} | {measured} | {'yes' if met else 'NO'} |")
    lines += ["", "## Sections", "", "| section | status | seconds | csv |", "|---|---|---|---|"]
    for s in secs:
        lines.append(f"| {s.name} | {s.status} | {s.seconds:.0f} | "
                     f"{s.csv if s.csv and (out / s.csv).exists() else '-'} |")
    for s in secs:
        lines += ["", f"### {s.name}: {s.title}", "", f"status: {s.status}, {s.seconds:.0f} s", "",
                  "```", " ".join(_short(c) for c in s.command), "```", "", "```",
                  _tail(s.output), "```"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _short(arg: str) -> str:
    return os.path.relpath(arg, ROOT) if arg.startswith(str(ROOT)) else arg


def _tail(text: str, limit: int = 12000) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "gpu-report",
                    help="report folder (default results/gpu-report)")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                    help=f"seconds for the whole report (default {DEFAULT_BUDGET_S})")
    ap.add_argument("--smoke", action="store_true", help="the CPU rehearsal at tiny sizes")
    ap.add_argument("--only", nargs="*", default=None, help="run only these sections")
    ap.add_argument("--section", default=None, help=argparse.SUPPRESS)  # a section's own process
    ap.add_argument("--until", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.section == "env":
        section_env(a.out, a.smoke)
        return 0
    if a.section == "throughput":
        return section_throughput(a.out, a.smoke)
    if a.section == "tests":
        return section_tests(a.out, a.smoke)
    if a.section == "check":
        return section_check(a.out, a.smoke, a.until or time.monotonic() + a.budget)
    start = time.monotonic()
    secs = sections(a.out, a.smoke, sys.executable)
    unknown = set(a.only or ()) - {s.name for s in secs}
    if unknown:
        raise SystemExit(f"--only: no section(s) {sorted(unknown)}; sections are "
                         f"{[s.name for s in secs]}")
    env = child_env(a.smoke)
    for s in secs:
        if a.only is not None and s.name not in a.only:
            s.status = "not asked for (--only)"
            continue
        left = a.budget - (time.monotonic() - start)
        if left < 5:
            s.status = "not run: the budget was spent"
            continue
        guard = left if s.guard_s == 0 else min(s.guard_s, left)
        if s.name == "check":  # it stops starting cells in time to write its rows
            s.command = s.command + ["--until", str(time.monotonic() + guard - 15)]
        print(f"[gpu-report] {s.name}: at most {guard:.0f} s", flush=True)
        run_guarded(s, guard, env)
        print(f"[gpu-report] {s.name}: {s.status} in {s.seconds:.0f} s", flush=True)
    path = write_report(a.out, secs, a.budget, a.smoke)
    print(f"[gpu-report] wrote {path} and its CSVs ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
