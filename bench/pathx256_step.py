"""Check: one PathX-256 training step (65,536 tokens per sequence) fits on one GPU; peak memory, time.

    python bench/pathx256_step.py                    # Transformer (Table 4 PathX row) and S4 (C.1.2)
    python bench/pathx256_step.py --batch 4 --grad-checkpointing
    python bench/pathx256_step.py --smoke            # L = 256, tiny models, CPU: checks it works

Models: the Table 4 PathX Transformer row (neighbour-block attention, W = 4096, max pooling) and the
S4 PathX row (section C.1.2: "the same configuration as PathX"), self-pretraining (masked, 50%,
CE over the 256 pixel values) with the paper's PathX-256 pretraining batch size 8, bf16 autocast.
A configuration that runs out of memory is retried with activation checkpointing
(TrainConfig.grad_checkpointing) and then with half the batch, and the table says which one fit.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spt.config import TrainConfig  # noqa: E402
from spt.paper import ssm_row, transformer_row  # noqa: E402
from spt.train.throughput import StepReport, measure_training_step, peak_matmul_flops, synthetic_spec  # noqa: E402

L_PATHX256 = 256 * 256


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8, help="paper: 8 for PathX-256 pretraining")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--grad-checkpointing", action="store_true", help="from the first try")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--csv", default=None, help="also write every row to this CSV file")
    a = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not a.smoke else "cpu")
    L, bsz, steps = (256, 2, 1) if a.smoke else (L_PATHX256, a.batch, a.steps)
    tr, s4 = transformer_row("pathx", "masked"), ssm_row("pathx", "s4")
    models = [("transformer:pathx256", dataclasses.replace(tr.model, max_len=L), tr.objective),
              ("s4:pathx256", dataclasses.replace(s4.model, max_len=L), s4.objective)]
    if a.smoke:
        models = [(n, dataclasses.replace(m, d_model=16, n_layers=1,
                                          **({"n_heads": 2, "d_ff": 32, "local_block": 64}
                                             if hasattr(m, "n_heads") else {"d_state": 8})), o)
                  for n, m, o in models]
    peak = peak_matmul_flops(device, n=256 if a.smoke else None)
    total = torch.cuda.get_device_properties(device).total_memory / 2 ** 30 \
        if device.type == "cuda" else float("nan")
    print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'} "
          f"({total:.0f} GiB); L = {L}; measured matmul peak {peak / 1e12:.3g} TFLOP/s")
    print(f"{StepReport.header()}  setting")
    out = []
    for name, model, objective in models:
        spec = synthetic_spec(name, L, objective)
        tries = [(a.grad_checkpointing, bsz), (True, bsz), (True, max(1, bsz // 2))]
        for ckpt, b in dict.fromkeys(tries):
            cfg = TrainConfig(device=str(device), grad_checkpointing=ckpt)
            try:
                r = measure_training_step(name, model, objective, spec, b, device, steps=steps,
                                          warmup=1, train_cfg=cfg, peak_flops=peak)
            except torch.cuda.OutOfMemoryError:
                print(f"{name:<28} batch {b}, grad_checkpointing={ckpt}: out of memory")
                torch.cuda.empty_cache()
                continue
            print(f"{r.row()}  grad_checkpointing={ckpt}", flush=True)
            out.append((r, ckpt))
            break
        else:
            print(f"{name:<28} did not fit at any setting tried")
    if a.csv:
        write_csv(a.csv, out, L)
    return out


def write_csv(path: str, rows: list, L: int) -> None:
    import csv
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "L", "batch", "grad_checkpointing", "step_ms", "peak_GB",
                    "tokens_per_s"])
        for r, ckpt in rows:
            w.writerow([r.name, L, r.batch, ckpt, round(1e3 * r.step_s, 2), round(r.peak_mem_gb, 3),
                        round(r.tokens_per_s)])


if __name__ == "__main__":
    main()
