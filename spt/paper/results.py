"""The paper's reported numbers, so every study notebook can print its table beside them.

Source: Amos, Berant & Gupta, "Never Train from Scratch: Fair Comparison of Long-Sequence Models
Requires Data-Driven Priors", ICLR 2024 (arXiv:2310.02980). Accuracies in percent; BIDMC in R².
``None`` = not reported / computationally infeasible in the paper (printed there as x or a box).

    paper_table("table2")        # pandas DataFrame, rows = approaches, columns = tasks

The settings behind them are the rest of :mod:`spt.paper` (table4, table5, table6, appendix).
"""
from __future__ import annotations

LRA = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")

# Table 1: Tay et al. (2020) sizes. Top row from Tay et al.; bottom rows SPT (this paper).
TABLE1 = {
    "Transformer (Tay et al.)": dict(listops=36.37, text=64.27, retrieval=57.46, image=42.44,
                                     pathfinder=71.40, pathx=None),
    "Transformers + Masked SPT": dict(listops=59.75, text=89.27, retrieval=88.64, image=74.22,
                                      pathfinder=88.45, pathx=87.73),
    "Transformers + Causal SPT": dict(listops=59.15, text=88.81, retrieval=90.38, image=76.00,
                                      pathfinder=88.49, pathx=88.05),
}

# Table 2 (and Fig. 1): rotary Transformers and S4, scratch vs masked SPT.
TABLE2 = {
    "Transformers + Rotary": dict(listops=47.90, text=79.08, retrieval=82.31, image=75.04,
                                  pathfinder=76.64, pathx=84.72, pathx256=None),
    "Transformers + Rotary + Masked SPT": dict(listops=61.49, text=91.02, retrieval=91.57,
                                               image=86.04, pathfinder=94.16, pathx=92.98,
                                               pathx256=None),
    "S4": dict(listops=59.60, text=86.82, retrieval=90.90, image=88.65, pathfinder=94.20,
               pathx=96.35, pathx256=67.82),
    "S4 + Masked SPT": dict(listops=61.25, text=90.34, retrieval=88.74, image=89.36,
                            pathfinder=94.92, pathx=96.94, pathx256=87.11),
    "Pythia 70M (Rand Init)": dict(listops=41.20, text=69.29, retrieval=76.45, image=52.55,
                                   pathfinder=74.31, pathx=None, pathx256=None),
    "Pythia 70M": dict(listops=43.05, text=83.41, retrieval=84.29, image=67.41, pathfinder=80.05,
                       pathx=None, pathx256=None),
}

# Table 3: Speech Commands (causal / bidirectional), sCIFAR (accuracy), BIDMC (R²).
TABLE3 = {
    "S4": dict(speech_causal=93.60, speech_bi=96.08, scifar=91.13, bidmc_hr=0.999,
               bidmc_rr=0.994, bidmc_spo2=0.999),
    "Transformers": dict(speech_causal=84.55, speech_bi=86.93, scifar=79.41, bidmc_hr=0.998,
                         bidmc_rr=0.981, bidmc_spo2=0.998),
    "S4 + SPT": dict(speech_causal=95.09, speech_bi=96.52, scifar=91.67, bidmc_hr=0.999,
                     bidmc_rr=0.990, bidmc_spo2=0.997),
    "Transformers + SPT": dict(speech_causal=86.13, speech_bi=91.49, scifar=90.29, bidmc_hr=0.992,
                               bidmc_rr=0.956, bidmc_spo2=0.993),
}

# Table 7 (and Fig. 2): S4 / DLR x structured / random init x scratch / SPT.
TABLE7 = {
    "S4 + Rand Init + SPT": dict(listops=61.5, text=90.5, image=87.25, pathx=91.05),
    "S4 + Rand Init": dict(listops=59.85, text=88.34, image=75.56, pathx=73.57),
    "S4 + SPT": dict(listops=61.25, text=90.34, image=89.36, pathx=96.94),
    "S4": dict(listops=59.60, text=86.82, image=88.65, pathx=96.35),
    "DLR + Rand Init + SPT": dict(listops=56.75, text=89.13, image=81.83, pathx=94.59),
    "DLR + Rand Init": dict(listops=39.55, text=73.72, image=56.70, pathx=50.04),
    "DLR + SPT": dict(listops=60.45, text=89.94, image=87.12, pathx=96.38),
    "DLR": dict(listops=57.50, text=79.65, image=79.83, pathx=92.33),
}

# Table 8: compute-tied; share of a fixed epoch budget (Image 150, Text 30 epochs) spent on SPT.
TABLE8 = {
    0.0: dict(image_transformer=75.04, image_s4=87.83, text_transformer=79.08, text_s4=87.51),
    0.2: dict(image_transformer=84.45, image_s4=87.15, text_transformer=90.20, text_s4=89.50),
    0.4: dict(image_transformer=84.95, image_s4=87.72, text_transformer=90.56, text_s4=89.10),
    0.6: dict(image_transformer=84.32, image_s4=87.63, text_transformer=90.65, text_s4=88.87),
}

# Table 9: LRA Image across model sizes (parameters).
TABLE9 = {
    "Transformer+Rotary": {100e3: 68.51, 300e3: 68.51, 1e6: 71.50, 3e6: 75.04, 10e6: 77.88},
    "Transformer+Rotary + Masked SPT": {100e3: 74.43, 300e3: 76.36, 1e6: 84.83, 3e6: 86.04,
                                        10e6: 86.54},
    "S4": {100e3: 81.36, 300e3: 83.63, 1e6: 84.81, 3e6: 88.65, 10e6: 85.73},
    "S4 + Masked SPT": {100e3: 83.45, 300e3: 86.39, 1e6: 88.67, 3e6: 89.36, 10e6: 88.72},
}


TABLES = {"table1": TABLE1, "table2": TABLE2, "table3": TABLE3, "table7": TABLE7,
          "table8": TABLE8, "table9": TABLE9}


def paper_table(name: str):
    """One of the paper's tables as a pandas DataFrame (rows: approaches or SPT shares)."""
    import pandas as pd

    if name not in TABLES:
        raise KeyError(f"no paper table {name!r}; tables: {', '.join(TABLES)}")
    return pd.DataFrame.from_dict(TABLES[name], orient="index")
