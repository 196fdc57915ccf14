"""Small result files shipped with the package: the laptop runs of studies 04 and 06
(``tools/make_sample_results.py``; see PROVENANCE.md here). The explorers open on them when
called with no arguments.

    spt.samples.names()               # ["data_scales", "kernels"]
    spt.samples.path("kernels")       # Path of kernels.nc inside the installed package
    ds = spt.samples.load("data_scales")
"""
from __future__ import annotations

from pathlib import Path

import xarray as xr

HERE = Path(__file__).resolve().parent


def names() -> list[str]:
    """The shipped sample names (file stems of the .nc files here)."""
    return sorted(p.stem for p in HERE.glob("*.nc"))


def path(name: str) -> Path:
    """The file of sample `name` ("data_scales" or "kernels"; ".nc" optional)."""
    stem = name[:-3] if name.endswith(".nc") else name
    p = HERE / f"{stem}.nc"
    if not p.exists():
        raise FileNotFoundError(f"no sample {name!r} in {HERE}; shipped samples: {names()} "
                                f"(regenerate with `python tools/make_sample_results.py`; if "
                                f"none is listed, the package was installed without its data)")
    return p


def load(name: str) -> xr.Dataset:
    """Sample `name` as an in-memory xarray Dataset (attrs["config"] is a JSON string)."""
    from ..results import read_result
    return read_result(path(name))
