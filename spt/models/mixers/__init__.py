"""Today's sequence mixers as spt layers: Mamba, Mamba-2, Gated DeltaNet, GLA, LRU.

Each mixer is an ``nn.Module`` with ``__init__(d_model, causal, **its config's fields)`` and
``forward(x (B, L, D), valid (B, L) bool or None) -> (B, L, D)`` (the contract of
:mod:`spt.models.user_layers`); :class:`~spt.models.mixers.stack.MixerStack` stacks them as a
config of :mod:`spt.mixer_config` asks. The recurrences are in :mod:`spt.kernels`.
"""
