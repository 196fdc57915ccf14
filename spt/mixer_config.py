"""Configs of today's sequence mixers: Mamba, Mamba-2, Gated DeltaNet, GLA and LRU.

Each config is a stack of ``n_layers`` pre-norm residual blocks around one mixer
(:class:`spt.models.mixers.stack.MixerStack`), with an optional SwiGLU MLP block after each mixer
(``mlp_expand``, ``mlp_multiple``), sized by named fields. A config is its mixer's one record: its
defaults are its authors' layer and block, stated here only (the mixer's layer takes every value
from the config and has no defaults of its own); its class attributes name the mixer (``title``),
the code those defaults were read from (``source``; :mod:`spt.mixer_authors` names each file) and
spt's shape at small widths; :meth:`MixerConfig.departures` says where a config departs from its
authors'. The shared fields are :class:`MixerConfig`'s; each subclass adds its mixer's own and
names the class that builds it (``mixer``, an import path, so this module needs no torch and a
checkpoint's ``{"type": "MambaConfig", ...}`` rebuilds it). :data:`MIXER_CONFIGS` lists them: the
model configs' reader and study 13 take their mixers from it.

causal=True : every mixer runs its recurrence left to right (next-token self-pretraining);
causal=False: each mixer runs it both ways, one set of direction parameters per way sharing the
              input and output projections (as Caduceus' BiMamba ties them), and sums the two.

==================  ======================================  =====================================
config              mixer (paper)                           GPU kernel when installed on CUDA
==================  ======================================  =====================================
MambaConfig         selective SSM (Gu & Dao 2023)           mamba-ssm ``selective_scan_fn``
Mamba2Config        SSD (Dao & Gu 2024)                     mamba-ssm ``mamba_chunk_scan_combined``
GatedDeltaNetConfig gated delta rule (Yang, Kautz &         fla ``chunk_gated_delta_rule``
                    Hatamizadeh, ICLR 2025)
GLAConfig           gated linear attention (Yang et al.     fla ``chunk_gla``
                    ICML 2024)
LRUConfig           linear recurrent unit (Orvieto et al.   none needed (a diagonal complex scan)
                    ICML 2023)
==================  ======================================  =====================================
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Optional

from .config_base import ModelConfigBase, TablePositions, _check_bool, _check_choice, _check_positive
from .mixer_authors import (
    BIDIRECTIONAL,
    INIT,
    LRU_TASKS,
    MAMBA_DT_BIAS,
    gated_deltanet_departures,
    lru_departures,
)

_NORMS = ("layer", "rms")


def mlp_width(cfg) -> int:
    """The hidden width of a mixer config's SwiGLU MLP (0: no MLP). mlp_multiple 0: mlp_expand * D;
    m > 0: fla's GatedMLP rule, int(D * mlp_expand * 2 / 3) rounded up to a multiple of m
    (fla/modules/mlp.py, hidden_ratio = mlp_expand)."""
    if not cfg.mlp_expand:
        return 0
    if not cfg.mlp_multiple:
        return cfg.mlp_expand * cfg.d_model
    width = (cfg.d_model * cfg.mlp_expand * 2) // 3
    return cfg.mlp_multiple * -(-width // cfg.mlp_multiple)


@dataclass(frozen=True, kw_only=True)
class MixerConfig(ModelConfigBase):
    """The fields every mixer stack shares (with every model config's: d_model, n_layers, causal,
    dropout, pooling, head, max_len; :class:`~spt.config_base.ModelConfigBase`).

    causal     : True: position t sees inputs <= t; False: each mixer runs both ways.
    mlp_expand : 0 for mixer-only blocks (Mamba's and the LRU's design); k > 0 adds a pre-norm
                 SwiGLU MLP after every mixer (GLA's and Gated DeltaNet's blocks), of hidden width
                 k * D, or by fla's rule with mlp_multiple (:func:`mlp_width`).
    mlp_multiple : 0: the MLP's hidden width is mlp_expand * D; m > 0: int(2/3 * mlp_expand * D)
                 rounded up to a multiple of m (fla's GatedMLP with hidden_ratio mlp_expand: 4, 256).
    block_norm : "rms" | "layer": the norm before every mixer and MLP and after the last block
                 (RMSNorm: mamba-ssm's and fla's blocks; LayerNorm).
    positions  : "none" | "sinusoidal" | "learned" (a table added to the stack's input; the
                 recurrences know order without one).
    max_len    : the longest sequence (the position table's length, the study's task length).
    dropout    : on the stack's input and every block's output, before the residual sum.

    A mixer's config adds its own fields and checks them in :meth:`check_mixer`, and states its
    record in class attributes:

    title      : the mixer's name in tables and sentences ("Mamba-2").
    source     : the authors' code its defaults were read from (:mod:`spt.mixer_authors`).
    authors    : whose model-level initialisation that code uses (a key of
                 :data:`spt.mixer_authors.INIT`).
    authors_fields : the fields whose defaults are that code's values: what :meth:`departures`
                 compares.
    notes      : what the mixer's own layer does otherwise than its authors', always said.
    small_shape : spt's shape at small widths (d = 16 to 32, where the authors' heads do not fit:
                 the smoke and laptop presets of study 13).
    task_settings : {task: its fields there} where the authors set them per task.
    """

    mixer: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    family: ClassVar[str] = "mixer"
    # the epsilon of block_norm="rms" (mamba-ssm's blocks 1e-5, fla's models 1e-6)
    rms_eps: ClassVar[float] = 1e-5
    title: ClassVar[str] = ""
    source: ClassVar[str] = ""
    authors: ClassVar[str] = ""
    authors_fields: ClassVar[tuple] = ()
    notes: ClassVar[tuple] = ()
    small_shape: ClassVar[dict] = {}
    task_settings: ClassVar[dict] = {}

    mlp_expand: int = 0
    mlp_multiple: int = 0
    block_norm: str = "rms"
    positions: TablePositions = "none"

    def check(self):
        c = type(self).__name__
        for f in dataclasses.fields(self):  # ints: check_finite, before this
            v = getattr(self, f.name)
            if f.type in ("float", float) and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise TypeError(f"{c}.{f.name} must be a number, got {v!r}")
        if self.mlp_expand < 0:
            raise ValueError(f"{c}.mlp_expand must be >= 0 (0: no MLP), got {self.mlp_expand!r}")
        if self.mlp_multiple < 0:
            raise ValueError(f"{c}.mlp_multiple must be >= 0 (0: width mlp_expand * D), got "
                             f"{self.mlp_multiple!r}")
        _check_choice(c, "block_norm", self.block_norm, _NORMS)
        _check_choice(c, "positions", self.positions, TablePositions.__args__)
        self.check_mixer()

    def check_mixer(self) -> None:
        """A mixer's own checks of its fields (raise ValueError naming the field)."""

    # the stack runs each mixer as built: causal=False mixers see both ways themselves
    bidirectional: ClassVar[bool] = False

    def departures(self, task: str = "") -> list[str]:
        """One sentence per way this config departs from its authors' layer and block on `task`
        (an LRA task name; others skip the per-task comparisons): every field of
        ``authors_fields`` not at its default (the authors' value), the mixer's own, its notes, a
        bidirectional stack, the initialisation."""
        if not (self.title and self.source and self.authors in INIT):
            raise NotImplementedError(
                f"{type(self).__name__} states no authors' record (title, source, authors, "
                f"authors_fields): a mixer config says whose code its defaults are")
        default = {f.name: f.default for f in dataclasses.fields(self)}
        out = [f"{self.title}: {name} {getattr(self, name)!r} where {self.source} has "
               f"{default[name]!r}" + self._mlp_says(name)
               for name in self.authors_fields if getattr(self, name) != default[name]]
        out += self.own_departures(task) + list(self.notes)
        if not self.causal:
            out.append(BIDIRECTIONAL)
        return out + [INIT[self.authors].format(name=self.title)]

    def own_departures(self, task: str) -> list[str]:
        """The departures a mixer's own rules show beyond its fields (none by default)."""
        return []

    def _mlp_says(self, field: str) -> str:
        if field not in ("mlp_expand", "mlp_multiple"):
            return ""
        return f" (an MLP of width {mlp_width(self)} at D = {self.d_model})"

    @property
    def layer(self) -> str:
        """The mixer class's import path (what :class:`~spt.models.mixers.stack.MixerStack` builds)."""
        return self.mixer

    @property
    def layer_kwargs(self) -> dict:
        """The mixer's own fields: what its constructor takes besides d_model and causal."""
        shared = {f.name for f in dataclasses.fields(MixerConfig)}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in shared}


def _positive(cfg, *names, allow_zero=False):
    for name in names:
        _check_positive(type(cfg).__name__, name, getattr(cfg, name), allow_zero)


def _dt_range(cfg):
    if not 0 < cfg.dt_min <= cfg.dt_max:
        raise ValueError(f"{type(cfg).__name__}: need 0 < dt_min <= dt_max, got dt_min="
                         f"{cfg.dt_min!r}, dt_max={cfg.dt_max!r}")


@dataclass(frozen=True, kw_only=True)
class MambaConfig(MixerConfig):
    """Mamba (Gu & Dao 2023): in-projection to x, z (E * D each), causal depthwise convolution of
    width d_conv on x, SiLU, the selective SSM with state N = d_state per channel (dt, B, C from x;
    dt through a rank dt_rank projection, dt_rank 0 = ceil(D / 16)), gate by SiLU(z),
    out-projection. A = -(1..N) per channel (S4D-real), dt initialised log-uniform in
    [dt_min, dt_max]; no weight decay on A_log, D and the dt bias (the authors' hints). Defaults:
    mamba-ssm's Mamba in its language model's block (RMSNorm, no MLP)."""

    mixer: ClassVar[str] = "spt.models.mixers.mamba:Mamba"
    kind: ClassVar[str] = "mamba"
    title: ClassVar[str] = "Mamba"
    source: ClassVar[str] = "mamba-ssm's Mamba (mamba_simple.py, config_mamba.py)"
    authors: ClassVar[str] = "mamba-ssm"
    authors_fields: ClassVar[tuple] = ("d_state", "expand", "d_conv", "dt_rank", "dt_min", "dt_max",
                                       "block_norm", "mlp_expand")
    notes: ClassVar[tuple] = (MAMBA_DT_BIAS,)
    small_shape: ClassVar[dict] = dict(block_norm="layer")

    d_state: int = 16
    expand: int = 2
    d_conv: int = 4
    dt_rank: int = 0
    dt_min: float = 0.001
    dt_max: float = 0.1

    def check_mixer(self):
        _positive(self, "d_state", "expand", "d_conv")
        _positive(self, "dt_rank", allow_zero=True)
        _dt_range(self)


@dataclass(frozen=True, kw_only=True)
class Mamba2Config(MixerConfig):
    """Mamba-2 (Dao & Gu 2024, SSD): one in-projection to z, x, B, C, dt; a causal depthwise
    convolution over (x, B, C); the SSD recurrence with a scalar decay per head
    h_t = exp(dt_t A_h) h_{t-1} + dt_t B_t x_t^T, y_t = C_t h_t + D x_t over heads of head_dim
    channels (E * D / head_dim heads, B and C shared by all heads: one group); a gated RMSNorm
    (y * SiLU(z)) and the out-projection. A_h = -U(1, 16), dt log-uniform in [dt_min, dt_max].
    Defaults: mamba-ssm's Mamba2 (d_state 128, headdim 64, expand 2, d_conv 4); the width sets the
    head count."""

    mixer: ClassVar[str] = "spt.models.mixers.mamba2:Mamba2"
    kind: ClassVar[str] = "mamba2"
    title: ClassVar[str] = "Mamba-2"
    source: ClassVar[str] = "mamba-ssm's Mamba2 (mamba2.py, config_mamba.py)"
    authors: ClassVar[str] = "mamba-ssm"
    authors_fields: ClassVar[tuple] = ("d_state", "expand", "head_dim", "d_conv", "dt_min",
                                       "dt_max", "block_norm", "mlp_expand")
    small_shape: ClassVar[dict] = dict(d_state=64, head_dim=32, block_norm="layer")

    d_state: int = 128
    expand: int = 2
    head_dim: int = 64
    d_conv: int = 4
    dt_min: float = 0.001
    dt_max: float = 0.1

    def check_mixer(self):
        _positive(self, "d_state", "expand", "head_dim", "d_conv")
        _dt_range(self)
        if (self.expand * self.d_model) % self.head_dim:
            raise ValueError(f"Mamba2Config: head_dim={self.head_dim} must divide the inner width "
                             f"expand * d_model = {self.expand * self.d_model}")


@dataclass(frozen=True, kw_only=True)
class GatedDeltaNetConfig(MixerConfig):
    """Gated DeltaNet (Yang, Kautz & Hatamizadeh, ICLR 2025): per head a matrix state updated by
    the gated delta rule S_t = S_{t-1} a_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t,
    with q, k after a short causal convolution, SiLU and L2 normalisation, beta = sigmoid(.), the
    decay a_t = exp(-exp(A_log) softplus(. + dt_bias)) (Mamba-2's), and an output gate through a
    gated RMSNorm. n_heads heads of key width head_dim and value width expand_v * head_dim
    (:func:`gated_deltanet_heads`: head_dim 0 splits D into n_heads; n_heads 0 lets the width set
    the head count, key width about 0.75 D, fla's rule). conv_bias: a bias on the short
    convolutions. Defaults: fla's GatedDeltaNet (heads of 256, expand_v 2, conv_size 4, no conv
    bias) in its model's block (RMSNorm, GatedMLP with hidden_ratio 4 rounded to 256)."""

    mixer: ClassVar[str] = "spt.models.mixers.gated_deltanet:GatedDeltaNet"
    kind: ClassVar[str] = "gated_deltanet"
    smoke_shape: ClassVar[dict] = {"d_model": 32, "n_layers": 2, "n_heads": 2}
    rms_eps: ClassVar[float] = 1e-6
    title: ClassVar[str] = "Gated DeltaNet"
    source: ClassVar[str] = "fla's GatedDeltaNet (layers/gated_deltanet.py, its model's block)"
    authors: ClassVar[str] = "fla"
    authors_fields: ClassVar[tuple] = ("head_dim", "expand_v", "d_conv", "conv_bias", "block_norm",
                                       "mlp_expand", "mlp_multiple")
    small_shape: ClassVar[dict] = dict(n_heads=4, head_dim=0, conv_bias=True, mlp_expand=2,
                                       mlp_multiple=0, block_norm="layer")

    mlp_expand: int = 4
    mlp_multiple: int = 256
    n_heads: int = 0
    head_dim: int = 256
    expand_v: int = 2
    d_conv: int = 4
    conv_bias: bool = False

    def check_mixer(self):
        _positive(self, "expand_v", "d_conv")
        _positive(self, "n_heads", "head_dim", allow_zero=True)
        if not self.n_heads and not self.head_dim:
            raise ValueError("GatedDeltaNetConfig: set n_heads or head_dim (0 for both leaves the "
                             "head size unknown)")
        if not self.head_dim and self.d_model % self.n_heads:
            raise ValueError(f"GatedDeltaNetConfig: n_heads={self.n_heads} must divide d_model="
                             f"{self.d_model} (or set head_dim)")
        _check_bool("GatedDeltaNetConfig", "conv_bias", self.conv_bias)

    def own_departures(self, task: str) -> list[str]:
        return gated_deltanet_departures(self.d_model, self.n_heads, self.head_dim)


@dataclass(frozen=True, kw_only=True)
class GLAConfig(MixerConfig):
    """Gated linear attention (Yang, Wang, Shen, Panda & Kim, ICML 2024): per head a matrix state
    S_t = diag(a_t) S_{t-1} + k_t v_t^T, o_t = q_t S_t, with the data-dependent forget gate
    a_t = exp(logsigmoid(W2 W1 x_t + b) / gate_norm) through a rank gate_rank projection; key width
    expand_k * D, value width expand_v * D over n_heads heads; output gated by SiLU(W_g x) after a
    per-head RMSNorm. Defaults: fla's GLA (4 heads, expand_k 0.5, expand_v 1, gate rank 16,
    normaliser 16) in its model's block (RMSNorm, GatedMLP with hidden_ratio 4 rounded to 256)."""

    mixer: ClassVar[str] = "spt.models.mixers.gla:GLA"
    kind: ClassVar[str] = "gla"
    smoke_shape: ClassVar[dict] = {"d_model": 32, "n_layers": 2, "n_heads": 2}
    rms_eps: ClassVar[float] = 1e-6
    title: ClassVar[str] = "GLA"
    source: ClassVar[str] = "fla's GLA (configuration_gla.py, layers/gla.py)"
    authors: ClassVar[str] = "fla"
    authors_fields: ClassVar[tuple] = ("n_heads", "expand_k", "expand_v", "gate_rank", "gate_norm",
                                       "block_norm", "mlp_expand", "mlp_multiple")
    small_shape: ClassVar[dict] = dict(mlp_expand=2, mlp_multiple=0, block_norm="layer")

    mlp_expand: int = 4
    mlp_multiple: int = 256
    n_heads: int = 4
    expand_k: float = 0.5
    expand_v: float = 1.0
    gate_rank: int = 16
    gate_norm: float = 16.0

    def check_mixer(self):
        _positive(self, "n_heads", "expand_k", "expand_v", "gate_rank", "gate_norm")
        for name in ("expand_k", "expand_v"):
            width = getattr(self, name) * self.d_model
            if width != int(width) or int(width) % self.n_heads:
                raise ValueError(f"GLAConfig: {name} * d_model = {width} must be a whole number "
                                 f"that n_heads={self.n_heads} divides")


@dataclass(frozen=True, kw_only=True)
class LRUConfig(MixerConfig):
    """The Linear Recurrent Unit (Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu & De, ICML
    2023): a diagonal complex recurrence x_t = lambda * x_{t-1} + gamma * (B u_t) with d_state
    modes (0: D), |lambda| initialised uniform on the ring [r_min, r_max] and its phase in
    [0, max_phase], stable exponential parameterisation and gamma normalisation; output
    Re(C x_t) + D * u_t, then GELU and a GLU (the paper's block). The paper picks the ring per task
    (``task_settings``: spt.mixer_authors.LRU_TASKS); the defaults are its sCIFAR ring.

    recurrent_lr_scale : the learning rate of the recurrent parameters (nu, theta, gamma and B) as
        a multiple of the run's, without weight decay (minimal-LRU's "ssm" group, lr_factor 0.5);
        None: nu, theta and gamma without weight decay at the run's rate, B decayed as a matrix.
    Block: mixer-only, LayerNorm (the LRU's LRA runs use BatchNorm, which spt does not offer here:
    :mod:`spt.mixer_authors` says why)."""

    mixer: ClassVar[str] = "spt.models.mixers.lru:LRU"
    kind: ClassVar[str] = "lru"
    title: ClassVar[str] = "LRU"
    source: ClassVar[str] = "minimal-LRU (the LRU's reference code)"
    authors: ClassVar[str] = "minimal-LRU"
    authors_fields: ClassVar[tuple] = ("recurrent_lr_scale", "mlp_expand")
    small_shape: ClassVar[dict] = dict(d_state=0, r_min=0.9, r_max=0.999, max_phase=6.283,
                                       recurrent_lr_scale=None)
    task_settings: ClassVar[dict] = {task: s._asdict() for task, s in LRU_TASKS.items()}

    block_norm: str = "layer"
    d_state: int = 0
    r_min: float = 0.9
    r_max: float = 0.999
    max_phase: float = 6.283
    recurrent_lr_scale: Optional[float] = 0.5

    def check_mixer(self):
        _positive(self, "d_state", allow_zero=True)
        _positive(self, "max_phase")
        scale = self.recurrent_lr_scale
        if scale is not None and (isinstance(scale, (bool, str)) or not scale > 0):
            raise ValueError(f"LRUConfig.recurrent_lr_scale must be a factor > 0 of the run's "
                             f"lr, or None (the run's lr), got {scale!r}")
        if not 0.0 <= self.r_min < self.r_max < 1.0:
            raise ValueError(f"LRUConfig: need 0 <= r_min < r_max < 1, got r_min={self.r_min!r}, "
                             f"r_max={self.r_max!r}")

    def own_departures(self, task: str) -> list[str]:
        return lru_departures(self, task)


MIXER_CONFIGS: tuple[type, ...] = (MambaConfig, Mamba2Config, GatedDeltaNetConfig, GLAConfig,
                                   LRUConfig)
