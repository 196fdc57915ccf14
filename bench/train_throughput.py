"""Benchmark: training throughput of the paper's configurations (Table 4 Transformers, Table 5 S4).

    python bench/train_throughput.py                 # LRA Text Transformer, LRA Image S4, PathX
    python bench/train_throughput.py --all           # every Table 4 row and every S4 row
    python bench/train_throughput.py --all --graphs --csv out.csv   # eager and captured, per row
    python bench/train_throughput.py --compile --grad-checkpointing
    python bench/train_throughput.py --smoke         # tiny sizes on CPU: checks the script works
    python bench/train_throughput.py --all --match pathx --kernel-path gemm --conv-path manual
                                                     # PathX rows, SSM layers on pinned paths
    python bench/train_throughput.py --all --paths auto   # the paths fit() would measure and keep

Per configuration: one self-pretraining step (the preset's model, objective and pretraining batch
size, full-length synthetic inputs, bf16 autocast on CUDA, AdamW), timed over --steps steps after
--warmup steps, at the implementation paths --paths says (spt.kernels.paths; default "reference":
every module's reference; "auto": measured as fit() measures them) with --kernel-path and --conv-
path pinned on the SSM layers. Columns: parameters, batch, sequence length, step time, training
tokens/s, counted model FLOPs per step (spt.train.throughput), MFU against the bf16 matmul peak
measured at the start of the same run, and peak GPU memory. --show-syncs lists where one step
synchronises the host with the GPU (torch's sync debug mode).

--graphs measures every configuration twice in the same run: eagerly, then with the step's path
"graphs" (forward and backward captured into a CUDA graph and replayed, spt.train.graphs). Its line
adds the speed-up (eager step time / captured step time) and the largest difference between the two
runs' losses at the same step (same model, batch and seeds: 0 when the replayed step computes what
the eager one does). With --graphs a measurement is timed over at least 3 steps and 0.25 s unless
--steps / --min-time say otherwise.
--csv PATH writes every row (a failed one with its error), one line as each row ends.
A configuration that fails (out of memory, or any other error) prints its error; the script goes on.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spt.config import TrainConfig, TransformerConfig  # noqa: E402
from spt.paper import SSM_ROWS, TRANSFORMER_ROWS, ssm_row, transformer_row  # noqa: E402
from spt.ssm_config import SSMConfig  # noqa: E402
from spt.train.throughput import StepReport, measure_training_step, peak_matmul_flops, synthetic_spec  # noqa: E402

# LRA sequence lengths and continuous channels per task (the data modules' TaskSpecs).
SEQ_LEN = {"listops": 2000, "text": 4096, "retrieval": 4001, "image": 1024, "pathfinder": 1024,
           "pathx": 16384, "speech": 16000, "bidmc_hr": 4000, "bidmc_rr": 4000,
           "bidmc_spo2": 4000}
D_INPUT = {"bidmc_hr": 2, "bidmc_rr": 2, "bidmc_spo2": 2}
DEFAULT_ROWS = [("transformer", "text", "masked"), ("s4", "image", "s4"),
                ("transformer", "pathx", "masked"), ("s4", "pathx", "s4")]


def _shrink(model):
    """Smoke-test sizes: one narrow layer, short kernels, small local blocks."""
    if isinstance(model, TransformerConfig):
        return dataclasses.replace(model, d_model=32, n_heads=2, d_ff=64, n_layers=1, max_len=64,
                                   local_block=16 if model.local_block else None)
    return dataclasses.replace(model, d_model=16, n_layers=1, d_state=8, max_len=64)


def pinned_paths(a, model) -> dict:
    """--kernel-path / --conv-path as a TrainConfig.paths mapping for `model`'s SSM layers;
    "gemm" exists for DLR only, so the other kinds keep their kernel path."""
    pins = {}
    if isinstance(model, SSMConfig):
        if a.kernel_path and (a.kernel_path != "gemm" or model.kind == "dlr"):
            pins[f"{model.kind}_kernel"] = a.kernel_path
        if a.conv_path:
            pins["fft_conv"] = a.conv_path
    return pins


def paths_setting(a, model, step=None):
    """TrainConfig.paths of a row: --paths, with the pinned paths (and the step) on top."""
    pins = {**pinned_paths(a, model), **({"step": step} if step else {})}
    return {**pins, "others": a.paths} if pins else a.paths


def rows(all_rows: bool):
    if not all_rows:
        return DEFAULT_ROWS
    return ([("transformer", t, v) for t, v in TRANSFORMER_ROWS]
            + [("s4", t, v) for t, v in SSM_ROWS])


CSV_FIELDS = ["config", "family", "task", "variant", "mode", "params", "batch", "seq_len",
              "step_ms", "tokens_per_s", "tflop_per_step", "mfu", "peak_mem_gb", "speedup",
              "max_loss_diff", "error"]


def _guarded(label: str, what: str, measure):
    """-> (measure()'s StepReport, None), or (None, the error) after printing it."""
    try:
        return measure(), None
    except torch.cuda.OutOfMemoryError:
        error = "out of memory: try --batch or --grad-checkpointing"
    except Exception as e:  # one failing configuration must not end the table
        error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    print(f"{label:<28} {what} failed: {error}", flush=True)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return None, error


def loss_difference(a: StepReport, b: StepReport) -> float:
    """The largest |loss a - loss b| over the steps both runs took."""
    n = min(len(a.losses), len(b.losses))
    return max((abs(x - y) for x, y in zip(a.losses[:n], b.losses[:n])), default=math.nan)


def _csv_row(base: dict, r, error=None, speedup=None, diff=None) -> dict:
    row = dict(base, error=error or "")
    if r is not None:
        row.update(mode="graphs" if r.graphs else "eager", params=r.params, batch=r.batch,
                   seq_len=r.seq_len, step_ms=f"{r.step_s * 1e3:.4g}",
                   tokens_per_s=f"{r.tokens_per_s:.6g}", tflop_per_step=f"{r.flops_per_step / 1e12:.4g}",
                   mfu=f"{r.mfu:.4g}", peak_mem_gb=f"{r.peak_mem_gb:.3g}")
    if speedup is not None:
        row.update(speedup=f"{speedup:.3g}", max_loss_diff=f"{diff:.3g}")
    return row


def main(argv=None) -> list[StepReport]:
    """Every measurement made, in order (with --graphs each row's captured one after its eager one)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--all", action="store_true", help="every Table 4 and S4 row")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 2 steps (CPU check)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default 10; 3 with --graphs)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="time each measurement over at least this many seconds (default 0; "
                         "0.25 with --graphs)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=None, help="override the preset batch size")
    ap.add_argument("--compile", action="store_true", help="TrainConfig.compile")
    ap.add_argument("--grad-checkpointing", action="store_true")
    ap.add_argument("--graphs", action="store_true",
                    help="also measure each row with the step's path 'graphs'; print the ratio")
    ap.add_argument("--csv", default=None, metavar="PATH", help="write every row to this CSV file")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--show-syncs", action="store_true",
                    help="list the host-device syncs of one step (CUDA)")
    ap.add_argument("--match", default=None, help="only rows whose name contains this text, "
                    "e.g. 'pathx' or '/dlr' (SSM rows are named s4:<task>/<variant>)")
    ap.add_argument("--paths", default="reference", choices=["reference", "auto"],
                    help="the implementation paths of every row: every module's reference "
                    "(default), or measured and checked as fit() does (TrainConfig.paths)")
    ap.add_argument("--kernel-path", default=None,
                    help="pin the SSM kernel path of every SSM layer: torch | triton | ref | gemm "
                    "(DLR layers only)")
    ap.add_argument("--conv-path", default=None,
                    help="pin the FFT convolution path of every SSM layer: torch | manual")
    a = ap.parse_args(argv)
    if a.graphs and (a.compile or a.grad_checkpointing):
        ap.error("--graphs measures the eager step captured: leave out --compile and "
                 "--grad-checkpointing")
    device = torch.device(a.device if a.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    steps = a.steps if a.steps is not None else (3 if a.graphs else 10)
    min_time = a.min_time if a.min_time is not None else (0.25 if a.graphs else 0.0)
    warmup = a.warmup
    if a.smoke:
        steps, warmup, min_time = 2, 1, 0.0
    started = time.perf_counter()
    peak = peak_matmul_flops(device, n=256 if a.smoke else None)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {name}; measured matmul peak "
          f"{'bf16' if device.type == 'cuda' else 'fp32'}: {peak / 1e12:.3g} TFLOP/s")
    print(StepReport.header() + (f" {'speed-up':>8} {'loss diff':>9}" if a.graphs else ""))
    table = open(a.csv, "w", newline="") if a.csv else None
    writer = csv.DictWriter(table, CSV_FIELDS) if table else None
    if writer:
        writer.writeheader()
    out = []
    try:
        for family, task, variant in rows(a.all):
            label = f"{family}:{task}/{variant}"
            if a.match and a.match not in label:
                continue
            base = dict(config=label, family=family, task=task, variant=variant)
            preset = transformer_row(task, variant) if family == "transformer" else \
                ssm_row(task, variant)
            model, L, bsz = preset.model, SEQ_LEN[task], a.batch or preset.pretrain.batch_size
            if family == "s4":
                model = dataclasses.replace(model, max_len=max(model.max_len, L))
            if a.smoke:
                model, L, bsz = _shrink(model), 64, 2
            spec = synthetic_spec(task, L, preset.objective, D_INPUT.get(task, 1))
            cfg = TrainConfig(device=str(device), compile=a.compile,
                              grad_checkpointing=a.grad_checkpointing, lr=preset.pretrain.lr,
                              paths=paths_setting(a, model))

            def measure(name, cfg, flops=None, find_syncs=a.show_syncs):
                return measure_training_step(name, model, preset.objective, spec, bsz, device,
                                             steps=steps, warmup=warmup, train_cfg=cfg,
                                             peak_flops=peak, flops=flops, min_time=min_time,
                                             find_syncs=find_syncs)

            r, error = _guarded(label, f"batch {bsz}, L={L}", lambda: measure(label, cfg))
            if writer:
                writer.writerow(_csv_row(dict(base, mode="eager"), r, error))
                table.flush()
            if r is None:
                continue
            print(r.row(), flush=True)
            if a.show_syncs and r.host_syncs:
                for where in sorted(set(r.host_syncs)):
                    print(f"    host sync x{r.host_syncs.count(where)}: {where}")
            out.append(r)
            if not a.graphs:
                continue
            g, error = _guarded(label, "with the step captured", lambda: measure(
                f"{label} graphs", dataclasses.replace(cfg, paths=paths_setting(a, model, "graphs")),
                flops=r.flops_per_step, find_syncs=False))
            speedup = diff = None
            if g is not None:
                speedup, diff = r.step_s / g.step_s, loss_difference(r, g)
                print(f"{g.row()} {speedup:7.2f}x {diff:9.2g}", flush=True)
                out.append(g)
            if writer:
                writer.writerow(_csv_row(dict(base, mode="graphs"), g, error, speedup, diff))
                table.flush()
    finally:
        if table:
            table.close()
    print(f"{len(out)} measurements in {time.perf_counter() - started:.0f} s"
          + (f"; rows in {a.csv}" if a.csv else ""))
    return out


if __name__ == "__main__":
    main()
