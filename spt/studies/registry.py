"""Every study by name: the :class:`~spt.studies.machinery.study.Study` of each notebook.

    STUDIES["02_transformers_vs_s4"].run("smoke", "results")
    study("00_quickstart")          # the quickstart too (it has no paper preset)

STUDIES holds the paper's studies (notebooks 01-09), study 13 (today's mixers under the paper's
protocol) and study 14 (cheap priors against SPT, and the range probe); :func:`study` also knows
the quickstart.
"""
from __future__ import annotations

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
from .machinery.study import KNOWN, Study, find_study, notebook_study  # noqa: F401

STUDIES: dict[str, Study] = {m.STUDY.name: m.STUDY for m in (
    lra_transformers, transformers_vs_s4, explicit_priors, data_scales, text_corpus, kernel_decay,
    modalities, compute_tied, model_scales, modern_architectures, priors_and_range)}
QUICKSTART: Study = quickstart.STUDY

KNOWN.update({QUICKSTART.name: QUICKSTART, **STUDIES})
study = find_study
