"""Measuring one choice of implementation path: every candidate of a module (or of the training
step) run on the same inputs, checked against the reference, and timed (:mod:`spt.train.paths`
decides what to measure and keeps the result).

    trials = measure_module(module, args, kwargs, device, cfg)   # on a copy of the module
    path = pick(trials, reference_of(module))

A candidate's outputs and gradients (inputs and parameters) must agree with the reference's on the
same inputs within :data:`TOLERANCE` (max |a - b| / max |reference|, per dtype: a 1% error is
caught in float32, not under bf16 autocast, whose own rounding is about that); those that agree
are timed in turns, :data:`REPEATS` times after a warm-up, and the fastest is kept, the reference
unless another is at least :data:`MARGIN` faster. A candidate that raises, runs out of memory or
cannot run here (no flash-attn, a Triton kernel off CUDA, ...) is skipped with its reason.
"""
from __future__ import annotations

import copy
import math
import statistics
import time
from dataclasses import dataclass
from typing import Optional

import torch

from ..config import TrainConfig
from ..kernels.paths import candidates_of, reference_of
from . import distributed as D
from .graphs import GraphedStep, graphs_unavailable
from .passes import autocast

MARGIN = 0.01          # a path replaces the reference only when this much faster
REPEATS = 7            # rounds of timed calls at least (after one warm-up), candidates in turns
MIN_SECONDS = 0.2      # ... and until each candidate has run this long in all
STEP_SECONDS = 1.0     # the same for the step (eager or captured: whole-model differences)
MAX_ROUNDS = 100
# largest relative difference (max |a - b| / max |reference|) of outputs and gradients that agrees
TOLERANCE = {torch.float64: 1e-8, torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 5e-2}



@dataclass
class Trial:
    """One candidate of one group: its median time (s), its time over the reference's (the median
    over rounds timed side by side), its largest relative difference from the reference, and why
    it was not kept ("" when it agreed and ran)."""

    path: str
    seconds: Optional[float] = None
    error: Optional[float] = None
    skipped: str = ""
    ratio: Optional[float] = None


# ----------------------------------------------------------------------------- helpers
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def forked_rng(device: torch.device):
    """torch.random.fork_rng over the CPU generator and, on CUDA, `device`'s: the measuring draws
    no number the run would have drawn."""
    return torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])


def generator_copy(gen: torch.Generator) -> torch.Generator:
    """A new generator in `gen`'s state (the run's own generator stays where it was)."""
    g = torch.Generator(device=gen.device)
    g.set_state(gen.get_state())
    return g


def _tensors(x) -> list:
    if torch.is_tensor(x):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def signature(args, kwargs) -> str:
    def one(v):
        if torch.is_tensor(v):
            return f"{tuple(v.shape)}:{str(v.dtype).replace('torch.', '')}"
        return "None" if v is None else repr(v)
    return ", ".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in sorted(kwargs.items())])


def difference(got: list, want: list) -> float:
    """max over the tensor pairs of max |a - b| / max |b| (inf for mismatched shapes or NaN)."""
    worst = 0.0
    for a, b in zip(got, want):
        if a is None or b is None:
            if (a is None) != (b is None):
                return float("inf")
            continue
        if a.shape != b.shape:
            return float("inf")
        scale = float(b.detach().abs().max()) if b.numel() else 0.0
        d = float((a.detach().float() - b.detach().float()).abs().max()) if a.numel() else 0.0
        if d != d:
            return float("inf")
        worst = max(worst, d / max(scale, 1e-12))
    return worst if len(got) == len(want) else float("inf")


def tolerance_of(outputs: list) -> float:
    dtypes = [t.dtype for t in outputs if t.is_floating_point()]
    return max((TOLERANCE.get(d, 1e-3) for d in dtypes), default=TOLERANCE[torch.float32])


def why_unavailable(module: torch.nn.Module, path: str, device: torch.device, args) -> Optional[str]:
    """Why `path` cannot run a training step of `module` here (None: try it)."""
    if path == "triton" and device.type != "cuda":
        return "Triton runs on a CPU only in its interpreter, a test tool, not a fast path"
    if path == "library" and device.type != "cuda":
        return "the library kernels run on CUDA only"
    ask = getattr(module, "path_unavailable", None)
    return ask(path, *args) if ask is not None else None


# ----------------------------------------------------------------------------- one module group
def _call(module, args, kwargs, device, cfg, seed: int):
    """Forward and backward of `module` on fresh leaf copies of `args`: (outputs, gradients of the
    float inputs and of the parameters). The output gradients are random (seeded)."""
    leaves = [a.detach().clone().requires_grad_(a.is_floating_point()) if torch.is_tensor(a)
              else a for a in args]
    with autocast(device, cfg):
        out = module(*leaves, **kwargs)
    outs = [t for t in _tensors(out) if t.is_floating_point() and t.requires_grad]
    gen = torch.Generator(device=outs[0].device).manual_seed(seed) if outs else None
    grads_out = [torch.randn(t.shape, generator=gen, device=t.device).to(t.dtype) for t in outs]
    wrt = [a for a in leaves if torch.is_tensor(a) and a.requires_grad] + \
        [p for p in module.parameters() if p.requires_grad]
    grads = torch.autograd.grad(outs, wrt, grads_out, allow_unused=True) if outs and wrt else []
    return [o.detach() for o in outs], list(grads)


def alternating(calls: dict, device: torch.device, repeats: int = REPEATS,
                min_seconds: float = MIN_SECONDS) -> dict:
    """{name: list of seconds}: each call timed in turns, one warm-up call each first, for at
    least `repeats` rounds and until every call has run `min_seconds` in all (at most
    MAX_ROUNDS rounds), so that a change of load on the machine falls on every call alike and a
    call of a fraction of a millisecond is timed over many. The order turns by one each round: the
    call that runs first in a round (after another's garbage) is not always the same one."""
    for fn in calls.values():
        fn()
    times: dict = {name: [] for name in calls}
    names = list(calls)
    rounds = 0
    while rounds < repeats or (min(sum(ts) for ts in times.values()) < min_seconds
                               and rounds < MAX_ROUNDS):
        turn = rounds % len(names)
        for name in names[turn:] + names[:turn]:
            fn = calls[name]
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - t0)
        rounds += 1
    return times


def timed(trials: list, times: dict, reference: str) -> None:
    """Fill each trial's median seconds and, where the reference was timed beside it, its ratio to
    the reference: the median over rounds of its time over the reference's in the same round."""
    for t in trials:
        if t.path not in times:
            continue
        t.seconds = statistics.median(times[t.path])
        if reference in times:
            t.ratio = statistics.median(a / b for a, b in zip(times[t.path], times[reference]))


def _out_of_memory(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def measure_module(module: torch.nn.Module, args, kwargs, device: torch.device, cfg: TrainConfig,
                   repeats: int = REPEATS, budget_s: Optional[float] = None) -> list[Trial]:
    """The trials of every candidate path of `module` on (args, kwargs), on a copy of it.
    budget_s: the seconds the timing may take; when the checked calls say it would take more, the
    candidates are not timed (and the reference stays)."""
    m = copy.deepcopy(module)
    ref = reference_of(m)
    trials, results, took = [], {}, {}
    for path in candidates_of(m):
        trial = Trial(path)
        trials.append(trial)
        why = why_unavailable(m, path, device, args)
        if why is not None:
            trial.skipped = why
            continue
        m.path = path
        m.eval()  # no dropout: the outputs compare
        try:
            t0 = time.perf_counter()
            with forked_rng(device):
                results[path] = _call(m, args, kwargs, device, cfg, seed=0)
            _sync(device)
            took[path] = time.perf_counter() - t0
        except Exception as e:  # a path that cannot run these inputs is skipped with its reason
            trial.skipped = ("out of memory" if _out_of_memory(e)
                             else f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if ref not in results:
        for t in trials:
            t.skipped = t.skipped or "the reference did not run, so nothing can be checked"
        return trials
    want_out, want_grad = results[ref]
    tol = tolerance_of(want_out)
    for t in trials:
        if t.path not in results:
            continue
        got_out, got_grad = results[t.path]
        t.error = max(difference(got_out, want_out), difference(got_grad, want_grad))
        if t.error > tol:
            t.skipped = f"disagrees with the reference ({t.error:.2g} > {tol:g})"
    agree = [t for t in trials if not t.skipped]
    rounds = max(repeats, min(MAX_ROUNDS, math.ceil(MIN_SECONDS / max(took[ref], 1e-9))))
    cost = (rounds + 1) * sum(took[t.path] for t in agree)
    if budget_s is not None and cost > budget_s:
        for t in agree:
            t.skipped = (f"not timed: about {cost:.1f} s, more than the {max(budget_s, 0):.1f} s "
                         f"of measuring left")
        return trials
    m.train()

    def runner(path):
        def run():
            m.path = path
            with forked_rng(device):
                _call(m, args, kwargs, device, cfg, seed=0)
        return run
    if agree:
        timed(agree, alternating({t.path: runner(t.path) for t in agree}, device, repeats), ref)
    return trials


def pick(trials: list[Trial], reference: str) -> str:
    """The fastest trial that agreed (by its time over the reference's in the same rounds, else
    its median time); the reference unless another is MARGIN faster."""
    ok = {t.path: t.ratio if t.ratio is not None else t.seconds for t in trials
          if not t.skipped and t.seconds is not None}
    if reference not in ok:
        return reference
    best = min(ok, key=ok.get)
    return best if ok[best] <= (1 - MARGIN) * ok[reference] else reference


# ----------------------------------------------------------------------------- the step
def measure_step(model, objective, batch: dict, cfg: TrainConfig, device: torch.device,
                 gen: torch.Generator, env: D.DistEnv = D.SINGLE, repeats: int = REPEATS,
                 min_seconds: float = STEP_SECONDS, captured: bool = True) -> list[Trial]:
    """Trials of the step's paths ("eager", and "graphs" unless not `captured`) on the real model
    and batch: one forward and backward each from the same seeds, compared on the loss and the
    gradients, then each timed. The model's buffers (BatchNorm statistics) are restored and its
    gradients cleared."""
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    eager, graphs = Trial("eager"), Trial("graphs")
    graphs.skipped = graphs_unavailable(cfg, env) or ("" if captured else "not asked for")
    graphed = None

    def eager_step() -> torch.Tensor:
        """One eager forward and backward from a copy of the run's generator: the () loss, its
        gradients left in p.grad."""
        with autocast(device, cfg):
            loss, _ = objective.step(model, batch, generator_copy(gen))
        (loss / cfg.accum_steps).backward()
        return loss

    def gradients():
        return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()
                if p.requires_grad]

    try:
        with forked_rng(device):
            model.train()
            torch.manual_seed(0)
            want = ([eager_step().detach()], gradients())
            _zero_grads(model)
            if not graphs.skipped:
                try:
                    graphed = GraphedStep(model, model, objective, cfg, device, generator_copy(gen), env)
                    torch.manual_seed(0)
                    loss_g, _ = graphed(batch)
                    graphed.prepare_step()
                    got = ([loss_g.detach().clone()], gradients())
                    graphed.zero_grad()
                    graphs.error = max(difference(got[0], want[0]), difference(got[1], want[1]))
                    tol = tolerance_of(want[0])
                    if graphs.error > tol:
                        graphs.skipped = f"disagrees with the eager step ({graphs.error:.2g} > {tol:g})"
                except Exception as e:  # a step that cannot be captured here is skipped
                    graphs.skipped = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            calls = {"eager": lambda: (eager_step(), _zero_grads(model))}
            if not graphs.skipped:  # its static gradients attached again before each call
                calls["graphs"] = lambda: (graphed.zero_grad(), graphed(batch))
            timed([eager, graphs], alternating(calls, device, repeats, min_seconds), "eager")
    finally:
        if graphed is not None:
            graphed.close()
        _zero_grads(model)
        with torch.no_grad():
            for n, b in model.named_buffers():
                b.copy_(buffers[n])
    return [eager, graphs]


def _zero_grads(model) -> None:
    for p in model.parameters():
        p.grad = None
