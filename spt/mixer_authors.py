"""What the mixers' authors' code says, as reference data: the values each config of
:mod:`spt.mixer_config` takes as its defaults (each config names its source, ``source``), the
LRU's per-task settings, and the sentences that say how spt departs from them
(:meth:`spt.mixer_config.MixerConfig.departures`, printed by ``Study.deviations``).

Every value below and every config default it names was read from the file named beside it:

    mamba-ssm (state-spaces/mamba)
      mamba_ssm/modules/mamba_simple.py     Mamba: d_state 16, d_conv 4, expand 2, dt_rank ceil(D/16)
      mamba_ssm/modules/mamba2.py           Mamba2: d_state 128, headdim 64, expand 2, d_conv 4
      mamba_ssm/models/config_mamba.py      rms_norm True: RMSNorm (eps 1e-5) before every mixer
                                            and after the last block; no MLP (mixer_seq_simple.py)
      mamba_ssm/models/mixer_seq_simple.py  _init_weights: Linear biases zeroed, out_proj
                                            re-drawn and divided by sqrt(n_layer)
    fla (fla-org/flash-linear-attention)
      fla/layers/gated_deltanet.py          head_dim 256, num_heads * head_dim = 0.75 hidden_size,
                                            expand_v 2, conv_size 4, conv_bias False
      fla/models/gated_deltanet/            RMSNorm (norm_eps 1e-6) before the layer and the MLP
        modeling_gated_deltanet.py          and after the last block; GatedMLP (hidden_ratio 4);
                                            _init_weights: Linear and Conv1d normal(0, 0.02)
      fla/models/gla/configuration_gla.py   num_heads 4, expand_k 0.5, expand_v 1, hidden_ratio 4
      fla/layers/gla.py                     gate_low_rank_dim 16, gate_logit_normalizer 16
      fla/modules/mlp.py                    GatedMLP width int(D * hidden_ratio * 2/3) rounded up
                                            to a multiple of 256
    LRU (Orvieto et al. 2023) and minimal-LRU (NicolasZucchet/minimal-LRU, its reference code)
      LRU_TASKS below                       ring, largest phase and state size per LRA task
      minimal-LRU lru/train_helpers.py,     nu_log, theta_log, gamma_log, B_re, B_im: Adam without
        run_train.py                        weight decay at lr_factor (0.5) times the lr
      minimal-LRU lru/model.py              BatchNorm by default; block norm -> LRU -> GELU ->
                                            dropout -> GLU -> dropout -> + x; no final norm
"""
from __future__ import annotations

import math
from typing import NamedTuple

# fla's rule for a GatedDeltaNet layer's key width: num_heads * head_dim = 0.75 * hidden_size
# (fla/layers/gated_deltanet.py, its class docstring)
GDN_KEY_RATIO = 0.75


class LRUTask(NamedTuple):
    """The LRU's settings of one LRA task (as its port sets them, LRU_TASKS): |lambda| uniform on
    [r_min, r_max], phase in [0, max_phase], d_state complex modes."""

    r_min: float
    r_max: float
    max_phase: float
    d_state: int


# The LRU's per-task settings of its LRA runs (sCIFAR is LRA Image), as a public port of the LRU to
# the state-spaces/s4 training code sets them: jhuang265/s4 configs/experiment/lra/lru-<task>.yaml
# at 71c4590 (rmin, rmax, max_phase_factor times pi, the layer's d_model = N); all 24 values below
# are that port's. The PathX ring and phase also stand in raresdolga/s5
# bin/run_experiments/run_lra_pathx.sh at bd1c25b (--r_min 0.999 --r_max 0.9999 --max_phase 0.31).
# Not checked against the LRU paper itself (Orvieto et al. 2023, its appendix's hyper-parameter
# table): its text could not be read here; check them there before a GPU run. The same port trains
# the recurrent parameters at lr_factor 0.5 (ListOps, Retrieval), 0.1 (Text) and 0.25 (Image,
# Pathfinder, PathX) times the lr; spt keeps minimal-LRU's 0.5 on every task (LRUConfig
# .recurrent_lr_scale), the reference code's one value, until the paper's are read.
LRU_TASKS = {
    "listops": LRUTask(0.0, 0.9, 2 * math.pi, 256),
    "text": LRUTask(0.5, 0.9, 2 * math.pi, 192),
    "retrieval": LRUTask(0.5, 0.9, 2 * math.pi, 256),
    "image": LRUTask(0.9, 0.999, 2 * math.pi, 384),
    "pathfinder": LRUTask(0.9, 0.999, 2 * math.pi, 256),
    "pathx": LRUTask(0.999, 0.9999, math.pi / 10, 256),
}
# the same port's lr_factor per task: the recurrent parameters' lr over the run's
LRU_PORT_LR_FACTOR = {"listops": 0.5, "text": 0.1, "retrieval": 0.5, "image": 0.25,
                      "pathfinder": 0.25, "pathx": 0.25}
LRU_LR_FACTOR = ("LRU: recurrent parameters (nu, theta, gamma, B) at {ours} the lr on {task}, where "
                 "the LRU's port (jhuang265/s4) uses {theirs}x; spt keeps minimal-LRU's one value, "
                 "0.5x on every task, until the LRU paper's own are read")

BIDIRECTIONAL = ("both ways (every arm but causal SPT's): every mixer runs its recurrence over the rows "
                 "and over the reversed rows, one set of direction parameters per way sharing the "
                 "input and output projections (as Caduceus' BiMamba ties them), the two summed; "
                 "the authors' layers run one direction")
GDN_KEY_WIDTH = ("Gated DeltaNet: key width the multiple of 256 nearest 0.75 D (at least one head), "
                 "not fla's 0.75 D itself: the parameter match sets D, and spt keeps fla's head "
                 "size (256) and lets the head count follow; at study 13's widths (D < 512) that "
                 "is one head, wider than 0.75 D")
LRU_BATCHNORM = ("LRU: LayerNorm where the LRU's LRA runs use BatchNorm (minimal-LRU's default "
                 "norm): batch statistics over all positions would let a causal model's "
                 "next-token pretraining see later positions and mix padding into the statistics; "
                 "spt keeps one per-position norm for every arm")
LRU_FINAL_NORM = ("LRU: spt's stack ends with a norm after the last block (as every spt backbone "
                  "does before its head); minimal-LRU's encoder has none")
LRU_DROPOUT = ("LRU: one dropout on the block's output; minimal-LRU drops out after the GELU and "
               "again after the GLU")
MAMBA_DT_BIAS = ("Mamba: dt_proj.bias is exempt from weight decay, as Mamba-2's dt_bias is in "
                 "mamba-ssm; mamba-ssm's mamba_simple.py exempts only A_log and D "
                 "(_no_weight_decay), so under the S4 protocol's decay of every parameter "
                 "(wd_groups all, the authors' train.py) theirs would decay it: one parameter group "
                 "of the inverse-softplus step sizes, kept undecayed in spt like Mamba-2's")
# how each authors' code initialises its linear maps, which spt does not copy ({name}: the
# mixer's title)
INIT = {
    "mamba-ssm": ("{name}: linear maps keep PyTorch's initialisation; mamba-ssm's language model "
                  "re-initialises them (Linear biases zeroed, out_proj divided by sqrt(n_layers)), "
                  "a model-level choice spt does not copy"),
    "fla": ("{name}: linear maps keep PyTorch's initialisation; fla's models re-draw every Linear "
            "and Conv1d from normal(0, 0.02), a model-level choice spt does not copy"),
    "minimal-LRU": ("LRU: the GLU's linear maps keep PyTorch's initialisation where minimal-LRU's "
                    "(flax) are LeCun-normal with zero biases"),
}


def gated_deltanet_heads(d_model: int, n_heads: int, head_dim: int) -> tuple[int, int]:
    """(heads, key width per head) of a Gated DeltaNet layer. head_dim 0: n_heads heads of
    D / n_heads; n_heads 0: heads of head_dim, as many as make the key width closest to
    GDN_KEY_RATIO * D, at least one (fla's default: D = 2048, 6 heads of 256)."""
    if not head_dim:
        return n_heads, d_model // n_heads
    if not n_heads:
        return max(1, round(GDN_KEY_RATIO * d_model / head_dim)), head_dim
    return n_heads, head_dim


def gated_deltanet_departures(d_model: int, n_heads: int, head_dim: int) -> list[str]:
    """How a Gated DeltaNet layer's heads depart from fla's rule (a key width of 0.75 D)."""
    heads, key = gated_deltanet_heads(d_model, n_heads, head_dim)
    fla_width = GDN_KEY_RATIO * d_model
    if heads * key == fla_width:
        return []
    if n_heads == 0 and head_dim == 256:
        return [GDN_KEY_WIDTH]
    return [f"Gated DeltaNet: {heads} heads of {key} key channels where fla's rule asks heads "
            f"of 256 and a key width 0.75 D = {fla_width:g}"]


def lru_departures(cfg, task: str) -> list[str]:
    """How an LRU config (its block_norm, dropout, ring, phase, state size and recurrent lr)
    departs from the LRU's runs on `task` (an LRA task: the port's settings, LRU_TASKS)."""
    out = [LRU_BATCHNORM if cfg.block_norm == "layer" else
           f"LRU: block_norm {cfg.block_norm!r} where the LRU's LRA runs use BatchNorm",
           LRU_FINAL_NORM]
    if cfg.dropout:
        out.append(LRU_DROPOUT)
    paper = LRU_TASKS.get(task)
    if paper is not None:
        ours = LRUTask(cfg.r_min, cfg.r_max, cfg.max_phase, cfg.d_state or cfg.d_model)
        out += [f"LRU: {field} {getattr(ours, field):g} where the LRU's {task} runs use "
                f"{value:g} (its port, LRU_TASKS)" for field, value in paper._asdict().items()
                if not math.isclose(getattr(ours, field), value, rel_tol=1e-9)]
    theirs, scale = LRU_PORT_LR_FACTOR.get(task), cfg.recurrent_lr_scale
    if theirs is not None and scale != theirs:
        ours = "1x (the run's lr, B decayed)" if scale is None else f"{scale:g}x"
        out.append(LRU_LR_FACTOR.format(ours=ours, task=task, theirs=f"{theirs:g}"))
    return out
