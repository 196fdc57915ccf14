"""Multi-process training on PyTorch's own engine (``torchrun``): DDP, or FSDP for big models.

The script owns the process group, as in nanoGPT: it opens it at the top and closes it at the end
(:func:`process_group`); in between the same :func:`~spt.train.pretrain` / ``finetune`` /
``train_from_scratch`` run on every rank. Inside an open group (:func:`current_env`) the engine:

* uses ``cuda:LOCAL_RANK`` (nccl) or the CPU (gloo);
* cuts every *global* batch (``TrainConfig.batch_size`` examples, the same batches a single process
  draws) into ``WORLD_SIZE`` disjoint contiguous shards, one per rank (:func:`shard`);
* scales each rank's summed loss by ``WORLD_SIZE / n_global`` (``n_global`` = all-reduced count of
  predicted positions or examples), so DDP's gradient *average* equals the single-process gradient
  of the global batch mean (:func:`global_loss`);
* all-reduces summed statistics (loss sums, counts, correct predictions: sums, never means of means)
  before turning them into metrics, so every rank takes the same decisions (best epoch, early stop);
* writes checkpoints from rank 0 only, with every rank's RNG state, and can resume on any number of
  ranks (:func:`reseed`).

Without a group (no ``torchrun``) nothing here does any work: :data:`SINGLE` is used.
See docs/distributed.md for launch commands.
"""
from __future__ import annotations

import os
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

import torch
import torch.distributed as dist

# torch.distributed.nn binds `group=group.WORLD` as default arguments when first imported (DDP
# imports it): imported after process_group() opened the group, they would hold it for good.
import torch.distributed.nn
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


def _launch_env() -> DistEnv:
    """This process's place in a torchrun launch, read from RANK / WORLD_SIZE / LOCAL_RANK."""
    world = _env_int("WORLD_SIZE") or 1
    if world <= 1:
        return SINGLE
    rank, local = _env_int("RANK"), _env_int("LOCAL_RANK")
    if rank is None or local is None:
        raise RuntimeError("WORLD_SIZE > 1 but RANK / LOCAL_RANK are not set: launch with "
                           "`torchrun --nproc_per_node N script.py` (see docs/distributed.md)")
    return DistEnv(rank=rank, world_size=world, local_rank=local)


@contextmanager
def process_group(device: str = "auto") -> Iterator[DistEnv]:
    """The process group of a torchrun launch, owned by the script: ``with process_group() as env:``.

    device : the TrainConfig.device the script trains on. "auto" uses nccl (and cuda:LOCAL_RANK)
             when CUDA is available, else gloo; "cpu" forces gloo.
    Yields this process's :class:`DistEnv`. The group is initialised on entry and destroyed on exit
    (normal or by an exception), not left to the interpreter's exit, where gloo's worker threads
    can abort the process while they free their last tensors. Destroying it joins those threads
    when nothing else holds the group: :func:`~spt.train.engine.fit` drops its DDP wrapper before
    it returns. (FSDP's DTensor caches inside torch keep a reference to the group for the life of
    the process.) Not under torchrun (WORLD_SIZE unset or 1) it yields :data:`SINGLE` and does
    nothing.
    """
    env = _launch_env()
    if not env.active:
        yield SINGLE
        return
    if dist.is_initialized():
        raise RuntimeError("process_group(): a process group is already initialised in this "
                           "process; open it once, at the top of the script")
    use_cuda = not device.startswith("cpu") and torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(env.local_rank)
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    try:
        if dist.get_world_size() != env.world_size or dist.get_rank() != env.rank:
            raise RuntimeError(f"process group (rank {dist.get_rank()}/{dist.get_world_size()}) "
                               f"does not match RANK={env.rank}, WORLD_SIZE={env.world_size}")
        yield env
    except BaseException as e:
        traceback.clear_frames(e.__traceback__)  # the failed frames' locals may hold the group
        raise
    finally:
        dist.destroy_process_group()


def current_env() -> DistEnv:
    """Where this process stands in the initialised process group; :data:`SINGLE` when none is.

    Raises when torchrun started this process but no group is open: every rank would otherwise
    train alone and write the same files.
    """
    if dist.is_available() and dist.is_initialized():
        local = _env_int("LOCAL_RANK")
        return DistEnv(rank=dist.get_rank(), world_size=dist.get_world_size(),
                       local_rank=local if local is not None else 0)
    launch = _launch_env()
    if launch.active:
        raise RuntimeError(f"torchrun started {launch.world_size} processes but no process group "
                           f"is open: run the script's training inside `with spt.train."
                           f"distributed.process_group(device):` (see docs/distributed.md)")
    return SINGLE


def device_for(name: str, env: Optional[DistEnv] = None) -> torch.device:
    """The device of this rank for a device name such as TrainConfig.device: "auto" -> cuda
    (cuda:LOCAL_RANK under torchrun) or cpu. env: the process group's (None: the current one)."""
    env = current_env() if env is None else env
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(name)
    if env.active and dev.type != "cuda" and dist.get_backend() == "nccl":
        raise ValueError(f"TrainConfig.device={name!r}, but the process group uses nccl (CUDA "
                         f"only): open it with process_group({name!r}) to train on the CPU")
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


def global_loss(loss, stats: dict, weight: float, env: DistEnv):
    """The loss whose DDP-averaged gradient equals the single-process gradient of the global batch:
    (summed loss of this rank) * world_size / (count summed over ranks). Stats are weighted."""
    if not env.active:
        return loss, stats
    if "loss_sum" not in stats or "n" not in stats or not stats["loss_sum"].requires_grad:
        raise ValueError("distributed training needs the objective's step() to return stats "
                         "with a differentiable summed loss 'loss_sum' and a count 'n'")
    n_global = all_reduce_(stats["n"].detach().float() * weight, env)
    loss = stats["loss_sum"] * (weight * env.world_size) / n_global.clamp_min(1.0)
    return loss, {k: v.detach() * weight for k, v in stats.items()}


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
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
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
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    fqn = {"state": {names[i]: v for i, v in state["state"].items()},
           "param_groups": [{**g, "params": [names[i] for i in g["params"]]}
                            for g in state["param_groups"]]}
    set_optimizer_state_dict(model, opt, fqn, options=StateDictOptions(full_state_dict=True))


def reseed(seed: int, env: DistEnv, gen: torch.Generator, salt: int = 0) -> None:
    """Give rank r > 0 its own random streams (dropout); rank 0 keeps the seed a single process
    uses. `salt` (e.g. the optimiser step of a resumed run) makes fresh streams."""
    if not env.active or (env.rank == 0 and salt == 0):
        return
    s = (seed * 1_000_003 + env.rank * 7_919 + salt * 104_729) % (2 ** 63)
    torch.manual_seed(s)
    gen.manual_seed(s + 1)
