"""Implementation paths: the one vocabulary of spt's interchangeable implementations, and the one
function that sets them on a model.

Several of spt's modules compute the same function in more than one way, equal up to float
rounding: the FFT convolution with autograd's backward or a hand-written one, an SSM kernel by
chunked torch, a Triton kernel or the whole matrix at once, attention by torch's SDPA or
flash-attn, a recurrence by spt's chunked torch form or a library's CUDA kernel. Such a module
declares what it can run and keeps what it runs in ``self.path``:

    class ConvBlock(nn.Module):
        path_kind = "fft_conv"            # how a paths mapping names every module of the kind
        paths = ("torch", "manual")       # what it can run; the first is its reference
        candidates = ("torch", "manual")  # what TrainConfig.paths="auto" measures (default: paths)

and passes it to its kernel function as ``backend=``. :func:`set_paths` sets them on a whole model
and returns what it set; which one is fastest on a device is measured by :mod:`spt.train.paths`
(``TrainConfig.paths="auto"``). A path is an execution setting: it never enters a result's
identity (:mod:`spt.same_run`), so a result computed with one path is reused by a run with another.

The words (:data:`PATHS`) mean the same thing wherever they appear.
"""
from __future__ import annotations

from typing import Mapping, Optional, Union

import torch.nn as nn

PATHS = {
    "torch": "spt's plain-torch form: every module's reference, which the others are checked "
             "against (the FFT convolution differentiated by autograd, the chunked SSM kernels and "
             "recurrences, attention by torch's scaled_dot_product_attention, neighbour blocks "
             "gathered)",
    "ref": "the tests' oracle: the loop over time, the whole (.., N, L) matrix, attention as "
           "softmax(QK^T)V written out",
    "triton": "spt's own Triton kernels (CUDA; on a CPU only in Triton's interpreter, a test tool)",
    "library": "a library's CUDA kernel: flash-attn, mamba-ssm's selective scan and SSD, fla's "
               "GLA and gated delta rule",
    "manual": "the FFT convolution with a hand-written backward (two correlations)",
    "gemm": "DLR's shared eigenvalues: one matrix product for all channels",
    "flex": "neighbour-block attention through FlexAttention's block-sparse kernel",
    "dense": "neighbour-block attention as one masked attention over the whole sequence",
    "eager": "the training step as written (the step's reference)",
    "graphs": "the training step over static buffers, captured into CUDA graphs on CUDA",
}

# what a paths mapping calls the training step (fit's forward and backward of a micro-batch), and
# what it does with the modules it does not name ("auto": measure them; "reference")
STEP = "step"
STEP_PATHS = ("eager", "graphs")
OTHERS = "others"


def check_path(where: str, path: str, allowed) -> str:
    """`path` when it is one of `allowed`; else a ValueError from `where` naming them."""
    if path not in allowed:
        raise ValueError(f"{where}: path must be one of {tuple(allowed)}, got {path!r}")
    return path


def choosers(model: nn.Module) -> dict[str, nn.Module]:
    """{qualified name: module} of every module of `model` that has paths, in module order ("" is
    `model` itself)."""
    return {name: m for name, m in model.named_modules() if getattr(m, "path_kind", None)}


def candidates_of(module: nn.Module) -> tuple:
    """The paths TrainConfig.paths="auto" measures for `module` (its reference first)."""
    return tuple(getattr(module, "candidates", None) or module.paths)


def reference_of(module: nn.Module) -> str:
    return module.paths[0]


Spec = Union[str, Mapping[str, str]]


def set_paths(model: nn.Module, spec: Spec) -> dict[str, str]:
    """Set the paths of every module of `model` that has them; returns {qualified name: path}.

    spec : "reference" - every module's reference (``paths[0]``);
           a word of :data:`PATHS` - that path for every module that can run it, the reference for
           the others (e.g. "ref": every oracle, the tests' comparison);
           a mapping {kind or qualified module name: path} - those modules; a name wins over its
           kind; modules the mapping does not name keep their path. A kind or name that matches no
           module, or a path a module cannot run, is a ValueError naming it.
    """
    found = choosers(model)
    if isinstance(spec, str):
        if spec == "reference":
            plan = {n: reference_of(m) for n, m in found.items()}
        elif spec in PATHS:
            plan = {n: spec if spec in m.paths else reference_of(m) for n, m in found.items()}
        else:
            raise ValueError(f"set_paths: {spec!r} is not 'reference', a path ({', '.join(PATHS)}) "
                             f"or a mapping {{kind or module name: path}}")
    else:
        plan = _plan(found, spec)
    for name, path in plan.items():
        module = found[name]
        check_path(f"{type(module).__name__} {name or '(the model)'}", path, module.paths)
        module.path = path
    return {n: m.path for n, m in found.items()}


def _plan(found: dict, spec: Mapping[str, str]) -> dict:
    kinds = {m.path_kind for m in found.values()}
    unknown = [k for k in spec if k not in (STEP, OTHERS) and k not in found and k not in kinds]
    if unknown:
        raise ValueError(f"set_paths: {unknown} name no module of this model; its kinds: "
                         f"{sorted(kinds)}, its modules: {list(found)[:8]}"
                         + (" ..." if len(found) > 8 else ""))
    plan = {}
    for name, m in found.items():
        path = spec.get(name, spec.get(m.path_kind))
        if path is not None:
            plan[name] = path
    return plan


def paths_of(model: nn.Module) -> dict[str, str]:
    """{qualified name: path} of every module of `model` that has paths."""
    return {n: m.path for n, m in choosers(model).items()}


def kinds_of(model: nn.Module) -> dict[str, str]:
    """{kind: path} when every module of a kind runs the same path (else that kind maps to
    "mixed"): the short form a table or a log line shows."""
    out: dict[str, Optional[str]] = {}
    for m in choosers(model).values():
        out[m.path_kind] = m.path if out.get(m.path_kind, m.path) == m.path else "mixed"
    return out


def check_paths_spec(spec, where: str = "paths"):
    """A paths setting as TrainConfig keeps it: "auto", "reference", or a mapping {kind or module
    name: path} as a sorted tuple of pairs (a frozen config must hash; a list of pairs, its JSON
    form, is read back too). Paths must be words of :data:`PATHS`; the step
    ("step") takes "eager" or "graphs"; "others" says what the modules (and the step) the mapping
    does not name do: "auto" (measured, the default) or "reference"."""
    if isinstance(spec, str):
        if spec not in ("auto", "reference"):
            raise ValueError(f"{where} must be 'auto', 'reference' or a mapping {{kind or module "
                             f"name: path}}, got {spec!r}")
        return spec
    try:
        pairs = dict(spec.items() if isinstance(spec, Mapping) else spec)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be 'auto', 'reference' or a mapping {{kind or module "
                         f"name: path}}, got {spec!r}") from None
    for name, path in pairs.items():
        allowed = {STEP: STEP_PATHS, OTHERS: ("auto", "reference")}.get(name, tuple(PATHS))
        if not isinstance(name, str) or path not in allowed:
            raise ValueError(f"{where}[{name!r}] = {path!r}: a path is one of {allowed}")
    return tuple(sorted(pairs.items()))
