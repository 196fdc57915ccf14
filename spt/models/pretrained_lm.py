"""A text-pretrained causal LM (Pythia / GPT-NeoX) as a classifier over spt tasks (paper 3.5, C.1.5).

    cfg = LMConfig("EleutherAI/pythia-70m-deduped", init="pretrained")   # or init="random"
    model = lm_classifier(cfg, task.spec)        # forward(inputs, valid) -> (B, num_classes)
    fit(model, Supervised(task.spec), task, train_cfg, out_dir, stage="finetune", meta=...)

The GPT-NeoX layers and final norm come from the hub (``transformers.GPTNeoXModel.from_pretrained``
with the repo id, or a local folder in the same layout); ``init="random"`` keeps the architecture
(the repo's config.json) and draws fresh weights: the paper's "Pythia 70M (Rand Init)".

Tokenisation (the paper: character / pixel level; the model "is required to adapt to the new
tokenization during finetuning"). Our choice: Pythia's BPE input embedding (``embed_in``, 50K x d)
is dropped and a **re-initialised input embedding over the task's own vocabulary** takes its place
(N(0, 0.02^2), Pythia's initializer range): characters / bytes for ListOps, Text, Retrieval, and
the 256 pixel intensities for Pathfinder with ``tokens=True``. We do not map characters onto
Pythia's byte-level BPE ids: the task vocabularies reserve <pad>/<mask> ids and pixel ids have no
meaning to Pythia's embedding anyway, and a fresh embedding treats every task the same way.
Continuous tasks (LRA Image: standardised grayscale pixels, d_input = 1) enter through a **linear
input projection** (spt's ContinuousEncoder) instead of being quantised to 256 tokens.

Masks: GPT-NeoX is causal; padding (right-padded batches, ``valid`` False) is passed as
``attention_mask``. Pooling over valid positions as spt's models: "last" (default: the last real
position of a causal model has seen the whole sequence), "mean" or "max".

Length: Pythia was trained with 2048 positions. Its rotary position code has no table, so longer
inputs (LRA Text 4096, Retrieval 8001) run as they are, on rotary extrapolation; the paper does not
say how it handled them.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import torch
import torch.nn as nn

from ..config import Pooling, _check_choice
from ..data.task import TaskSpec
from .heads import ClassifierHead, ContinuousEncoder, TokenEncoder

PYTHIA_70M = "EleutherAI/pythia-70m-deduped"
LMInit = Literal["pretrained", "random"]


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ImportError("the text-corpus study (Pythia / GPT-NeoX) needs the `transformers` "
                          "package: pip install 'spt[lm]' (or pip install transformers)") from None
    return transformers


@dataclass(frozen=True)
class LMConfig:
    """Which GPT-NeoX model, and how it is initialised.

    source   : hub repo id (e.g. "EleutherAI/pythia-70m-deduped") or a local folder holding a
               GPT-NeoX config.json (+ weights, for init="pretrained").
    init     : "pretrained" (the source's weights) or "random" (its architecture, fresh weights).
    revision : hub revision (branch, tag or commit; Pythia publishes training steps as "step143000").
    pooling  : "last" | "mean" | "max" over valid positions.
    """

    source: str = PYTHIA_70M
    init: LMInit = "pretrained"
    revision: Optional[str] = None
    pooling: Pooling = "last"

    def __post_init__(self):
        _check_choice("LMConfig", "init", self.init, LMInit.__args__)
        _check_choice("LMConfig", "pooling", self.pooling, Pooling.__args__)
        if not self.source:
            raise ValueError("LMConfig.source must be a hub repo id or a local folder")


@contextmanager
def _quiet(tf):
    """transformers' logging at error level and no progress bars, restored afterwards."""
    log = tf.utils.logging
    level, bars = log.get_verbosity(), log.is_progress_bar_enabled()
    log.set_verbosity_error()
    log.disable_progress_bar()
    try:
        yield
    finally:
        log.set_verbosity(level)
        if bars:
            log.enable_progress_bar()


def load_lm(cfg: LMConfig) -> nn.Module:
    """The GPT-NeoX trunk (transformers.GPTNeoXModel, float32) without its input embedding.

    A causal-LM checkpoint (GPTNeoXForCausalLM, as Pythia's) loads into the trunk; its LM head is
    not used. Raises a clear error when the source is not a GPT-NeoX model.
    """
    tf = _transformers()
    src = str(cfg.source)
    kw = {"revision": cfg.revision} if cfg.revision else {}
    config = tf.AutoConfig.from_pretrained(src, **kw)
    if getattr(config, "model_type", None) != "gpt_neox":
        raise ValueError(f"LMConfig.source={src!r} is a {getattr(config, 'model_type', '?')!r} "
                         f"model; this wrapper takes GPT-NeoX models (Pythia)")
    if cfg.init == "pretrained":
        with _quiet(tf):  # no per-tensor load report for the LM head we do not use
            lm = tf.GPTNeoXModel.from_pretrained(src, **kw)
    else:
        lm = tf.GPTNeoXModel(config)
    lm = lm.float()
    lm.embed_in = None  # replaced by the task's own embedding (see the module docstring)
    return lm


class LMClassifier(nn.Module):
    """inputs (B, L) ids or (B, L, C) values, valid (B, L) bool -> logits (B, n_out).

    encoder : new embedding over the task vocabulary (or linear projection of values) -> (B, L, d)
    lm      : GPT-NeoX layers + final norm (causal attention, padding from `valid`) -> (B, L, d)
    head    : pool over valid positions -> MLP -> (B, n_out)
    """

    def __init__(self, lm: nn.Module, spec: TaskSpec, pooling: str = "last"):
        super().__init__()
        d = lm.config.hidden_size
        if spec.is_tokens:
            self.encoder = TokenEncoder(spec.vocab_size, d)
        else:
            self.encoder = ContinuousEncoder(spec.d_input, d)
        self.lm = lm
        n_out = 1 if spec.is_regression else spec.num_classes
        self.head = ClassifierHead(d, n_out, pooling)

    def forward(self, inputs: torch.Tensor, valid: Optional[torch.Tensor] = None,
                masked: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.encoder(inputs, masked)
        mask = None if valid is None else valid.long()
        h = self.lm(inputs_embeds=x, attention_mask=mask, use_cache=False).last_hidden_state
        return self.head(h, valid)


def lm_classifier(cfg: LMConfig, spec: TaskSpec) -> LMClassifier:
    """GPT-NeoX (pretrained or random) with a fresh input encoder and pooled head for `spec`."""
    return LMClassifier(load_lm(cfg), spec, cfg.pooling)


# ------------------------------------------------------------------ a tiny text LM made offline
# Stands in for Pythia in smoke runs and tests: a 2-layer GPT-NeoX trained for a few hundred steps
# on bytes of English text that ships with Python (standard-library docstrings), saved in the hub
# layout so it loads through the same `from_pretrained` path as Pythia.
CORPUS_MODULES = ("textwrap", "json", "collections", "argparse", "functools", "itertools",
                  "string", "random", "statistics", "pathlib", "logging", "unittest", "email",
                  "http.client", "csv", "datetime", "decimal", "fractions", "heapq", "shutil")


def text_corpus(modules=CORPUS_MODULES) -> bytes:
    """English text generated offline: the docstrings of some standard-library modules (UTF-8)."""
    import importlib
    import inspect

    parts = []
    for name in modules:
        mod = importlib.import_module(name)
        docs = [inspect.getdoc(mod)] + [inspect.getdoc(getattr(mod, a)) for a in sorted(vars(mod))
                                        if not a.startswith("_")
                                        and (inspect.isfunction(getattr(mod, a))
                                             or inspect.isclass(getattr(mod, a)))]
        parts += [d for d in docs if d]
    return "\n\n".join(dict.fromkeys(parts)).encode("utf-8")


@dataclass(frozen=True)
class TinyLMConfig:
    """The smoke stand-in for Pythia: sizes of the GPT-NeoX and its byte-level LM training.

    The defaults take ~5 s on one CPU core and bring the LM loss from ~4.4 to ~2.7 nats per byte
    (uniform: 5.55) on the ~94 KB corpus of :func:`text_corpus`.
    """

    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 2
    d_ff: int = 128
    steps: int = 150
    seq_len: int = 64
    batch_size: int = 16
    lr: float = 1e-2
    seed: int = 0


def train_tiny_text_lm(out_dir, cfg: TinyLMConfig = TinyLMConfig(), corpus: Optional[bytes] = None
                       ) -> Path:
    """Train a tiny GPT-NeoX causal LM on byte-level text and save it (hub layout) to `out_dir`.

    Written to a temporary folder and renamed, so concurrent callers never see half a model; an
    existing `out_dir` is reused as is. ``out_dir/spt_pretraining.json`` records the corpus size and
    the LM loss (nats per byte) before and after training.
    """
    out = Path(out_dir)
    if (out / "config.json").is_file():
        return out
    tf = _transformers()
    data = torch.frombuffer(bytearray(corpus if corpus is not None else text_corpus()),
                            dtype=torch.uint8).long()
    if data.numel() < 2 * cfg.seq_len:
        raise ValueError(f"train_tiny_text_lm: corpus has {data.numel()} bytes, need at least "
                         f"{2 * cfg.seq_len}")
    with torch.random.fork_rng(devices=[]):  # leaves the caller's random state as it was
        torch.manual_seed(cfg.seed)
        model, losses = _train_bytes_lm(tf, data, cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with _quiet(tf):
            model.save_pretrained(tmp)
        first, last = losses[:10], losses[-10:]
        (tmp / "spt_pretraining.json").write_text(json.dumps({
            "what": "tiny GPT-NeoX causal LM on byte-level standard-library docstrings (spt smoke "
                    "stand-in for Pythia)", "corpus_bytes": int(data.numel()),
            "config": cfg.__dict__, "loss_first10": sum(first) / len(first),
            "loss_last10": sum(last) / len(last)}, indent=2))
        try:
            os.replace(tmp, out)
        except OSError:  # another process finished first: keep its model
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _train_bytes_lm(tf, data: torch.Tensor, cfg: TinyLMConfig):
    """Next-byte training of a fresh GPT-NeoX on random windows of `data` (N,) -> (model, losses)."""
    g = torch.Generator().manual_seed(cfg.seed)
    conf = tf.GPTNeoXConfig(vocab_size=256, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
                            num_attention_heads=cfg.n_heads, intermediate_size=cfg.d_ff,
                            max_position_embeddings=2048, hidden_dropout=0.0, attention_dropout=0.0,
                            bos_token_id=None, eos_token_id=None, tie_word_embeddings=False)
    model = tf.GPTNeoXForCausalLM(conf)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / cfg.steps)
    losses = []
    model.train()
    for _ in range(cfg.steps):
        start = torch.randint(0, data.numel() - cfg.seq_len - 1, (cfg.batch_size,), generator=g)
        batch = data[start[:, None] + torch.arange(cfg.seq_len + 1)]
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        loss = nn.functional.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return model, losses
