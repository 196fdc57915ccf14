"""Benchmark: training throughput of the paper's configurations (Table 4 Transformers, Table 5 S4).

    python bench/train_throughput.py                 # LRA Text Transformer, LRA Image S4, PathX
    python bench/train_throughput.py --all           # every Table 4 row and every S4 row
    python bench/train_throughput.py --compile --grad-checkpointing
    python bench/train_throughput.py --smoke         # tiny sizes on CPU: checks the script works
    python bench/train_throughput.py --all --match pathx --kernel-backend gemm --conv-backend manual
                                                     # PathX rows, SSM layers on opt-in paths

Per configuration: one self-pretraining step (the preset's model, objective and pretraining batch
size, full-length synthetic inputs, bf16 autocast on CUDA, AdamW), timed over --steps steps after
--warmup steps. Columns: parameters, batch, sequence length, step time, training tokens/s, counted
model FLOPs per step (spt.train.throughput), MFU against the bf16 matmul peak measured at the start
of the same run, and peak GPU memory. A configuration that runs out of memory is reported, not fatal.
--show-syncs lists where one step synchronises the host with the GPU (torch's sync debug mode).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spt.config import TrainConfig, TransformerConfig  # noqa: E402
from spt.models.ssm import SSMEncoder  # noqa: E402
from spt.paper import SSM_ROWS, TRANSFORMER_ROWS, ssm_row, transformer_row  # noqa: E402
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


def _backends(a, model) -> None:
    """--kernel-backend / --conv-backend on every SSM stack of `model` (None: leave as built);
    "gemm" exists for DLR only, so the other kinds keep their kernel backend."""
    for m in model.modules():
        if isinstance(m, SSMEncoder):
            if a.kernel_backend and (a.kernel_backend != "gemm" or m.cfg.kind == "dlr"):
                m.set_backend(a.kernel_backend)
            if a.conv_backend:
                m.set_conv_backend(a.conv_backend)


def rows(all_rows: bool):
    if not all_rows:
        return DEFAULT_ROWS
    return ([("transformer", t, v) for t, v in TRANSFORMER_ROWS]
            + [("s4", t, v) for t, v in SSM_ROWS])


def main(argv=None) -> list[StepReport]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--all", action="store_true", help="every Table 4 and S4 row")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 2 steps (CPU check)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=None, help="override the preset batch size")
    ap.add_argument("--compile", action="store_true", help="TrainConfig.compile")
    ap.add_argument("--grad-checkpointing", action="store_true")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--show-syncs", action="store_true",
                    help="list the host-device syncs of one step (CUDA)")
    ap.add_argument("--match", default=None, help="only rows whose name contains this text, "
                    "e.g. 'pathx' or '/dlr' (SSM rows are named s4:<task>/<variant>)")
    ap.add_argument("--kernel-backend", default=None,
                    help="SSM kernel backend of every SSM layer: auto | triton | torch | ref | "
                    "gemm (DLR layers only)")
    ap.add_argument("--conv-backend", default=None,
                    help="FFT convolution backend of every SSM layer: autograd | manual")
    a = ap.parse_args(argv)
    device = torch.device(a.device if a.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    steps, warmup = (2, 1) if a.smoke else (a.steps, a.warmup)
    peak = peak_matmul_flops(device, n=256 if a.smoke else None)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {name}; measured matmul peak "
          f"{'bf16' if device.type == 'cuda' else 'fp32'}: {peak / 1e12:.3g} TFLOP/s")
    print(StepReport.header())
    out = []
    for family, task, variant in rows(a.all):
        preset = transformer_row(task, variant) if family == "transformer" else \
            ssm_row(task, variant)
        model, L, bsz = preset.model, SEQ_LEN[task], a.batch or preset.pretrain.batch_size
        if family == "s4":
            model = dataclasses.replace(model, max_len=max(model.max_len, L))
        if a.smoke:
            model, L, bsz = _shrink(model), 64, 2
        spec = synthetic_spec(task, L, preset.objective, D_INPUT.get(task, 1))
        cfg = TrainConfig(device=str(device), compile=a.compile,
                          grad_checkpointing=a.grad_checkpointing, lr=preset.pretrain.lr)
        label = f"{family}:{task}/{variant}"
        if a.match and a.match not in label:
            continue
        try:
            r = measure_training_step(label, model, preset.objective, spec, bsz, device,
                                      steps=steps, warmup=warmup, train_cfg=cfg, peak_flops=peak,
                                      configure=functools.partial(_backends, a))
        except torch.cuda.OutOfMemoryError:
            print(f"{label:<28} out of memory at batch {bsz}, L={L}: try --batch or "
                  f"--grad-checkpointing")
            torch.cuda.empty_cache()
            continue
        print(r.row(), flush=True)
        if a.show_syncs and r.host_syncs:
            for where in sorted(set(r.host_syncs)):
                print(f"    host sync x{r.host_syncs.count(where)}: {where}")
        out.append(r)
    return out


if __name__ == "__main__":
    main()
