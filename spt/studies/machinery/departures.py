"""Where spt's paper presets depart from the paper on purpose, and why.

Each :class:`Departure` names a field of :data:`spt.studies.machinery.fidelity.FIELDS`, the rows it covers
(study, model, task, stage; "*" = any, or a comma-separated list), OUR value, and the reason. A
preset value that differs from spt/paper/settings.tsv is stated only when a departure here
covers it with exactly that value: change the preset and the departure no longer applies, so the
fidelity test fails until the change is either undone or stated.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...paper.rows import PAPER_PATIENCE as PATIENCE
from .stages import stage_values
from .values import ANY, same


@dataclass(frozen=True)
class Departure:
    field: str
    ours: object
    reason: str
    study: str = "*"
    model: str = "*"
    task: str = "*"
    stage: str = "*"

    def covers(self, study: str, model: str, task: str, stage: str, field: str, ours) -> bool:
        keys = ((self.study, study), (self.model, model), (self.task, task), (self.stage, stage))
        return (field == self.field and all(k == "*" or v in k.split(",") for k, v in keys)
                and same(ours, self.ours))


GPU_SAVER = ("a GPU saver: a supervised run stops after 10 epochs without a better validation "
             "score, counted only once its warmup has ended; the paper trains 200 epochs or 24 h "
             "and the authors' code has no early stopping, keeping the best validation checkpoint "
             "as spt does")

TEXT_VALIDATION = ("IMDb has no validation split: the authors (and Gu et al.) validate on the "
                   "test set, so the checkpoint reported on test is chosen on test; spt holds out "
                   "a fixed 10% of the training reviews and keeps the test set for the test")
BIDMC_VALIDATION = ("spt keeps the official BIDMC32 TEST file as the test set and validates on "
                    "1/7 of TRAIN (S4's 'original' split); the authors pool TRAIN and TEST and "
                    "reshuffle them 70/15/15, so R2 values are not comparable example for example")
FRACTIONS = ("C.1.4 finetunes and trains from scratch 'until convergence': the authors' cosine "
             "(50K steps on Text, 200K on Image) and its warmup at every fraction, so the run is "
             "bounded by those steps, not 200 epochs (200 epochs of the 112 Text examples of "
             "fraction 0.005 are 1,400 steps, ending before the 5,000-step warmup)")

FRACTION_VALIDATION = ("a GPU saver at small fractions: a run on a fraction f of the data "
                       "validates every 1/f epochs (once per full-data epoch of steps) and its "
                       "patience is 10/f epochs, so every fraction validates as often as the full "
                       "data; validating each epoch, Text pretraining at fraction 0.005 would run "
                       "2,857 validations over 2,500 reviews, 22x the examples it trains on")

MIXER_LRS = ("study 13: S4's learning rates are tuned for S4, whose state-space parameters train at "
             "their own rate; a mixer's supervised runs try a small grid instead "
             "(spt.studies.modern_architectures.LR_GRID, each a full run, the best on validation "
             "kept, as C.1.4 does for Text), at the S4 row's batch, schedule and budget")

ALIBI = ("study 14: the cheap prior replaces the row's rotary positions by ALiBi's fixed "
         "distance bias (Press et al. 2022), the locality Coser et al. 2026 find SPT teaches")
PROBE = ("study 14: the range probe is the S4 row's scratch run at one causal layer, its kernel "
         "cut past the span: its knee is exact where a deeper or bidirectional probe's is not "
         "(spt.analysis.range_probe)")

DEPARTURES: tuple = (
    Departure("patience", PATIENCE, GPU_SAVER, stage="finetune,scratch"),
    Departure("validation", "train10%", TEXT_VALIDATION, task="text"),
    Departure("validation", "train1/7", BIDMC_VALIDATION, task="bidmc_hr,bidmc_rr,bidmc_spo2"),
    Departure("epochs", None, FRACTIONS, study="04", stage="finetune,scratch"),
    Departure("patience", ANY, FRACTION_VALIDATION, study="04", stage="finetune,scratch"),
    Departure("lr", ANY, MIXER_LRS, study="13", model="mixer,mixer_causal", stage="finetune,scratch"),
    Departure("positions", "alibi", ALIBI, study="14", model="transformer_rotary"),
    Departure("layers", 1, PROBE, study="14", model="s4", stage="scratch"),
    Departure("causal", True, PROBE, study="14", model="s4", stage="scratch"),
)


def reason_for(study: str, model: str, task: str, stage: str, field: str, ours) -> str:
    """The reason of the first departure that covers this difference ("" when none does)."""
    for d in DEPARTURES:
        if d.covers(study, model, task, stage, field, ours):
            return d.reason
    return ""


# Readings: how spt reads what the paper and the authors' configs leave open or say two ways. Each
# applies to the stages its test picks out and is printed by Study.deviations beside the departures.
COSINE = ("cosines follow the authors' scheduler literally: a cosine spans schedule_steps, their "
          "num_training_steps, whatever the batch size or epochs (so a run whose epochs end first "
          "stops above 0: S4 Image finetuning at batch 512 ends its 200 epochs at about 17.6K of "
          "200K steps, lr still 98% of peak), and the run stops at that step (max_steps), where "
          "the cosine reaches 0")
MAX_EPOCHS = ("epochs: SPT stages take the paper's 'maximum of 200 epochs' (C.1); the authors' "
              "configs set their own trainer.max_epochs per task (s4-lra-listops 40, -imdb 32, "
              "-aan 20, -pathx 50; -listops-mlm 100; transformer-lra-imdb 65, -aan 32, "
              "-cifar-mlm 50, ...). S4 from scratch keeps its config's epochs: those are the runs "
              "the paper cites")
FOUR_GPUS = ("budget: C.1's 5-day (Transformers on PathX and Speech Commands) and 2-day (Pythia) "
             "budgets were on 4 GPUs; max_time is wall clock, so one GPU gets a quarter of that "
             "compute: run on 4 (torchrun --nproc_per_node 4) to match it")
TEXT_LENGTH = ("Text length: Sec. 3 says IMDb reviews of 'up to 2048' characters; the authors' "
               "configs (configs/dataset/imdb.yaml, s4-lra-imdb.yaml, transformer-lra-imdb.yaml: "
               "l_max 4096) read 4,096 bytes, as spt does")
MLP_HEAD = ("head: spt's MLP head is Linear -> GELU -> Linear. On Retrieval that is the authors' "
            "decoder (pipeline aan: the retrieval decoder with activation gelu, nli: Linear(4d, d) "
            "-> GELU -> Linear on [u, v, u*v, u-v]); the Text and Image Transformers' decoder "
            "(sequence_nonelinear, src/tasks/decoders.py) uses ReLU where spt uses GELU")
EOS = ("<eos>: the authors append an end-of-sequence token to every ListOps, Text and Retrieval "
       "row (append_eos: True in configs/dataset/listops.yaml, imdb.yaml, aan.yaml and their LM "
       "copies; src/dataloaders/lra.py): it can be masked, and causal SPT predicts it; spt "
       "appends none (0.03-0.2% of positions; the paper does not mention it)")
VOCAB = ("vocabulary: the authors build a character vocabulary on the training split "
         "(src/dataloaders/lra.py: IMDb min_freq 15, about 135 ids; AAN about 100), rarer "
         "characters read as <unk>; spt reads UTF-8 bytes (260 ids), so SPT's cross-entropy runs "
         "over more classes and a rare character keeps its identity")
CAUSAL_FINETUNE = ("causal finetuning: a causally pretrained model is finetuned causal in spt (the "
                   "backbone it pretrained, pooled as Table 4 says: Last on ListOps); the "
                   "authors' finetuning configs all set causal: false (configs/experiment/"
                   "transformer-lra-*.yaml), which would run the causally trained weights both "
                   "ways; Table 4's Last pooling for the causal ListOps row supports spt's "
                   "reading")
PIXEL_SELECTION = ("pretraining selection on R2 (paper C.1: 'highest R2 for L1'); the authors' "
                   "code monitors the lowest masked MAE (val/masked_mae, mode: min, "
                   "configs/experiment/*-cifar-mlm.yaml), and on Speech Commands mode: max "
                   "(sc/*-mlm.yaml), which read literally keeps the worst checkpoint; on one "
                   "validation set the highest R2 is the lowest squared error, near the lowest MAE")
MASKS = ("masking and its validation: spt masks exactly round(p n) positions of each sequence "
         "(p the mask ratio) where the authors draw each position with probability p "
         "(src/tasks/mlm.py: the same p on average, a count that varies by about sqrt(p n)); "
         "spt validates pretraining on one fixed mask per example, pooled over the split, once an "
         "epoch, where the authors redraw masks at every validation, average per batch and check "
         "CIFAR and Pathfinder twice an epoch (val_check_interval 0.5): differences at the noise "
         "level of the selection")


# Each reading's test, on a stage's (StageView, its stage_values): the values the fidelity check
# compares, so "budget" and "head" mean here what they mean there.
_READINGS = (
    (COSINE, lambda v, f: f["schedule"] == "cosine" and f["schedule_steps"] is not None),
    (MAX_EPOCHS, lambda v, f: v.stage != "scratch" and f["epochs"] == 200),
    (FOUR_GPUS, lambda v, f: f["budget_h"] in (5 * 24, 2 * 24)),
    (TEXT_LENGTH, lambda v, f: getattr(v.task, "name", "") == "text"),
    (MLP_HEAD, lambda v, f: v.stage != "pretrain" and f["head"] == "mlp"),
    (EOS, lambda v, f: getattr(v.task, "name", "") in ("listops", "text", "retrieval")),
    (VOCAB, lambda v, f: getattr(v.task, "name", "") in ("text", "retrieval")),
    (CAUSAL_FINETUNE, lambda v, f: v.stage == "finetune" and bool(f["causal"])),
    (PIXEL_SELECTION, lambda v, f: v.stage == "pretrain" and f["selection"] == "r2"),
    (MASKS, lambda v, f: v.stage == "pretrain" and f.get("objective") == "masked"),
)


def readings(cells) -> list:
    """[(coords, text)] of every reading that applies to a stage of the (coords, [StageView])
    cells: the rule spt chose where the paper and the authors' configs disagree or are silent,
    and every way a model departs from its authors' layer and block
    (:meth:`spt.mixer_config.MixerConfig.departures`)."""
    out = []
    for coords, views in cells:
        stages = [(v, stage_values(v)) for v in views]
        out += [(coords, text) for text, applies in _READINGS
                if any(applies(v, f) for v, f in stages)]
        mixer = dict.fromkeys(t for v in views
                              for t in v.model.departures(getattr(v.task, "name", "")))
        out += [(coords, text) for text in mixer]
    return out
