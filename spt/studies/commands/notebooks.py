"""Where the study notebooks live and which of them are the paper's studies.

A checkout keeps them in ``notebooks/``; an installed wheel carries the same files as package data
in ``spt/notebooks/`` (pyproject.toml maps the one folder onto the other), so ``spt study`` finds
them without a checkout, and :func:`copy_notebooks` (``spt notebooks copy DIR``) gives editable
copies to open in JupyterLab.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ..registry import notebook_study

STUDY_PATTERN = re.compile(r"^(0[1-9]|[1-9][0-9])_[a-z0-9_]+$")

_PACKAGE = Path(__file__).resolve().parents[2]  # spt/


def _has_notebooks(folder) -> bool:
    return bool(folder) and Path(folder).is_dir() and any(Path(folder).glob("*.ipynb"))


def packaged_notebooks() -> Path:
    """spt's own notebooks: the checkout's notebooks/ when spt runs from a checkout (development),
    else the copies installed with the package (spt/notebooks)."""
    checkout = _PACKAGE.parent
    if (checkout / "pyproject.toml").is_file() and _has_notebooks(checkout / "notebooks"):
        return checkout / "notebooks"
    if _has_notebooks(_PACKAGE / "notebooks"):
        return _PACKAGE / "notebooks"
    raise FileNotFoundError(f"spt's notebooks are missing from this installation (no notebooks "
                            f"in {_PACKAGE / 'notebooks'}, nor in a checkout above it): reinstall "
                            f"spt from its wheel or checkout, or pass --notebooks DIR / set "
                            f"SPT_NOTEBOOKS")


def notebooks_dir(path=None) -> Path:
    """The folder of the study notebooks: `path`, $SPT_NOTEBOOKS, ./notebooks, or spt's own
    (:func:`packaged_notebooks`: the checkout's, else the installed package's)."""
    for c in (path, os.environ.get("SPT_NOTEBOOKS")):
        if c and not _has_notebooks(c):
            raise FileNotFoundError(f"no notebooks (*.ipynb) in {c} (given by "
                                    f"{'--notebooks' if c == path else 'SPT_NOTEBOOKS'})")
        if c:
            return Path(c)
    if _has_notebooks(Path.cwd() / "notebooks"):
        return Path.cwd() / "notebooks"
    return packaged_notebooks()


def copy_notebooks(dest, *, overwrite: bool = False) -> list[Path]:
    """Copy spt's notebooks (:func:`packaged_notebooks`) into `dest` (created), to edit and run
    there; returns the copies. Refuses to replace a file unless `overwrite`."""
    src = packaged_notebooks()
    dest = Path(dest)
    files = sorted(src.glob("*.ipynb"))
    if dest.resolve() == src.resolve():
        raise ValueError(f"{dest} is where spt's notebooks are; copy them to another folder")
    there = [dest / f.name for f in files if (dest / f.name).exists()]
    if there and not overwrite:
        raise FileExistsError(f"{dest} already has {', '.join(p.name for p in there[:3])}"
                              + (f" and {len(there) - 3} more" if len(there) > 3 else "")
                              + ": pass --force to replace them, or copy into another folder")
    dest.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(f, dest / f.name)) for f in files]


def list_studies(nb_dir=None) -> dict[str, str]:
    """{study name: its title (Study.title)} for every study notebook (the paper's studies of
    :data:`spt.studies.STUDIES`; the quickstart, walkthrough, explorers and your-architecture
    notebooks are not studies of the paper)."""
    out = {}
    for nb in sorted(notebooks_dir(nb_dir).glob("*.ipynb")):
        study = notebook_study(nb)
        if STUDY_PATTERN.match(nb.stem) and study is not None:
            out[nb.stem] = study.title
    return out


def study_notebook(name: str, nb_dir=None) -> Path:
    """The notebook of study `name` (or a path to any notebook with a parameters cell)."""
    p = Path(name)
    if p.suffix == ".ipynb" and p.is_file():
        return p
    nb = notebooks_dir(nb_dir) / f"{name}.ipynb"
    if not nb.is_file():
        names = ", ".join(list_studies(nb_dir))
        raise FileNotFoundError(f"no study {name!r}; studies: {names} (`spt study list`)")
    return nb
