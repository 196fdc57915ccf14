"""Multi-process training on PyTorch's own engine (``torchrun``): DDP, or FSDP for big models.

The same :func:`~spt.train.pretrain` / ``finetune`` / ``train_from_scratch`` run on one process or
many. Launched by ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), the engine:

* initialises the process group (``nccl`` on CUDA, ``gloo`` on CPU) and uses ``cuda:LOCAL_RANK``;
* cuts every *global* batch (``TrainConfig.batch_size`` examples, the same batches a single process
  draws) into ``WORLD_SIZE`` disjoint contiguous shards, one per rank (:func:`shard`);
* scales each rank's summed loss by ``WORLD_SIZE / n_global`` (``n_global`` = all-reduced count of
  predicted positions or examples), so DDP's gradient *average* equals the single-process gradient
  of the global batch mean;
* all-reduces summed statistics (loss sums, counts, correct predictions: sums, never means of means)
  before turning them into metrics, so every rank takes the same decisions (best epoch, early stop);
* writes checkpoints from rank 0 only, with every rank's RNG state, and can resume on any number of
  ranks (:func:`restore_rng`).

Without ``torchrun`` (``WORLD_SIZE`` unset or 1) nothing here does any work: :data:`SINGLE` is used.
See docs/distributed.md for launch commands.
"""
from __future__ import annotations

import atexit
import os
import threading
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn as nn


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands: rank in [0, world_size), local_rank on its node."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE = DistEnv()


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"environment variable {name}={v!r} is not an integer; it is set by "
                         f"torchrun, do not set it by hand") from None


def _busy_threads(task_dir: str, me: int) -> bool:
    """True when a thread of this process other than `me` is running or runnable (Linux /proc)."""
    for tid in os.listdir(task_dir):
        if int(tid) == me:
            continue
        try:
            with open(f"{task_dir}/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread ended while we looked
        if state == "R":
            return True
    return False


def _wait_for_idle_threads(timeout: float = 5.0, settle: int = 3, poll: float = 0.002) -> None:
    """Sleep (GIL released) until no other thread of this process has run for `settle` polls.

    Why: a gloo worker thread drops its reference to a finished collective's tensors *after* the
    caller's ``wait()`` returned. If Python has already dropped its own reference, that tensor's
    Python object is freed by the worker, which must take the GIL; during interpreter
    finalization that kills the thread inside a destructor and aborts the whole process
    ("terminate called without an active exception", pytorch/pytorch#190489), and torchrun then
    kills every other rank. Under CPU load the worker can be descheduled for many milliseconds, so
    the exit must wait for it. ``destroy_process_group`` does not join gloo's threads while a DDP
    reducer still holds the group. Bounded by `timeout`; a no-op where /proc is absent.
    """
    task_dir = f"/proc/{os.getpid()}/task"
    if not os.path.isdir(task_dir):
        return
    me, quiet = threading.get_native_id(), 0
    deadline = time.monotonic() + timeout
    while quiet < settle and time.monotonic() < deadline:
        quiet = 0 if _busy_threads(task_dir, me) else quiet + 1
        time.sleep(poll)


def _destroy_process_group() -> None:
    """atexit: tear the group down and let gloo's workers finish before the interpreter goes.

    No barrier here: a rank leaving on an exception must not wait for ranks that never arrive.
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        _wait_for_idle_threads()


def dist_env(device: str = "auto") -> DistEnv:
    """Detect a torchrun launch and initialise the process group once (idempotent).

    device : TrainConfig.device. "auto" picks nccl when CUDA is available, else gloo; "cpu" forces
             gloo. Returns :data:`SINGLE` when not launched with more than one process.
    """
    world = _env_int("WORLD_SIZE") or 1
    if world <= 1:
        return SINGLE
    rank, local = _env_int("RANK"), _env_int("LOCAL_RANK")
    if rank is None or local is None:
        raise RuntimeError("WORLD_SIZE > 1 but RANK / LOCAL_RANK are not set: launch with "
                           "`torchrun --nproc_per_node N script.py` (see docs/distributed.md)")
    use_cuda = device != "cpu" and torch.cuda.is_available() and not device.startswith("cpu")
    if not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(local)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        # Tear the group down, and let gloo's threads drop their last tensors, before the
        # interpreter finalizes (see _wait_for_idle_threads).
        atexit.register(_destroy_process_group)
    if dist.get_world_size() != world or dist.get_rank() != rank:
        raise RuntimeError(f"process group (rank {dist.get_rank()}/{dist.get_world_size()}) does "
                           f"not match RANK={rank}, WORLD_SIZE={world}")
    return DistEnv(rank=rank, world_size=world, local_rank=local)


def device_for(env: DistEnv, name: str) -> torch.device:
    """The device of this rank for TrainConfig.device `name` ("auto" -> cuda:LOCAL_RANK or cpu)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(name)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", env.local_rank if env.active else torch.cuda.current_device())
    return dev


def shard(batch: list[int], env: DistEnv) -> tuple[list[int], float]:
    """This rank's contiguous part of a global batch of dataset indices -> (indices, weight).

    Parts differ in size by at most one. A rank whose part is empty (a last batch smaller than the
    number of ranks) gets ``[batch[0]]`` with weight 0: it still runs forward and backward (DDP and
    FSDP need every rank in every collective) but contributes nothing.
    """
    if not env.active:
        return batch, 1.0
    n, R = len(batch), env.world_size
    start = env.rank * n // R
    end = (env.rank + 1) * n // R
    if end > start:
        return batch[start:end], 1.0
    return batch[:1], 0.0


def eval_shards(n: int, batch_size: int, env: DistEnv) -> list[tuple[list[int], float]]:
    """The evaluation batches of this rank over a dataset of n items -> [(indices, weight)].

    The dataset is cut into world_size contiguous parts; every rank gets the same number of
    batches (missing ones are weight-0 dummies), so sharded models can all-gather in lockstep.
    """
    parts = [list(range(r * n // env.world_size, (r + 1) * n // env.world_size))
             for r in range(env.world_size)]
    n_batches = max(-(-len(p) // batch_size) for p in parts)
    mine = parts[env.rank]
    out = [(mine[i:i + batch_size], 1.0) for i in range(0, len(mine), batch_size)]
    return out + [([0], 0.0)] * (n_batches - len(out))


def all_reduce_sums(totals: dict, env: DistEnv) -> dict:
    """Sum a dict of scalar tensors over ranks in one collective (keys in sorted order)."""
    if not env.active:
        return totals
    # a rank that resumed at the very end of an epoch may hold no statistics yet: agree on keys
    keys = sorted(set().union(*gather_objects(sorted(totals), env)))
    if not keys:
        return {}
    dev = _collective_device()
    flat = torch.stack([torch.as_tensor(totals.get(k, 0.0)).float().reshape(()).to(dev)
                        for k in keys])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    return {k: flat[i] for i, k in enumerate(keys)}


def all_reduce_(t: torch.Tensor, env: DistEnv, op=None) -> torch.Tensor:
    """In-place all-reduce of a tensor on this rank's device (SUM unless `op` is given)."""
    if env.active:
        dist.all_reduce(t, op=op if op is not None else dist.ReduceOp.SUM)
    return t


def any_rank(flag: torch.Tensor, env: DistEnv) -> bool:
    """True when `flag` (a bool tensor) is True on any rank (a host sync: use at log intervals)."""
    if env.active:
        f = flag.to(_collective_device(), torch.float32).reshape(1).clone()
        dist.all_reduce(f, op=dist.ReduceOp.MAX)
        return bool(f.item() > 0)
    return bool(flag)


def barrier(env: DistEnv) -> None:
    if env.active:
        dist.barrier()


def gather_objects(obj, env: DistEnv) -> list:
    """[obj of rank 0, obj of rank 1, ...] on every rank ([obj] on one process)."""
    if not env.active:
        return [obj]
    out = [None] * env.world_size
    dist.all_gather_object(out, obj)
    return out


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ------------------------------------------------------------------------------- wrapping
def block_modules(model: nn.Module) -> list[nn.Module]:
    """The residual blocks of a model: the units FSDP shards and activation checkpointing wraps."""
    from ..models.ssm import SSMBlock
    from ..models.transformer import TransformerBlock
    return [m for m in model.modules() if isinstance(m, (TransformerBlock, SSMBlock))]


def wrap(model: nn.Module, env: DistEnv, strategy: str, device: torch.device) -> nn.Module:
    """DDP-wrap `model` (returns the wrapper) or FSDP-shard it in place (returns `model`).

    FSDP (``fully_shard``) shards every block and then the root. Parameters are replaced by
    sharded ones; their optimiser hints (``p._optim``) are carried over by name.
    """
    if not env.active:
        return model
    if strategy == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if strategy != "fsdp":
        raise ValueError(f"TrainConfig.distributed={strategy!r} is not 'ddp' or 'fsdp'")
    from torch.distributed.fsdp import fully_shard
    hints = {n: p._optim for n, p in model.named_parameters() if hasattr(p, "_optim")}
    for block in block_modules(model):
        fully_shard(block)
    fully_shard(model)
    for n, p in model.named_parameters():
        if n in hints:
            p._optim = hints[n]
    return model


def is_fsdp(model: nn.Module) -> bool:
    return any(hasattr(p, "full_tensor") for p in model.parameters())


def full_model_state(model: nn.Module) -> dict:
    """The full (unsharded) state dict on CPU; under FSDP a collective every rank must call."""
    if is_fsdp(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                    cpu_offload=True))
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def load_full_model_state(model: nn.Module, state: dict) -> None:
    if is_fsdp(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
    else:
        model.load_state_dict(state)


def optimizer_state(model: nn.Module, opt: torch.optim.Optimizer, names: list[str]) -> dict:
    """The optimiser state in the single-process format (``opt.state_dict()``: parameters by
    position), whatever the wrapping; `names` lists the parameters in that order."""
    if not is_fsdp(model):
        return opt.state_dict()
    from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                         get_optimizer_state_dict)
    full = get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True,
                                                                         cpu_offload=True))
    if "state" not in full:  # with cpu_offload only rank 0 receives the full state
        return {}
    index = {n: i for i, n in enumerate(names)}
    return {"state": {index[k]: v for k, v in full["state"].items()},
            "param_groups": [{**g, "params": [index[n] for n in g["params"]]}
                             for g in full["param_groups"]]}


def load_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer, state: dict,
                         names: list[str]) -> None:
    """Inverse of :func:`optimizer_state`."""
    if not is_fsdp(model):
        opt.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                         set_optimizer_state_dict)
    fqn = {"state": {names[i]: v for i, v in state["state"].items()},
           "param_groups": [{**g, "params": [names[i] for i in g["params"]]}
                            for g in state["param_groups"]]}
    set_optimizer_state_dict(model, opt, fqn, options=StateDictOptions(full_state_dict=True))


def reseed(seed: int, env: DistEnv, gen: torch.Generator, salt: int = 0) -> None:
    """Give rank r > 0 its own random streams (dropout; masks depend only on seed, epoch and index); rank 0 keeps the seed a single
    process uses. `salt` (e.g. the optimiser step of a resumed run) makes fresh streams."""
    if not env.active or (env.rank == 0 and salt == 0):
        return
    s = (seed * 1_000_003 + env.rank * 7_919 + salt * 104_729) % (2 ** 63)
    torch.manual_seed(s)
    gen.manual_seed(s + 1)
