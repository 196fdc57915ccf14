"""Every study by name: the :class:`~spt.studies.machinery.study.Study` of each notebook.

    STUDIES["02_transformers_vs_s4"].run("smoke", "results")
    study("00_quickstart")          # the quickstart too (it has no paper preset)

STUDIES holds the paper's studies (notebooks 01-09), study 13 (today's mixers under the paper's
protocol) and study 14 (cheap priors against SPT, and the range probe); :func:`study` also knows
the quickstart.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from . import (
    compute_tied,
    data_scales,
    explicit_priors,
    kernel_decay,
    lra_transformers,
    modalities,
    model_scales,
    modern_architectures,
    priors_and_range,
    quickstart,
    text_corpus,
    transformers_vs_s4,
)
from .machinery.study import Study

STUDIES: dict[str, Study] = {m.STUDY.name: m.STUDY for m in (
    lra_transformers, transformers_vs_s4, explicit_priors, data_scales, text_corpus, kernel_decay,
    modalities, compute_tied, model_scales, modern_architectures, priors_and_range)}
QUICKSTART: Study = quickstart.STUDY
# every study a name finds: the quickstart and STUDIES
_BY_NAME: dict[str, Study] = {QUICKSTART.name: QUICKSTART, **STUDIES}


def study(name) -> Study:
    """The Study named `name` (the quickstart's or one of STUDIES; a Study is returned as it is),
    or an error listing them."""
    if isinstance(name, Study):
        return name
    if name not in _BY_NAME:
        raise ValueError(f"no study {name!r}; studies: {', '.join(_BY_NAME)}")
    return _BY_NAME[name]


def notebook_study(nb) -> Optional[Study]:
    """The Study whose notebook is `nb` (a path; its stem is the study's name), or None (the
    walkthrough, the explorers and other notebooks that are no study)."""
    return _BY_NAME.get(Path(nb).stem)
