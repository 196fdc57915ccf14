"""Result files: one xarray Dataset per run, written as netCDF-4 (the netCDF4 engine), combined on load.

Conventions: dims name what was varied (``init``, ``seed``, ``task``, ``fraction`` ...), data
variables hold metrics, and the run's configuration is a JSON string in ``attrs["config"]`` (netCDF
attributes must be flat), and the code that made it (spt version and commit, torch, device, host,
date: :mod:`spt.provenance`) is a JSON string in ``attrs["provenance"]``; a combined Dataset keeps
one provenance record per file (:func:`provenance`). Provenance is never part of a result's
configuration. Files are written atomically (temp file + rename, mode from the umask) and
never overwritten unless asked; a file that cannot be read back (truncated by a full disk or a
partial copy) raises :class:`~spt.atomic.DamagedFileError` naming it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from .atomic import DamagedFileError, atomic_write
from .provenance import current_provenance, describe, describe_paths, same_code

# netCDF-4 files (HDF5) through the netCDF C library: the same files h5netcdf reads and writes, at
# about 6x its speed writing and 12x reading a study cell's result (27 variables: 0.04 s against
# 0.22 s, 0.02 s against 0.19 s on a 2-core CPU), which is most of a smoke cell's time
ENGINE = "netcdf4"


def write_result(ds: xr.Dataset, path, *, config: dict | None = None,
                 overwrite: bool = False) -> Path:
    """Write `ds` to `path` (.nc) atomically; `config` (a JSON-able dict) goes to attrs["config"],
    the provenance of this process to attrs["provenance"] (a Dataset read from result files keeps
    the provenance it has: that of the code that made its numbers)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True or choose another path")
    ds = ds.copy()
    for v in ds.variables.values():
        # an encoding read from an earlier file (e.g. a fixed-width string dtype) would truncate
        # longer values combined since ("scratch_continuous" written as "scratch")
        v.encoding = {k: e for k, e in v.encoding.items() if k != "dtype" or v.dtype.kind not in "USO"}
    if config is not None:
        ds.attrs["config"] = json.dumps(config, sort_keys=True, default=str)
    ds.attrs.setdefault("provenance", current_provenance())
    for k, v in list(ds.attrs.items()):
        if isinstance(v, (dict, list, tuple)) or v is None:
            ds.attrs[k] = json.dumps(v, default=str)
    # serialised in memory first: the file is then written by Python, whose write on a full disk
    # is an ENOSPC error (HDF5 writing there itself can crash the process). The netCDF library's
    # in-memory file is padded past its end: only the bytes up to the end HDF5 records are kept
    data = bytes(ds.to_netcdf(engine=ENGINE))
    data = data[:stored_end(data) or len(data)]
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def stored_end(head: bytes) -> int | None:
    """The file size an HDF5 file's superblock records (its end-of-file address), read from its
    first 48 bytes; None for a file that is not HDF5 or has a superblock layout not known here.
    Superblock versions 0 and 1 keep it at byte 40, versions 2 and 3 at byte 28 (with the 8-byte
    addresses every netCDF-4 file uses)."""
    if len(head) < 48 or head[:8] != HDF5_SIGNATURE:
        return None
    version = head[8]
    if version in (0, 1) and head[13] == 8:
        return int.from_bytes(head[40:48], "little")
    if version in (2, 3) and head[9] == 8:
        return int.from_bytes(head[28:36], "little")
    return None


def read_result(path) -> xr.Dataset:
    """Load one result file fully into memory (the file is closed afterwards).

    Raises FileNotFoundError if there is none, DamagedFileError naming a truncated / corrupt one.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no result file at {path}")
    if not os.access(path, os.R_OK):  # h5py would call this a failed open, like a damaged file
        raise PermissionError(f"result file {path} is not readable by this user (mode "
                              f"{path.stat().st_mode & 0o777:o}); ask its owner to chmod a+r it")
    try:
        _check_whole(path)
        with xr.open_dataset(path, engine=ENGINE) as ds:
            return ds.load()
    except (PermissionError, IsADirectoryError):
        raise
    except (OSError, RuntimeError) as e:  # "NetCDF: HDF error", "Unknown file format", truncated
        raise DamagedFileError(path, f"result file {path} ({path.stat().st_size} bytes) is "
                               f"truncated or corrupt ({type(e).__name__}: "
                               f"{str(e).splitlines()[0][:120]}). Delete it: a study run "
                               f"recomputes that cell, and load_study reads the rest.") from None


def _check_whole(path: Path) -> None:
    """An OSError when the file is shorter than its HDF5 superblock says: a cut copy or a full
    disk (the netCDF library itself reads such a file as long as the missing part holds no data
    it is asked for)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        end = stored_end(f.read(48))
    if end is not None and size < end:
        raise OSError(f"truncated file: {size} bytes of the {end} its superblock records")


def run_config(ds: xr.Dataset) -> dict:
    """The configuration a result file was written with (attrs["config"] parsed)."""
    return json.loads(ds.attrs.get("config", "{}"))


def combine_results(parts, dims=None) -> xr.Dataset:
    """Combine result Datasets along their grid dims (outer join).

    dims : the dims that tell runs apart (e.g. task, init, seed). Default: the "coords" each study
           file stores in its config, if any. Every other dim (epoch, lag ...) is first aligned to
           the union of its values, NaN-padded, so runs of different lengths combine cleanly.
    """
    parts = list(parts)
    if dims is None:
        dims = set()
        for p in parts:
            dims |= set(run_config(p).get("coords", {}))
    records = [r for p in parts for r in _provenance_records(p)]
    if dims:
        parts = list(xr.align(*parts, join="outer", exclude=set(dims)))
    ds = xr.combine_by_coords(parts, join="outer", compat="no_conflicts", coords="different",
                              combine_attrs="drop_conflicts")
    ds.attrs.pop("config", None)
    ds.attrs["provenance"] = json.dumps(records, sort_keys=True, default=str)
    return ds


def _provenance_records(ds: xr.Dataset) -> list[dict]:
    """[{"coords": {...}, spt, commit, torch, ...}] of a result file (one record; none of the
    code's fields for a file written before spt recorded provenance) or of a combined Dataset (one
    per file it combines)."""
    stored = ds.attrs.get("provenance")
    stored = json.loads(stored) if isinstance(stored, str) else stored
    if isinstance(stored, list):
        return stored
    return [{"coords": run_config(ds).get("coords", {}), **(stored or {})}]


def provenance(ds: xr.Dataset):
    """Which code made each result in `ds` (a result file, or what load_study / load_results /
    Study.run combined): a pandas DataFrame with one row per result file, its coords (task, init,
    seed ...) then spt, commit, torch, python, platform, host, device, threads, date, and the
    implementation paths each stage ran ("pretrain: fft_conv manual, step eager; finetune: ...",
    :mod:`spt.train.paths`). Empty values for a file written before spt recorded them.

        provenance(load_study("results", "04_data_scales"))
    """
    import pandas as pd

    rows = [{**r.get("coords", {}), **{k: describe_paths(v) if k == "paths" else v
                                       for k, v in r.items() if k != "coords"}}
            for r in _provenance_records(ds)]
    return pd.DataFrame(rows)


def other_code_note(ds: xr.Dataset) -> str | None:
    """A line saying which results in `ds` were made by other spt code than this process's
    (another version or commit), or None when all were made by this code. Information only: a
    result's identity is its configuration, so such results are reused as they are."""
    here = current_provenance()
    records = _provenance_records(ds)
    other = [r for r in records if not same_code(r, here)]
    if not other:
        return None
    counts: dict = {}
    for r in other:
        counts[describe(r)] = counts.get(describe(r), 0) + 1
    made = "; ".join(f"{n} by {who}" for who, n in counts.items())
    return (f"note: {len(other)} of {len(records)} results were made by other spt code ({made}); "
            f"this is {describe(here)}. They are reused as they are (a result is known by its "
            f"configuration); spt.results.provenance(ds) lists each one's code, device and date.")


def load_results(folder, pattern: str = "*.nc") -> xr.Dataset:
    """Combine every result file under `folder` (recursively) along their grid dims."""
    files = sorted(Path(folder).rglob(pattern))
    if not files:
        raise FileNotFoundError(f"no result files matching {pattern!r} under {folder}")
    return combine_results(read_result(f) for f in files)


load = load_results


def paired_gain(treated: xr.DataArray, control: xr.DataArray, dim: str = "seed",
                level: float = 0.95) -> xr.Dataset:
    """The gain of `treated` over `control` paired along `dim` (the same seed on both sides):
    over `dim`, the mean gain, its `level` interval from Student's t on the paired differences
    (mean +- t_{n-1} * sd / sqrt(n); NaN with fewer than two pairs), how many pairs the treated
    side is ahead in, and n (pairs with both values). Other dims (task, fraction ...) are kept.

        g = paired_gain(acc.sel(init="spt"), acc.sel(init="scratch"))   # Dataset over task
        format_gain(g.sel(task="text"))            # "+18.3 [+10.1, +26.5], 6/6 ahead"
    """
    from scipy.stats import t as student_t

    if not 0.0 < level < 1.0:
        raise ValueError(f"paired_gain: level must be in (0, 1), got {level!r}")
    d = treated - control
    n = d.notnull().sum(dim)
    mean = d.mean(dim)
    sd = d.std(dim, ddof=1) if d.sizes.get(dim, 0) > 1 else mean * np.nan
    quantile = xr.apply_ufunc(lambda k: student_t.ppf(0.5 + level / 2, np.maximum(k - 1, 1)), n)
    half = (quantile * sd / np.sqrt(n)).where(n >= 2)
    return xr.Dataset({"gain": mean, "low": mean - half, "high": mean + half,
                       "ahead": (d > 0).sum(dim), "n": n}, attrs={"level": level})


def fieller_ratio(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> tuple:
    """The ratio of means mean(a) / mean(b) of paired samples (a_i, b_i) and its Fieller interval.

    The interval is every R for which Student's paired t-test does not reject mean(a - R b) = 0 at
    `level`: the R with (ā - R b̄)² <= t² var(a - R b) / n, var(a - R b) = s_aa - 2 R s_ab + R² s_bb
    (sample (co)variances, t = t_{n-1} quantile). Solving the quadratic gives (low, high) when b̄ is
    significantly away from 0; otherwise the set is unbounded and (low, high) = (-inf, inf) (a
    denominator whose interval spans 0 bounds no ratio). NaN where fewer than two pairs.
    Returns (ratio, low, high).
    """
    from scipy.stats import t as student_t

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = len(a)
    ma, mb = (a.mean(), b.mean()) if n else (np.nan, np.nan)
    ratio = float(ma / mb) if n and mb != 0 else float("nan")
    if n < 2:
        return ratio, float("nan"), float("nan")
    cov = np.cov(a, b, ddof=1)
    t2 = student_t.ppf(0.5 + level / 2, n - 1) ** 2 / n
    qa, qb, qc = mb ** 2 - t2 * cov[1, 1], -2 * (ma * mb - t2 * cov[0, 1]), ma ** 2 - t2 * cov[0, 0]
    disc = qb ** 2 - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return ratio, float("-inf"), float("inf")
    root = np.sqrt(disc)
    return ratio, float((-qb - root) / (2 * qa)), float((-qb + root) / (2 * qa))


def share_recovered(prior: xr.DataArray, spt: xr.DataArray, scratch: xr.DataArray,
                    dim: str = "seed", level: float = 0.95) -> xr.Dataset:
    """How much of SPT's gain over scratch a cheap prior recovers, paired along `dim`:
    share = mean(prior - scratch) / mean(spt - scratch) (1 = all of it, 0 = none, above 1 = more
    than SPT), with its Fieller interval (:func:`fieller_ratio`). Other dims are kept.

        s = share_recovered(acc.sel(init="alibi"), acc.sel(init="spt"), acc.sel(init="scratch"))
        format_share(s.sel(task="digits"))          # "62% [31%, 95%] of +14.0"
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"share_recovered: level must be in (0, 1), got {level!r}")
    num, den = prior - scratch, spt - scratch
    out = xr.apply_ufunc(lambda x, y: np.array(fieller_ratio(x, y, level)), num, den,
                         input_core_dims=[[dim], [dim]], output_core_dims=[["part"]],
                         vectorize=True)
    return xr.Dataset({"share": out.isel(part=0), "low": out.isel(part=1),
                       "high": out.isel(part=2), "spt_gain": den.mean(dim),
                       "prior_gain": num.mean(dim), "n": (num.notnull() & den.notnull()).sum(dim)},
                      attrs={"level": level})


def format_share(s: xr.Dataset) -> str:
    """One cell of :func:`share_recovered` as "62% [31%, 95%] of +14.0" (SPT's mean gain)."""
    share, low, high = (float(s[k]) for k in ("share", "low", "high"))
    if not np.isfinite(share):
        return "-"
    pct = lambda v: "-inf" if v == float("-inf") else "inf" if v == float("inf") else f"{100 * v:.0f}%"  # noqa: E731
    interval = f" [{pct(low)}, {pct(high)}]" if not np.isnan(low) else " [n < 2]"
    return f"{pct(share)}{interval} of {float(s['spt_gain']):+.1f}"


def format_gain(g: xr.Dataset, digits: int = 1) -> str:
    """One cell of :func:`paired_gain` as "+18.3 [+10.1, +26.5], 6/6 ahead"."""
    mean, low, high = (float(g[k]) for k in ("gain", "low", "high"))
    if not np.isfinite(mean):
        return "-"
    f = f"{{:+.{digits}f}}"
    interval = f" [{f.format(low)}, {f.format(high)}]" if np.isfinite(low) else " [n < 2]"
    return f"{f.format(mean)}{interval}, {int(g['ahead'])}/{int(g['n'])} ahead"


def gain(da: xr.DataArray, kind: str = "relative") -> xr.DataArray:
    """SPT minus scratch along dim init: "absolute" (same units) or "relative" (% of scratch)."""
    if kind not in ("relative", "absolute"):
        raise ValueError(f"gain kind must be 'relative' or 'absolute', got {kind!r}")
    d = da.sel(init="spt") - da.sel(init="scratch")
    return d if kind == "absolute" else 100 * d / da.sel(init="scratch")
