"""``TrainConfig.paths="auto"``: each module's implementation path measured on the run's device,
checked against its reference, cached, and recorded (the vocabulary: :mod:`spt.kernels.paths`).

For a run, :func:`choose` takes the model, its objective and a real training batch:

1. It records what every module with paths receives in one forward pass: the run's own shapes
   and dtype. Modules of one kind that receive the same shapes form one group, measured once.
2. For each group (innermost modules first), on a copy of one module: every candidate path runs a
   forward and backward (under the run's autocast) on those inputs, is checked against the
   reference path on the same inputs and timed; the fastest that agrees is kept
   (:mod:`spt.train.measure`: the tolerances, the margin, the reasons a candidate is skipped).
3. Then the step itself on the real model and batch: "eager", or "graphs" (static buffers,
   captured into CUDA graphs on CUDA; :mod:`spt.train.graphs`), checked and timed the same way.

Every measurement is cached per device, versions and shape (:mod:`spt.train.paths_cache`), so
the next run with the same shapes pays nothing. Measuring costs at most :data:`MEASURE_SHARE` of
the run's projected time (its step count times the timed reference step, or its max_time); a run
of fewer than :data:`MIN_STEPS` steps does not measure at all (the cached choices still apply,
and ``spt tune`` measures ahead), and what is not measured keeps its reference. Measuring runs
under a forked RNG on copies of the modules (the model's buffers restored after the step's
trial), so it changes nothing the run then computes.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from ..config import TrainConfig
from ..kernels.paths import OTHERS, STEP, STEP_PATHS, candidates_of, choosers, reference_of, set_paths
from . import distributed as D
from . import paths_cache
from .graphs import graphs_unavailable
from .measure import (
    MARGIN,
    Trial,
    forked_rng,
    generator_copy,
    measure_module,
    measure_step,
    pick,
    signature,
)
from .passes import autocast

MEASURE_SHARE = 0.03   # of a run's projected time, at most, spent measuring
MIN_STEPS = 200        # shorter runs use the cache and the references, and measure nothing

_TUNING: list = []     # the open tuning() collections: [(stage, Chosen)] lists


@dataclass
class Choice:
    """What one group (a kind at one input shape, or the step) runs, and how it was decided:
    "measured", "cached", "pinned", "recorded" (a resumed run) or "reference: <why>"."""

    kind: str
    shape: str
    modules: list
    path: str
    trials: list = field(default_factory=list)
    how: str = "measured"


@dataclass
class Chosen:
    """The paths of one run: ``paths`` {module name: path, "step": path}, the groups' choices,
    and the seconds this run spent measuring."""

    paths: dict
    choices: list = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""

    def kinds(self) -> dict:
        """{kind: path, "step": path}: the short form results and RunResult show ("mixed" where
        modules of one kind run different paths)."""
        out: dict = {}
        for c in self.choices:
            out[c.kind] = c.path if out.get(c.kind, c.path) == c.path else "mixed"
        return dict(sorted(out.items()))

    def rows(self) -> list[dict]:
        """One row per group and candidate: kind, shape, path, milliseconds (median), its time
        over the reference's in the same rounds (median; what the choice compares, steadier than
        two medians on a busy machine), difference from the reference, "chosen" or why not, and
        how the group was decided."""
        rows = []
        for c in self.choices:
            for t in c.trials or [Trial(c.path)]:
                if t.skipped:
                    status = f"skipped: {t.skipped}"
                elif t.path == c.path:
                    status = "chosen"
                elif t.ratio is not None and t.ratio < 1:
                    status = f"not {100 * MARGIN:g}% faster than the reference in the same rounds"
                else:
                    status = "slower"
                rows.append({"kind": c.kind, "shape": c.shape, "path": t.path,
                             "ms": None if t.seconds is None else round(1e3 * t.seconds, 3),
                             "vs_ref": None if t.ratio is None else round(t.ratio, 3),
                             "error": t.error, "status": status, "how": c.how})
        return rows

    def line(self) -> str:
        """One line for a run's log."""
        said = ", ".join(f"{k} {v}" for k, v in self.kinds().items())
        measured = sum(c.how == "measured" for c in self.choices)
        cached = sum(c.how == "cached" for c in self.choices)
        return (f"paths: {said or 'none to choose'} ({measured} measured in {self.seconds:.1f} s, "
                f"{cached} cached{'; ' + self.note if self.note else ''})")


def _inputs(model, objective, batch: dict, cfg: TrainConfig, device, gen) -> dict:
    """{module name: (args, kwargs)} of the first call of every module with paths, in one
    forward pass in eval mode without gradients."""
    seen: dict = {}
    hooks = []
    for name, m in choosers(model).items():
        def hook(mod, args, kwargs, name=name):
            if name not in seen:
                seen[name] = (tuple(a.detach() if torch.is_tensor(a) else a for a in args),
                              {k: v.detach() if torch.is_tensor(v) else v for k, v in kwargs.items()})
        hooks.append(m.register_forward_pre_hook(hook, with_kwargs=True))
    was = model.training
    try:
        model.eval()
        with torch.no_grad(), autocast(device, cfg), forked_rng(device):
            objective.step(model, batch, generator_copy(gen))
    finally:
        for h in hooks:
            h.remove()
        model.train(was)
    return seen


def _groups(model, seen: dict, pinned: dict) -> list[tuple[str, list, tuple]]:
    """[(group key, [module names], (args, kwargs))], innermost modules first: modules of one
    class and structure that received the same inputs, not pinned, with a choice to make."""
    groups: dict = {}
    for name, m in choosers(model).items():
        if name in pinned or m.path_kind in pinned or name not in seen:
            continue
        if len(candidates_of(m)) < 2:
            continue
        args, kwargs = seen[name]
        weights = ",".join(f"{n}:{tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}"
                           for n, t in (*m.named_parameters(), *m.named_buffers()))
        key = f"{type(m).__name__}|{m!r}|{weights}|{signature(args, kwargs)}"
        groups.setdefault(key, ([], (args, kwargs)))[0].append(name)
    order = sorted(groups.items(), key=lambda kv: -max(n.count(".") for n in kv[1][0]))
    return [(k, names, io) for k, (names, io) in order]


def recorded(model, paths: dict, cfg: TrainConfig, env: D.DistEnv = D.SINGLE) -> Chosen:
    """A resumed run's paths as its last.pt recorded them, set on `model`: the same computation,
    so the run resumes bit-identical. A recorded captured step that the resumed configuration
    cannot run (compile, activation checkpointing, torchrun) runs eagerly, which computes the
    same."""
    modules = {k: v for k, v in paths.items() if k != STEP}
    set_paths(model, modules)
    found = choosers(model)
    choices = [Choice(found[n].path_kind, "", [n], p, how="recorded") for n, p in modules.items()
               if n in found]
    step = paths.get(STEP, "eager")
    if step == "graphs" and graphs_unavailable(cfg, env) is not None:
        step = "eager"
    choices.append(Choice(STEP, "", [], step, how="recorded"))
    return Chosen({**modules, STEP: step}, choices, note="recorded in last.pt")


@contextmanager
def tuning() -> Iterator[list]:
    """Inside, every run measures whatever is not cached, whatever its length or budget (``spt
    tune``, ``spt study check --tune``); yields the list that collects each run's
    (stage, :class:`Chosen`)."""
    found: list = []
    _TUNING.append(found)
    try:
        yield found
    finally:
        _TUNING.remove(found)


def choose(model, objective, batch: dict, cfg: TrainConfig, device: torch.device,
           gen: torch.Generator, *, total_steps: Optional[int], env: D.DistEnv = D.SINGLE,
           log: Optional[Callable[[str], None]] = None, stage: str = "") -> Chosen:
    """Set the paths ``cfg.paths`` asks for on `model` and return them (module docstring).

    batch       : a real training batch on `device` (the run's shapes).
    total_steps : the run's optimiser steps, for the measuring budget; None (and any run inside
                  :func:`tuning`) measures everything not cached, whatever it costs.
    stage       : the run's stage, for what :func:`tuning` collects.
    Under torchrun rank 0 chooses and every rank takes its choice.
    """
    if _TUNING:
        total_steps = None
    spec = cfg.paths
    pinned = {} if isinstance(spec, str) else dict(spec)
    others = "reference" if spec == "reference" else pinned.pop(OTHERS, "auto")
    set_paths(model, "reference")
    set_paths(model, {k: v for k, v in pinned.items() if k != STEP})
    chosen = None
    if others == "reference":
        chosen = _fixed(model, pinned, "paths: the references" + (" and the pinned" if pinned else ""))
    elif env.is_main:
        chosen = _choose(model, objective, batch, cfg, device, gen, pinned, total_steps, env)
    if env.active:
        chosen = D.gather_objects(chosen, env)[0]
        set_paths(model, {k: v for k, v in chosen.paths.items() if k != STEP})
    if log is not None and any(c.how == "measured" for c in chosen.choices):
        log(f"[spt] {chosen.line()}")
    for found in _TUNING:
        found.append((stage, chosen))
    return chosen


def _fixed(model, pinned: dict, note: str) -> Chosen:
    """The paths set now (the pinned ones and the references), measured nothing."""
    found = choosers(model)
    choices = [Choice(m.path_kind, "", [n], m.path, how="pinned" if n in pinned or m.path_kind
                      in pinned else "reference") for n, m in found.items()]
    step = pinned.get(STEP, "eager")
    choices.append(Choice(STEP, "", [], step, how="pinned" if STEP in pinned else "reference"))
    return Chosen({**{n: m.path for n, m in found.items()}, STEP: step}, choices, note=note)


def _choose(model, objective, batch, cfg, device, gen, pinned, total_steps, env) -> Chosen:
    t_start = time.perf_counter()
    try:
        seen = _inputs(model, objective, batch, cfg, device, gen)
    except Exception as e:  # the run's own first step says what is wrong, in its own words
        return _fixed(model, pinned, f"not measured: the probing forward pass raised "
                                     f"{type(e).__name__}")
    where = {**paths_cache.device_key(device),
             "amp": str(torch.bfloat16) if cfg.amp and device.type == "cuda" else None}
    found = choosers(model)
    choices = [Choice(m.path_kind, "", [n], m.path, how="pinned") for n, m in found.items()
               if n in pinned or m.path_kind in pinned]
    todo = []
    for key, names, io in _groups(model, seen, pinned):
        module = found[names[0]]
        hit = _cached({**where, "group": key}, module.paths)
        if hit is not None:
            choices.append(Choice(module.path_kind, signature(*io), names, *hit, how="cached"))
        else:
            todo.append(({**where, "group": key}, module.path_kind, names, io))
    step_key = {**where, "step": repr(model), "batch": signature((), batch),
                "objective": type(objective).__name__, "accum": cfg.accum_steps,
                "compile": cfg.compile, "grad_checkpointing": cfg.grad_checkpointing}
    step_hit = None if STEP in pinned else _cached(step_key, STEP_PATHS)
    needed = bool(todo) or (STEP not in pinned and step_hit is None)
    budget, why = _budget(model, objective, batch, cfg, device, gen, total_steps, needed, env)

    def spent() -> bool:
        return budget is not None and time.perf_counter() - t_start >= budget

    for ck, kind, names, (args, kwargs) in todo:
        module = found[names[0]]
        if spent():
            choices.append(Choice(kind, signature(args, kwargs), names, reference_of(module),
                                  how=f"reference: {why}"))
            continue
        left = None if budget is None else budget - (time.perf_counter() - t_start)
        trials = measure_module(module, args, kwargs, device, cfg, budget_s=left)
        choices.append(_kept(ck, kind, signature(args, kwargs), names, trials,
                             reference_of(module)))
    for c in choices:
        for n in c.modules:
            found[n].path = c.path
    # the step, on the model with its modules' paths set
    if STEP in pinned:
        choices.append(Choice(STEP, "", [], pinned[STEP], how="pinned"))
    elif step_hit is not None:
        choices.append(Choice(STEP, step_key["batch"], [], *step_hit, how="cached"))
    elif spent():
        choices.append(Choice(STEP, step_key["batch"], [], "eager", how=f"reference: {why}"))
    else:
        trials = measure_step(model, objective, batch, cfg, device, gen, env)
        choices.append(_kept(step_key, STEP, step_key["batch"], [], trials, "eager"))
    measured = any(c.how == "measured" for c in choices)
    paths = {**{n: m.path for n, m in found.items()}, STEP: choices[-1].path}
    return Chosen(paths, choices, time.perf_counter() - t_start,
                  why if not measured and needed else "")


def _cached(key: dict, allowed) -> Optional[tuple]:
    """(choice, trials) the cache holds for `key`, when its choice is one of `allowed` (an entry
    from a version of spt with other paths is measured again)."""
    hit = paths_cache.read(key)
    if hit is None or hit.get("choice") not in allowed:
        return None
    fields = set(Trial.__dataclass_fields__)
    try:
        trials = [Trial(**{k: v for k, v in t.items() if k in fields}) for t in hit["trials"]]
    except (TypeError, KeyError, AttributeError):
        return None
    return hit["choice"], trials


def _kept(key: dict, kind: str, shape: str, names: list, trials: list, reference: str) -> Choice:
    """The choice among `trials`, written to the cache."""
    path = pick(trials, reference)
    paths_cache.write(key, {"choice": path, "trials": [t.__dict__ for t in trials],
                            "measured": time.strftime("%Y-%m-%dT%H:%M:%S")})
    return Choice(kind, shape, names, path, trials)


def _budget(model, objective, batch, cfg, device, gen, total_steps, needed, env) -> tuple:
    """(seconds this run may spend measuring, None for no limit; what is said when it is spent)."""
    if total_steps is None or not needed:
        return None, ""
    if total_steps < MIN_STEPS:
        return 0.0, (f"not measured: a run of {total_steps} steps is too short for measuring to "
                     f"pay ({MIN_STEPS} or more; `spt tune` measures ahead)")
    step = measure_step(model, objective, batch, cfg, device, gen, env, repeats=1,
                        min_seconds=0.0, captured=False)[0].seconds
    projected = total_steps * (step or 0.0)
    if cfg.max_time is not None:
        projected = min(projected, cfg.max_time)
    return MEASURE_SHARE * projected, (f"the measuring budget ({100 * MEASURE_SHARE:.0f}% of the "
                                       f"run's projected {projected:.0f} s) is spent")
