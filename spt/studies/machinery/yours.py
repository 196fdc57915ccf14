"""Your models beside a preset's own: the same arms (task, objective, budgets, lr grid) for a
model config or a layer class you name by its import path.

    p = with_models(preset, {"mine": "my_layers:MyLayer"}, "01_lra_transformers")
    p = with_models(preset, {"mamba": {"layer": "spt.models.library_layers:MambaLayer",
                                       "bidirectional": True}}, STUDY)

`spt study run --model NAME=SPEC` and the notebooks' ``models`` parameter carry the JSON form of a
layer (:func:`layer_from_spec`).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ...config import replace
from .job import Entry, GridPreset


def layer_from_spec(spec, like, what: str = "layer spec"):
    """A LayerConfig from the JSON form of your layer, sized like the preset's model `like`:

        "module:Class" (or the class itself)
        {"layer": "module:Class", "kwargs": {...}, "bidirectional": false, "d_model": 64,
         "n_layers": 3, "positions": "none"}

    Only "layer" is required. d_model and n_layers default to like's; dropout and pooling are
    always like's, so your model is trained the way the preset trains its own. bidirectional:
    run a causal-only layer (Mamba, S5) forwards and backwards, as masked SPT needs.
    """
    from ...layer_config import LayerConfig

    if isinstance(spec, (str, type)):
        spec = {"layer": spec}
    if not isinstance(spec, dict) or not isinstance(spec.get("layer"), (str, type)):
        raise ValueError(f"{what}: expected \"module:Class\" or a dict with key \"layer\" (and "
                         f"optionally kwargs, bidirectional, d_model, n_layers, positions), got "
                         f"{spec!r:.120}")
    unknown = sorted(set(spec) - {"layer", "kwargs", "bidirectional", "d_model", "n_layers",
                                  "positions"})
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {unknown}; a layer spec takes layer, kwargs, "
                         f"bidirectional, d_model, n_layers, positions")
    return LayerConfig(layer=spec["layer"], kwargs=spec.get("kwargs") or {},
                       d_model=int(spec.get("d_model") or like.d_model),
                       n_layers=int(spec.get("n_layers") or like.n_layers),
                       bidirectional=bool(spec.get("bidirectional", False)),
                       positions=spec.get("positions", "none"), max_len=like.max_len,
                       dropout=getattr(like, "dropout", 0.0), pooling=getattr(like, "pooling", "mean"))


def _built_once(cfg, what: str) -> None:
    """Import your layer and build one of it at its width, now: a typo in its path or kwargs is
    an error before the study's own cells run (hours at paper size), not after them."""
    from ...models.user_layers import build_layer, import_layer

    try:
        build_layer(import_layer(cfg.layer), cfg, causal=bool(cfg.causal) or cfg.bidirectional)
    except (ImportError, TypeError, ValueError) as e:
        raise ValueError(f"{what}: {e}") from None


def _as_in(cfg, model):
    """`cfg` at `model`'s max_len, and causal where `model` is (a causal SPT arm needs a causal
    model: a bidirectional one would see the token it predicts)."""
    cfg = replace(cfg, max_len=model.max_len)
    if getattr(model, "causal", False) and not getattr(cfg, "causal", False):
        cfg = replace(cfg, causal=True, **({"bidirectional": False}
                                           if getattr(cfg, "bidirectional", False) else {}))
    return cfg


def with_models(p: GridPreset, models: Optional[dict], study: str,
                like: Optional[str] = None) -> GridPreset:
    """The preset with your models beside its own.

    models : {name: model config} (TransformerConfig, SSMConfig, SGConvConfig, FreeConvConfig, or a
             LayerConfig holding your own layer class), or {name: layer spec}, the JSON form of a layer that
             `spt study run --model` and the notebooks' `models` parameter carry
             (:func:`layer_from_spec`: sized like the `like` model). For each, every entry of the
             `like` model is copied with coordinate model=name and that config, its max_len set to
             the entry's (the task's length) and made causal where the entry's model is (the
             causal SPT arm of study 01); the task, the objective, the training settings and the lr
             grid are the `like` model's, so your model gets exactly the protocol the preset's own
             does.
    like   : the preset's model whose arms yours copy (default: its first model).
    A preset without a "model" coordinate (studies 00, 01, 04) gets one: its own entries are
    named by their model (its config's ``name``).
    """
    if not models:
        return p
    dims = [d for d, _ in p.entries[0].coords]

    def named(e: Entry) -> Entry:
        if "model" in dims:
            return e
        at = dims.index("task") + 1 if "task" in dims else 0
        c = list(e.coords)
        return dataclasses.replace(e, coords=tuple(c[:at] + [("model", e.job.model.name)] +
                                                   c[at:]))

    entries = [named(e) for e in p.entries]
    own = list(dict.fromkeys(dict(e.coords)["model"] for e in entries))
    like = like or own[0]
    if like not in own:
        raise ValueError(f"study {study}: like={like!r} is not one of the preset's models {own}")
    for name, cfg in models.items():
        if name in own:
            raise ValueError(f"study {study}: your model's name {name!r} is one of the preset's "
                             f"own models {own}; choose another name")
        if isinstance(cfg, (str, dict)):
            like_cfg = next(e.job.model for e in entries if dict(e.coords)["model"] == like)
            cfg = layer_from_spec(cfg, like_cfg, f"study {study}: models[{name!r}]")
            _built_once(cfg, f"study {study}: models[{name!r}]")
        if not hasattr(cfg, "max_len") or not hasattr(cfg, "d_model"):
            raise TypeError(f"study {study}: models[{name!r}] must be a model config "
                            f"(TransformerConfig, SSMConfig, SGConvConfig, FreeConvConfig or "
                            f"spt.layer_config.LayerConfig), got {type(cfg).__name__}")
        for e in [e for e in entries if dict(e.coords)["model"] == like]:
            arm = dataclasses.replace(e.job, model=_as_in(cfg, e.job.model), note="")
            coords = tuple((d, name if d == "model" else v) for d, v in e.coords)
            entries.append(Entry(coords, e.ref, arm))
    return dataclasses.replace(p, entries=tuple(entries))
