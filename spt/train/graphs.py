"""The training micro-step as a function over static buffers, captured into CUDA graphs: the step's
path "graphs" (``TrainConfig.paths``, :mod:`spt.kernels.paths`; "eager" is the step as written).

Small models (the LRA Image and Pathfinder Transformers) spend a training step launching hundreds
of tiny kernels, one after another from Python. :class:`GraphedStep` runs fit()'s forward and
backward of one micro-batch as a plain function over fixed tensors: the batch is copied into static
input buffers and the gradients are accumulated in place into static gradient tensors. On CUDA that
function is captured once per batch shape (``torch.cuda.CUDAGraph``) and then replayed: one launch
for the whole forward and backward. On any other device the same function runs over the same
buffers without capture (the same results, no speed-up): the CPU tests compare that path with the
eager step.

Captured: the autocast forward, the objective's loss and statistics, and backward of the loss
divided by ``accum_steps``. Not captured: gradient clipping, the AdamW step and the learning-rate
schedule, which stay eager (a few fused kernels): the optimiser, its checkpointed state and every
schedule (plateau included) stay those of an eager run.

Batch shapes. Each batch signature (every tensor's shape and dtype, and which entries are None:
``valid`` is None for a batch without padding) gets its own graph, captured after WARMUP uncaptured
runs of it on a side stream (lazy initialisation, autotuning and cuFFT plans happen there, outside
the capture). The last, smaller batch of an epoch is therefore a shape of its own, captured like
the others and never padded: results stay exact. At most MAX_SHAPES shapes get buffers and a graph
(their graphs share one memory pool); further shapes run uncaptured over the batch itself.

Randomness. Dropout draws from torch's default CUDA generator and the objective from fit()'s
generator; both are registered with every graph, so a replay draws where an eager step would
(each replay advances their philox offsets by what the captured step consumes).

Gradients. Before the optimiser step (:meth:`GraphedStep.prepare_step`) a parameter that received
no gradient since the last :meth:`GraphedStep.zero_grad` gets ``p.grad = None``, as eager backward
leaves it, so AdamW skips it exactly as in an eager run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Optional

import torch

from ..config import TrainConfig
from . import distributed as D
from .passes import autocast

WARMUP = 2         # uncaptured runs of a batch shape before it is captured (CUDA)
MAX_SHAPES = 16    # batch shapes that get static buffers (and on CUDA a graph)

def graphs_unavailable(cfg: TrainConfig, env: D.DistEnv = D.SINGLE) -> str | None:
    """Why the step cannot run over static buffers in this run (None: it can)."""
    if env.active:
        return (f"a captured step is a single process's; this run spans {env.world_size} ranks "
                f"(torchrun)")
    if cfg.compile or cfg.grad_checkpointing:
        return "the captured step is the eager one: not with compile or grad_checkpointing"
    return None


def batch_signature(batch: dict) -> tuple:
    """What a captured graph depends on: each key with its tensor's (shape, dtype), or None."""
    return tuple((k, None if batch[k] is None else (tuple(batch[k].shape), batch[k].dtype))
                 for k in sorted(batch))


@dataclass
class _Shape:
    """One batch signature: its static inputs and, once captured, its graph and outputs."""

    inputs: dict                     # key -> static tensor, or None where the batch has None
    runs: int = 0                    # calls so far
    graph: Optional[object] = None   # torch.cuda.CUDAGraph once captured
    loss: Optional[torch.Tensor] = None
    stats: dict = field(default_factory=dict)
    used: frozenset = frozenset()    # indices of the parameters its backward gives a gradient


class GraphedStep:
    """fit()'s forward + backward of one micro-batch over static buffers, replayed on CUDA.

    step = GraphedStep(model, fwd, objective, cfg, device, generator)
    loss, stats = step(batch)   # batch on `device`; gradients added into the static p.grad
    step.prepare_step()         # p.grad None where no gradient came since the last zero_grad
    ... clip, optimizer.step(), scheduler.step() ...
    step.zero_grad()            # static gradients back to 0 (instead of optimizer.zero_grad)
    step.close()                # the graphs and the static gradients released; p.grad None

    loss: () float32, the micro-batch's mean loss; stats: the objective's summed statistics as
    float32 tensors. On CUDA both live in the graph's memory: read or add them before the next
    call, which overwrites them.
    """

    def __init__(self, model: torch.nn.Module, fwd, objective, cfg: TrainConfig,
                 device: torch.device, generator: Optional[torch.Generator] = None,
                 env: D.DistEnv = D.SINGLE):
        why = graphs_unavailable(cfg, env)
        if why is not None:
            raise ValueError(f"the step path 'graphs': {why}; use the step path 'eager'")
        self.fwd, self.objective, self.cfg, self.device, self.gen = (fwd, objective, cfg, device,
                                                                    generator)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.grads = [torch.zeros_like(p) for p in self.params]
        self._attach_grads()
        self.touched: set[int] = set()   # parameters given a gradient by the backward running now
        self.used: set[int] = set()      # parameters given a gradient since the last zero_grad
        self.hooks = [p.register_post_accumulate_grad_hook(partial(_touch, self.touched, i))
                      for i, p in enumerate(self.params)]
        self.shapes: dict[tuple, _Shape] = {}
        self.capture = device.type == "cuda"
        if self.capture:
            self.stream = torch.cuda.Stream(device)
            self.pool = torch.cuda.graph_pool_handle()
        self.captured = 0   # graphs captured
        self.replays = 0    # micro-steps run by replaying one

    # ------------------------------------------------------------------ the step
    def forward_backward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        """The function that is captured: what fit()'s eager micro-step computes."""
        with autocast(self.device, self.cfg):
            loss, stats = self.objective.step(self.fwd, batch, self.gen)
        (loss / self.cfg.accum_steps).backward()
        return loss.detach(), {k: v.detach().float() for k, v in stats.items()}

    def __call__(self, batch: dict) -> tuple[torch.Tensor, dict]:
        """One micro-batch (tensors on the device, or None): forward, backward into p.grad."""
        sig = batch_signature(batch)
        shape = self.shapes.get(sig)
        if shape is None and len(self.shapes) < MAX_SHAPES:
            shape = self.shapes[sig] = _Shape({k: None if v is None else torch.empty_like(v)
                                               for k, v in batch.items()})
        if shape is None:
            return self._run(batch)
        for k, v in batch.items():
            if v is not None:
                shape.inputs[k].copy_(v, non_blocking=True)
        if self.capture and shape.graph is None and shape.runs >= WARMUP:
            self._capture(shape, sig)
        shape.runs += 1
        if shape.graph is None:
            return self._run(shape.inputs)
        shape.graph.replay()
        self.replays += 1
        self.used |= shape.used
        return shape.loss, shape.stats

    def _run(self, batch: dict) -> tuple[torch.Tensor, dict]:
        """The step without capture; on CUDA on the side stream that captures."""
        self.touched.clear()
        if not self.capture:
            out = self.forward_backward(batch)
        else:
            main = torch.cuda.current_stream(self.device)
            self.stream.wait_stream(main)
            with torch.cuda.stream(self.stream):
                out = self.forward_backward(batch)
            main.wait_stream(self.stream)
        self.used |= self.touched
        return out

    def _capture(self, shape: _Shape, sig: tuple) -> None:
        graph = torch.cuda.CUDAGraph()
        if self.gen is not None and self.gen.device.type == "cuda":
            graph.register_generator_state(self.gen)  # the default generator is registered anyway
        self.touched.clear()
        try:
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream,
                                  capture_error_mode="thread_local"):
                shape.loss, shape.stats = self.forward_backward(shape.inputs)
        except Exception as e:
            shapes = {k: s and s[0] for k, s in sig}
            raise RuntimeError(f"the step path 'graphs': capturing the training step of a batch "
                               f"{shapes} into a CUDA graph failed ({type(e).__name__}: {e}); pin "
                               f"TrainConfig.paths={{'step': 'eager'}} to train without capture") from e
        shape.graph, shape.used = graph, frozenset(self.touched)
        self.captured += 1

    # ------------------------------------------------------------------ around the optimiser step
    def _attach_grads(self) -> None:
        for p, g in zip(self.params, self.grads):
            p.grad = g

    def prepare_step(self) -> None:
        """Before clipping and the optimiser step: p.grad None for the parameters that received
        no gradient since the last zero_grad (eager backward leaves those None)."""
        for i, p in enumerate(self.params):
            if i not in self.used:
                p.grad = None

    def zero_grad(self) -> None:
        """After the optimiser step: the static gradients back to 0 and attached to p.grad."""
        if self.used:
            torch._foreach_zero_([self.grads[i] for i in sorted(self.used)])
        self.used = set()
        self._attach_grads()

    def close(self) -> None:
        """Release the graphs, the hooks and the static gradients (p.grad None, as after an eager
        step's zero_grad)."""
        for h in self.hooks:
            h.remove()
        for p in self.params:
            p.grad = None
        self.hooks, self.grads, self.shapes = [], [], {}


def _touch(touched: set, i: int, _param) -> None:
    touched.add(i)
