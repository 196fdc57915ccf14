"""The paper's settings and printed results (Amos, Berant & Gupta, "Never Train from Scratch",
ICLR 2024), one module per table, so a number is checked against the paper in one hop.

    from spt.paper import ssm_row, transformer_row
    row = ssm_row("text", "s4")          # PaperRow: model, objective, pretrain, finetune, scratch

* :mod:`~spt.paper.rows`     - :class:`PaperRow` (one row of the paper) and what every row shares
  (App. C.1: AdamW betas, no clipping, the 24 h budget, the pretraining checkpoint rule).
* :mod:`~spt.paper.table4`   - Table 4: the Transformers.
* :mod:`~spt.paper.table5`   - Tables 5 and 7: S4 (the final S4 paper's, its Table 11) and DLR on LRA.
* :mod:`~spt.paper.table6`   - Table 6: S4 and Transformers on Speech Commands, sCIFAR and BIDMC.
* :mod:`~spt.paper.appendix` - C.1.2 PathX-256, C.1.4 data scales, C.1.5 Pythia, Table 8 budgets.
* :mod:`~spt.paper.results`  - the printed results (Tables 1-3, 7-9), shown beside ours.
* ``settings.tsv``           - the reference every study's paper preset is checked against, field
  by field, with a source for each value (:mod:`spt.studies.machinery.fidelity`).

"Row" means one of these; "preset" means a study's scale (smoke, laptop, paper).
"""
from .rows import PaperRow
from .table4 import TRANSFORMER_ROWS, transformer_row
from .table5 import SSM_ROWS, ssm_row

__all__ = ["PaperRow", "SSM_ROWS", "TRANSFORMER_ROWS", "ssm_row", "transformer_row"]
