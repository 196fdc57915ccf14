"""Write the sample result files shipped in spt/samples/ from the laptop studies, and PROVENANCE.md.

    python tools/make_sample_results.py                       # run both laptop studies, write samples
    python tools/make_sample_results.py --from RESULTS        # from finished laptop runs under RESULTS
    python tools/make_sample_results.py --only kernels --out /tmp/s

data_scales.nc : study 04's laptop preset (S4 d=64 x 3, scratch vs. SPT on nested fractions of the
                 digits' 997 training images, 3 seeds): its result Dataset with a "model"
                 dimension, pretraining curves dropped; dims (task, model, fraction, init, seed)
                 + epoch for the finetuning / scratch curves.
kernels.nc     : per-channel |K| (layer, channel, lag) of study 06's laptop S4 (d=64 x 4,
                 2,000 masked-pretraining steps on 16x16 digits; seed 0) and of the same config
                 at its HiPPO initialisation; dims (task, model, layer, channel, lag).
RESULTS is the --out of `spt study run 04_data_scales --preset laptop` and
`spt study run 06_kernel_decay --preset laptop`; without --from, both run in a temporary folder
(about 55 min on 2 cores). PROVENANCE.md states what each sample shows, computed from its numbers.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
import xarray as xr

from spt.analysis.kernel_decay import kernel_abs_comparison
from spt.hub import build_from_config
from spt.studies import data_scales, kernel_decay
from spt.studies.machinery.cells import load_study, run_folder
from spt.train.checkpoint import load_backbone, load_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def _encode(ds: xr.Dataset) -> dict:
    return {v: {"zlib": True, "complevel": 6} for v in ds.data_vars
            if ds[v].dtype.kind in "fiu"}


def _write(ds: xr.Dataset, path: Path) -> Path:
    """netCDF with gzip-compressed variables; dict attrs as JSON strings (netCDF attrs are flat)."""
    ds = ds.copy()
    for k, v in list(ds.attrs.items()):
        if isinstance(v, (dict, list, tuple)) or v is None:
            ds.attrs[k] = json.dumps(v, default=str)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    ds.to_netcdf(tmp, engine="netcdf4", encoding=_encode(ds))
    tmp.replace(path)
    return path


def make_data_scales(results: Path, workers: int) -> xr.Dataset:
    """Study 04's laptop results under `results` (run there first if missing)."""
    if not (results / data_scales.STUDY).is_dir():
        data_scales.STUDY.run("laptop", results, workers=workers)
    ds = load_study(results, data_scales.STUDY)
    keep = [v for v in ds.data_vars if not v.startswith("pretrain_curve")]
    out = ds[keep].expand_dims(model=["s4"]).transpose("task", "model", "fraction", "init", "seed",
                                                     ...)
    out = out.astype({v: "float32" for v in out.data_vars})
    out.attrs = {"description": "study 04 laptop preset: S4 scratch vs. SPT on nested fractions",
                 "preset": data_scales.STUDY.preset("laptop").note}
    return out


def _pretrained_model(path: Path) -> torch.nn.Module:
    """The pretraining model of a pretraining best.pt, its weights loaded."""
    c = load_checkpoint(path)
    model = build_from_config({**c, "kind": "pretraining"})
    load_backbone(model, c)
    return model.eval()


def make_kernels(results: Path, workers: int, seed: int = 0) -> xr.Dataset:
    """Per-channel |K| of study 06's laptop S4 (seed `seed`) after pretraining vs. its init."""
    if not (results / kernel_decay.STUDY).is_dir():
        kernel_decay.STUDY.run("laptop", results, workers=workers)
    cell = [c for c in kernel_decay.STUDY.cells("laptop") if c.coords["seed"] == seed][0]
    ckpt = run_folder(results, kernel_decay.STUDY, cell.coords) / "pretrain" / "best.pt"
    if not ckpt.is_file():
        raise FileNotFoundError(f"{ckpt}: study 06's laptop run of seed {seed} is missing; run "
                                f"`spt study run 06_kernel_decay --preset laptop --out {results}`")
    model = _pretrained_model(ckpt)
    L = int(cell.config["model"]["max_len"])
    ds = kernel_abs_comparison(model, L=L, seed=seed).rename(model="model_abs",
                                                              baseline="baseline_abs")
    out = ds.astype("float32").expand_dims(model=["s4"]).expand_dims(task=[cell.coords["task"]])
    out = out.assign_coords(period=("task", [kernel_decay.PERIODS[cell.coords["task"]]]))
    out.attrs = {"description": "per-channel |K| after masked self-pretraining vs. HiPPO init",
                 "preset": kernel_decay.STUDY.preset("laptop").note, "seed": seed,
                 "checkpoint": str(ckpt)}
    return out


def data_scales_finding(ds: xr.Dataset) -> str:
    """What the data-scale sample shows, from its numbers: mean test accuracy per fraction and
    the relative gain, and whether the gain grows as the fraction shrinks."""
    g = data_scales.gains(ds.isel(model=0, drop=True))
    rows = []
    for f in g["fraction"].values:
        acc = g["accuracy"].sel(task=g["task"].values[0], fraction=f)
        rel = float(g["relative_gain"].sel(task=g["task"].values[0], fraction=f))
        rows.append(f"{f:g}: scratch {float(acc.sel(init='scratch')):.1f}%, SPT "
                    f"{float(acc.sel(init='spt')):.1f}% ({rel:+.1f}%)")
    rel = g["relative_gain"].isel(task=0).values
    grows = bool(np.all(np.diff(rel) <= 0))
    verdict = ("the relative gain grows at every step as the fraction shrinks (Fig. 3's finding "
               "shows)" if grows else "the relative gain does NOT grow at every step as the "
               "fraction shrinks")
    return (f"Mean test accuracy over {ds.sizes['seed']} seeds (relative gain of SPT) at each "
            f"fraction — {'; '.join(rows)}: {verdict}.")


def kernels_finding(ds: xr.Dataset) -> str:
    """Per layer: the lag by which half of K_max has accumulated, pretrained vs. HiPPO."""
    k = ds["model_abs"].isel(task=0, model=0).max("channel")
    b = ds["baseline_abs"].isel(task=0, model=0).max("channel")
    lags = k["lag"].values
    half = partial(kernel_decay.half_lag, lags=lags)
    period = int(ds["period"].values[0])
    parts = [f"layer {int(l)} {half(k.sel(layer=l).values)} vs. {half(b.sel(layer=l).values)}"
             for l in k["layer"].values]
    row = [f"layer {int(l)} {float(k.sel(layer=l, lag=period)):.2f} vs. "
           f"{float(b.sel(layer=l, lag=period)):.2f}" for l in k["layer"].values]
    return ("Lag by which half of K_max (max over channels) has accumulated, pretrained vs. "
            "HiPPO: " + ", ".join(parts) + f". K_max at lag {period} (the pixel one row up), "
            "pretrained vs. HiPPO: " + ", ".join(row) + ".")


def provenance(out: Path) -> str:
    """PROVENANCE.md text from the attrs of every sample file in `out`."""
    lines = ["# Sample results: provenance", "",
             "Result files of the laptop presets of studies 04 and 06 (real CPU runs); the "
             "explorers open on them. Regenerate with:", "", "```bash",
             "python tools/make_sample_results.py                  # runs both (~55 min, 2 cores)",
             "python tools/make_sample_results.py --from RESULTS   # from finished laptop runs",
             "```", "", "The paragraph after each description is computed from the file's numbers "
             "by the tool. The runtime is the tool's (with --from: reading the runs; the studies' "
             "own times are in the README's laptop table).", ""]
    for f in sorted(out.glob("*.nc")):
        with xr.open_dataset(f, engine="netcdf4") as ds:
            a = dict(ds.attrs)
            finding = FINDINGS[f.stem](ds.load()) if f.stem in FINDINGS else ""
        lines += [f"## {f.name} ({f.stat().st_size / 1024:.0f} KB)", "",
                  DESCRIPTIONS.get(f.stem, ""), "", finding, "",
                  f"- command: `{a.get('made_by', '?')}`",
                  f"- date: {a.get('made_on', '?')}; runtime {float(a.get('runtime_s', 'nan')) / 60:.1f} min",
                  f"- machine: {a.get('machine', '?')}",
                  f"- versions: {a.get('versions', '?')}", ""]
    return "\n".join(lines)


DESCRIPTIONS = {
    "data_scales": ("Study 04's laptop preset (`spt study run 04_data_scales --preset laptop`): "
                    "S4 (d=64 x 3) on digits 8x8 with continuous pixels at nested fractions of the "
                    "997 training images, 1,000 masked-L1 pretraining steps at every fraction, "
                    "finetuning (lr 1e-3) vs. scratch over lrs {3e-3, 1e-3}, patience 20 epochs "
                    "and at least 140 steps on both sides (validated 5 times per patience window), "
                    "3 seeds. Dims: task, model, fraction, "
                    "init, seed (+ epoch for the curves)."),
    "kernels": ("Per-channel |K| (max over both directions) of study 06's laptop S4 (d=64 x 4 "
                "layers, N=64; seed 0) after 2,000 masked-L1 pretraining steps on the 997 "
                "training digits at 16x16 (256-pixel sequences), next to the same config at its "
                "HiPPO init (`kernel_abs_comparison`, L=256). Variables model_abs, baseline_abs "
                "over (task, model, layer, channel, lag); coordinate `period` = 16 pixels per "
                "image row."),
}
FINDINGS = {"data_scales": data_scales_finding, "kernels": kernels_finding}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "spt" / "samples"), help="output folder")
    p.add_argument("--from", dest="results", default=None,
                   help="results folder of the laptop runs of studies 04 and 06 (default: run "
                        "them in a temporary folder)")
    p.add_argument("--only", choices=["data_scales", "kernels"], help="make one sample only")
    p.add_argument("--workers", type=int, default=0, help="worker processes (0: one per core)")
    a = p.parse_args(argv)
    out = Path(a.out)
    versions = ", ".join(f"{m.__name__} {m.__version__}" for m in (torch, np, xr))
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(a.results) if a.results else Path(tmp)
        for name, make in (("data_scales", make_data_scales), ("kernels", make_kernels)):
            if a.only and a.only != name:
                continue
            t0 = time.time()
            ds = make(results, a.workers)
            ds.attrs.update(
                made_by="python tools/make_sample_results.py" + (f" --only {name}" if a.only else "")
                + (" --from RESULTS" if a.results else ""),
                made_on=datetime.date.today().isoformat(), runtime_s=round(time.time() - t0, 1),
                machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU",
                versions=f"python {platform.python_version()}, {versions}")
            _write(ds, out / f"{name}.nc")
            print(f"wrote {out / f'{name}.nc'} in {time.time() - t0:.0f} s", flush=True)
    (out / "PROVENANCE.md").write_text(provenance(out) + "\n")


if __name__ == "__main__":
    main()
