"""The paper's random initialisation: every parameter of the model ~ N(0, std^2).

App. C.1.3 of Amos, Berant & Gupta (ICLR 2024): "For the random initialization, we reset all model
parameter value to random normal values and standard deviation 0.1". The authors' code does this
to every parameter tensor of the whole model (embedding / input projection, norms, skip D, the
state-space parameters, output linears, the head) once the model is built, before a pretrained
backbone is loaded into it. :func:`paper_random_init_` is that rule; :func:`apply_init_` applies it
to a full model when its config asks for it (``SSMConfig(init="random")``).

What "the parameter value" means:

* The **stored tensor**, whatever transform the layer applies to it. Parameters kept in log space
  (S4's ``log_dt`` and ``log_neg_re`` = log(-Re Lambda)) or square-root space (DLR's
  ``sqrt_neg_re``) get N(0, std^2) in that space: log dt ~ N(0, 0.01) gives dt ~ 1 and
  Re Lambda ~ -1 for S4, so the initial kernels decay within a few steps (no long memory);
  DLR's Re Lambda = -sqrt_neg_re^2 is then small. This is what the authors' code does (it calls
  ``normal_`` on the parameters as registered).
* **Complex numbers** are stored by our layers (and the authors') as real (..., 2) tensors, so the
  real and the imaginary part are each N(0, std^2) (E|z|^2 = 2 std^2). A parameter of complex
  dtype gets the same: it is reset through its real view. (``torch.nn.init.normal_`` on a complex
  tensor would give each part std^2 / 2; we do not use it, so that the distribution does not depend
  on how a layer stores its complex numbers.)
* S4's ``C`` stores C-tilde (what S4 learns, see :class:`spt.models.ssm_kernels.S4Kernel`): it is
  reset directly, with no C -> C-tilde conversion, as in the authors' code.
* Parameters with ``requires_grad=False`` are reset too; a parameter shared by two modules is
  reset once.

Buffers are not parameters and are left as they are: BatchNorm's running mean / variance /
count keep their fresh values (0, 1, 0). No layer of ours keeps a precomputed kernel in a buffer:
kernels are computed from the parameters on every forward. Only the causal step mode caches its
discretised matrices (a plain attribute set by ``setup_step()``): call ``setup_step()`` again after
a reset.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn

from ..ssm_config import SSMConfig


@torch.no_grad()
def paper_random_init_(model: nn.Module, std: float = 0.1,
                       generator: Optional[torch.Generator] = None) -> nn.Module:
    """Set every parameter tensor of `model` to N(0, std^2), in place (see the module docstring).

    model     : any module; all of ``model.parameters()`` are reset, buffers are not touched.
    std       : standard deviation of each stored real entry (the paper: 0.1).
    generator : optional torch.Generator for a reproducible draw; the values are drawn on the
                generator's device and copied to each parameter's device and dtype. Without one,
                the global RNG of each parameter's device is used.
    Returns `model`.
    """
    if not std > 0:
        raise ValueError(f"paper_random_init_: std must be > 0, got {std!r}")
    for p in model.parameters():
        target = torch.view_as_real(p) if p.is_complex() else p
        if generator is None:
            target.normal_(0.0, std)
        else:
            draw = torch.randn(target.shape, generator=generator, device=generator.device,
                               dtype=torch.float64 if target.dtype == torch.float64
                               else torch.float32)
            target.copy_(draw * std)
    return model


def apply_init_(model: nn.Module, cfg) -> nn.Module:
    """Apply the whole-model initialisation `cfg` asks for to a freshly built `model`, in place.

    ``SSMConfig(init="random")``: every parameter of the model (input encoder, SSM stack and head)
    ~ N(0, cfg.random_std^2) (:func:`paper_random_init_`). Every other config
    (``TransformerConfig``, SSM structured inits, ``init="random_ssm"``, which redraws only the
    state-space parameters inside the SSM layers) leaves the model as built. Pretrained LM configs
    (``LMConfig.init="random"``) mean the LM's own fresh init and are not reset here.

    Call it at the end of model construction, before any checkpoint is loaded into the model (the
    authors' order): finetuning a random-init SPT checkpoint then keeps the pretrained backbone and
    gets a head ~ N(0, std^2).
    """
    if isinstance(cfg, SSMConfig) and cfg.init == "random":
        paper_random_init_(model, cfg.random_std)
    return model
