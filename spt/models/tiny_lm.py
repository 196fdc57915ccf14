"""A tiny text LM made offline: the stand-in for Pythia in smoke runs and tests.

A 2-layer GPT-NeoX trained for a few hundred steps on bytes of English text that ships with Python
(standard-library docstrings, :func:`text_corpus`), saved in the hub layout with a byte-level
tokenizer.json (:func:`byte_tokenizer`), so it loads through the same paths as Pythia
(:func:`spt.models.pretrained_lm.lm_classifier` with ``LMConfig(source=<its folder>)``).

    path = train_tiny_text_lm("lm/tiny", TinyLMConfig())   # ~5 s on one CPU core; reused after
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.nn as nn

from ..atomic import atomic_dir
from .pretrained_lm import END_OF_TEXT, PADDING, byte_chars, import_transformers, quiet_transformers

# The modules whose docstrings make the corpus.
CORPUS_MODULES = ("textwrap", "json", "collections", "argparse", "functools", "itertools",
                  "string", "random", "statistics", "pathlib", "logging", "unittest", "email",
                  "http.client", "csv", "datetime", "decimal", "fractions", "heapq", "shutil")
# The tiny LM's vocabulary: byte b is id b, then GPT-NeoX's two special tokens.
TINY_EOT, TINY_PAD = 256, 257
TINY_VOCAB = 258


def text_corpus(modules=CORPUS_MODULES) -> list[bytes]:
    """English text generated offline: the docstrings of some standard-library modules, one UTF-8
    document each."""
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
    return [d.encode("utf-8") for d in dict.fromkeys(parts)]


def byte_tokenizer(without: frozenset = frozenset()):
    """A GPT-NeoX-style byte-level tokenizer with no merges: byte b -> id b, then <|endoftext|>
    (TINY_EOT) and <|padding|> (TINY_PAD). A ``tokenizers.Tokenizer``.

    without : bytes left out of the vocabulary, e.g. spt.models.pretrained_lm.NOT_IN_UTF8 for the
              13 bytes GPT-NeoX-20B's vocabulary (Pythia's) has no token for.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: b for b, c in enumerate(byte_chars()) if b not in without}
    vocab.update({END_OF_TEXT: TINY_EOT, PADDING: TINY_PAD})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([END_OF_TEXT, PADDING])
    return tok


@dataclass(frozen=True)
class TinyLMConfig:
    """The smoke stand-in for Pythia: sizes of the GPT-NeoX and its byte-level LM training.

    The defaults take ~5 s on one CPU core and bring the LM loss from ~4.4 to ~2.7 nats per token
    (uniform over the 258 tokens: 5.55) on the ~93K tokens of :func:`text_corpus`.
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


def train_tiny_text_lm(out_dir, cfg: TinyLMConfig = TinyLMConfig(),
                       corpus: Optional[Sequence[bytes]] = None) -> Path:
    """Train a tiny GPT-NeoX causal LM on byte-level text and save it (hub layout) to `out_dir`.

    corpus : documents (UTF-8 bytes), each followed by <|endoftext|> in training; default
             :func:`text_corpus`. The folder gets config.json, the weights and the
             :func:`byte_tokenizer` as tokenizer.json.
    Written to a temporary folder and renamed, so concurrent callers never see half a model; an
    existing `out_dir` is reused as is. ``out_dir/spt_pretraining.json`` records the corpus size and
    the LM loss (nats per token) before and after training.
    """
    out = Path(out_dir)
    if (out / "config.json").is_file():
        return out
    tf = import_transformers()
    docs = corpus if corpus is not None else text_corpus()
    data = torch.cat([t for d in docs for t in (torch.frombuffer(bytearray(d), dtype=torch.uint8)
                                                .long(), torch.tensor([TINY_EOT]))])
    if data.numel() < 2 * cfg.seq_len:
        raise ValueError(f"train_tiny_text_lm: corpus has {data.numel()} tokens, need at least "
                         f"{2 * cfg.seq_len}")
    with torch.random.fork_rng(devices=[]):  # leaves the caller's random state as it was
        torch.manual_seed(cfg.seed)
        model, losses = _train_bytes_lm(tf, data, cfg)

    def fill(folder: Path) -> None:
        with quiet_transformers(tf):
            model.save_pretrained(folder)
        byte_tokenizer().save(str(folder / "tokenizer.json"))
        first, last = losses[:10], losses[-10:]
        (folder / "spt_pretraining.json").write_text(json.dumps({
            "what": "tiny GPT-NeoX causal LM on byte-level standard-library docstrings (spt smoke "
                    "stand-in for Pythia)", "corpus_tokens": int(data.numel()),
            "documents": len(docs), "config": cfg.__dict__,
            "loss_first10": sum(first) / len(first), "loss_last10": sum(last) / len(last)},
            indent=2))

    atomic_dir(out, fill, replace=False)  # another process that finished first keeps its model
    return out


def _train_bytes_lm(tf, data: torch.Tensor, cfg: TinyLMConfig):
    """Next-token training of a fresh GPT-NeoX on random windows of `data` (N,) -> model, losses."""
    g = torch.Generator().manual_seed(cfg.seed)
    conf = tf.GPTNeoXConfig(vocab_size=TINY_VOCAB, hidden_size=cfg.d_model,
                            num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                            intermediate_size=cfg.d_ff, max_position_embeddings=2048,
                            hidden_dropout=0.0, attention_dropout=0.0, bos_token_id=TINY_EOT,
                            eos_token_id=TINY_EOT, pad_token_id=TINY_PAD, tie_word_embeddings=False)
    model = tf.GPTNeoXForCausalLM(conf)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / cfg.steps)
    losses = []
    model.train()
    for _ in range(cfg.steps):
        start = torch.randint(0, data.numel() - cfg.seq_len - 1, (cfg.batch_size,), generator=g)
        batch = data[start[:, None] + torch.arange(cfg.seq_len + 1)]
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        loss = nn.functional.cross_entropy(logits.reshape(-1, TINY_VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return model, losses
