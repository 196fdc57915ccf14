"""Where the study notebooks live and which of them are the paper's studies."""
from __future__ import annotations

import os
import re
from pathlib import Path

STUDY_PATTERN = re.compile(r"^(0[1-9]|[1-9][0-9])_[a-z0-9_]+$")


def notebooks_dir(path=None) -> Path:
    """The folder of the study notebooks: `path`, $SPT_NOTEBOOKS, ./notebooks, or the checkout's."""
    candidates = [path, os.environ.get("SPT_NOTEBOOKS"), Path.cwd() / "notebooks",
                  Path(__file__).resolve().parents[2] / "notebooks"]
    for c in candidates:
        if c and Path(c).is_dir() and any(Path(c).glob("*.ipynb")):
            return Path(c)
    raise FileNotFoundError("no study notebooks found: run from a checkout of spt (its notebooks/ "
                            "folder), or pass --notebooks DIR / set SPT_NOTEBOOKS")


def list_studies(nb_dir=None) -> dict[str, str]:
    """{study name: its title (Study.title)} for every study notebook (the paper's studies of
    :data:`spt.studies.STUDIES`; the quickstart, walkthrough, explorers and your-architecture
    notebooks are not studies of the paper)."""
    from .registry import STUDIES

    out = {}
    for nb in sorted(notebooks_dir(nb_dir).glob("*.ipynb")):
        if not STUDY_PATTERN.match(nb.stem) or nb.stem not in STUDIES:
            continue
        out[nb.stem] = STUDIES[nb.stem].title
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
