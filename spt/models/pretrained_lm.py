"""A text-pretrained causal LM (Pythia / GPT-NeoX) as a classifier over spt tasks (paper 3.5, C.1.5).

    cfg = LMConfig("EleutherAI/pythia-70m-deduped", init="pretrained")   # or init="random"
    model = lm_classifier(cfg, task.spec)        # forward(inputs, valid) -> (B, num_classes)
    fit(model, Supervised(task.spec), task, train_cfg, out_dir, stage="finetune", meta=...)

The GPT-NeoX model comes from the hub (``transformers.GPTNeoXModel.from_pretrained`` with the repo
id, or a local folder in the same layout); ``init="random"`` keeps the architecture (the repo's
config.json) and draws fresh weights: the paper's "Pythia 70M (Rand Init)".

Inputs: the LM's own vocabulary and embedding (``LMConfig.input_embedding="lm"``, the default).
The paper's code (IdoAmos/not-from-scratch, ``src/models/lm``) keeps Pythia's pretrained input
embedding and writes every task symbol as text that Pythia's tokenizer turns into Pythia token ids:

  * characters (Text, Retrieval): the Pythia token(s) of the character;
  * ListOps: each symbol's text tokenized on its own and the pieces concatenated (``[MAX`` may be
    several tokens, so the sequence grows); its ListOps tokenizer writes ``]`` as ``X`` (as LRA's);
  * pixels (tokenized grayscale Image, Pathfinder): the intensity's decimal string (137 -> "137");
  * specials: <pad> -> ``<|padding|>``; <eos>, <bos>, <unk> -> ``<|endoftext|>``.

spt does the same with its own task ids (:func:`task_symbols`, :func:`lm_token_table`,
:class:`LMInputMap`): bytes of Text / Retrieval (id 4 + b) become the byte-level BPE token of byte
b (the same token as the authors' character for ASCII; a non-ASCII character, one token in the
authors' character vocabulary, is its 2-4 UTF-8 byte tokens here, as spt's tasks are byte-level
like LRA's); ListOps symbols and pixel intensities (id 4 + v) are tokenized as above, a symbol of
several tokens expanding in place (right-padded batches stay right-padded, ``valid`` follows);
<pad> -> ``<|padding|>``, <eos> / <unk> / <mask> -> ``<|endoftext|>`` (<mask> never occurs in
finetuning). The table is computed from the LM's ``tokenizer.json`` (in the local folder or the
hub cache): without it building a token-task classifier fails with an error saying how to get it.
The "random" arm uses the same mapping; its embedding rows are merely random (the authors' random
arm skips the mapping and feeds raw task ids, which for a random embedding differs only where a
symbol spans several tokens).

``input_embedding="fresh"`` is the alternative spt used first: the LM's input embedding is dropped
and a new N(0, 0.02^2) embedding over the task's own vocabulary takes its place (an ablation:
pretrained trunk without pretrained token embeddings; also works for token tasks that have no
text form). Continuous tasks (LRA Image as standardised grayscale pixels, d_input = 1) enter
through a **linear input projection** (spt's ContinuousEncoder); study 05's paper preset reads
Image as pixel tokens (``load_image(tokens=True)``) through the mapping above instead, as the
authors' ``tokenize: true`` does.

Masks: GPT-NeoX is causal; padding (right-padded batches, ``valid`` False) is passed as
``attention_mask``. Pooling over valid positions as spt's models: "last" (default: the last real
position of a causal model has seen the whole sequence), "mean" or "max".

Length: Pythia was trained with 2048 positions. Its rotary position code has no table, so longer
inputs (LRA Text 4096; ListOps, up to 2000 symbols, after operator expansion) run as they are, on
rotary extrapolation; the paper does not say how it handled them. Retrieval (a pair task) runs
each document (<= 4000 bytes) through the LM on its own, as the authors' code does.

Offline, :mod:`spt.models.tiny_lm` trains a tiny GPT-NeoX in the same layout to stand in for Pythia.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import torch
import torch.nn as nn

from ..config import Head, Pooling, _check_choice
from ..data import listops
from ..data.task import EOS_ID, MASK_ID, N_SPECIAL, PAD_ID, UNK_ID, TaskSpec
from .heads import ClassifierHead, ContinuousEncoder, PairClassifierHead, TokenEncoder
from .model import stack_pair

PYTHIA_70M = "EleutherAI/pythia-70m-deduped"
LMInit = Literal["pretrained", "random"]
InputEmbedding = Literal["lm", "fresh"]
# GPT-NeoX's special tokens (Pythia: ids 0 and 1), by their text in tokenizer.json.
END_OF_TEXT, PADDING = "<|endoftext|>", "<|padding|>"
# The authors' ListOps tokenizer (LRA's) writes the closing bracket as "X"; Pythia sees that text.
LISTOPS_TEXT = {"]": "X"}


def import_transformers():
    """The `transformers` module, or an ImportError saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ImportError("the text-corpus study (Pythia / GPT-NeoX) needs the `transformers` "
                          "package: pip install 'spt[lm]' (or pip install transformers)") from None
    return transformers


@dataclass(frozen=True)
class LMConfig:
    """Which GPT-NeoX model, how it is initialised, and how task tokens enter it.

    source   : hub repo id (e.g. "EleutherAI/pythia-70m-deduped") or a local folder holding a
               GPT-NeoX config.json (+ weights, for init="pretrained"; + tokenizer.json, for
               token tasks with input_embedding="lm").
    init     : "pretrained" (the source's weights) or "random" (its architecture, fresh weights).
    revision : hub revision (branch, tag or commit; Pythia publishes training steps as "step143000").
    pooling  : "last" | "mean" | "max" over valid positions.
    head     : the classifier after pooling: "mlp" (Linear(d, d) -> GELU -> Linear(d, n_out)) or
               "linear" (one Linear(d, n_out)); see spt.models.heads.
    input_embedding : token tasks only. "lm" (the paper): task symbols are written as the LM's own
               token ids and go through its input embedding (pretrained or random with the
               model); "fresh": a new embedding over the task vocabulary replaces it.
    """

    source: str = PYTHIA_70M
    init: LMInit = "pretrained"
    revision: Optional[str] = None
    pooling: Pooling = "last"
    input_embedding: InputEmbedding = "lm"
    head: Head = "mlp"

    def __post_init__(self):
        _check_choice("LMConfig", "init", self.init, LMInit.__args__)
        _check_choice("LMConfig", "pooling", self.pooling, Pooling.__args__)
        _check_choice("LMConfig", "head", self.head, Head.__args__)
        _check_choice("LMConfig", "input_embedding", self.input_embedding,
                      InputEmbedding.__args__)
        if not self.source:
            raise ValueError("LMConfig.source must be a hub repo id or a local folder")

    def departures(self, task: str = "") -> list[str]:
        """None: the model is its authors' GPT-NeoX as transformers builds it (the fidelity check
        compares its training settings with the paper's)."""
        return []


@contextmanager
def quiet_transformers(tf):
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
    """The GPT-NeoX model (transformers.GPTNeoXModel, float32) with its input embedding embed_in.

    A causal-LM checkpoint (GPTNeoXForCausalLM, as Pythia's) loads into the model; its LM head is
    not used. Raises a clear error when the source is not a GPT-NeoX model.
    """
    tf = import_transformers()
    src = str(cfg.source)
    kw = {"revision": cfg.revision} if cfg.revision else {}
    config = tf.AutoConfig.from_pretrained(src, **kw)
    if getattr(config, "model_type", None) != "gpt_neox":
        raise ValueError(f"LMConfig.source={src!r} is a {getattr(config, 'model_type', '?')!r} "
                         f"model; this wrapper takes GPT-NeoX models (Pythia)")
    if cfg.init == "pretrained":
        with quiet_transformers(tf):  # no per-tensor load report for the LM head we do not use
            lm = tf.GPTNeoXModel.from_pretrained(src, **kw)
    else:
        lm = tf.GPTNeoXModel(config)
    return lm.float()


# ------------------------------------------------------------ task symbols -> the LM's token ids
def byte_chars() -> list[str]:
    """The character byte-level BPE (GPT-2, GPT-NeoX) writes for each byte 0..255 in its vocabulary.

    Printable Latin-1 bytes stand for themselves; the other 68 bytes take the characters from
    U+0100 on, in byte order (so a space, byte 32, is "Ġ").
    """
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)}
    out, shifted = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + shifted))
            shifted += 1
    return out


def load_tokenizer(cfg: LMConfig):
    """The LM's tokenizer (``tokenizers.Tokenizer``) from ``tokenizer.json`` of `cfg.source`.

    Read from the local folder, or the hub (its local cache when offline). Raises FileNotFoundError
    saying how to get the file when there is none.
    """
    tf = import_transformers()
    from tokenizers import Tokenizer

    kw = {"revision": cfg.revision} if cfg.revision else {}
    try:
        path = tf.utils.cached_file(str(cfg.source), "tokenizer.json", **kw)
    except OSError as e:
        path, why = None, str(e).splitlines()[0]
    else:
        why = "no tokenizer.json"
    if not path:
        raise FileNotFoundError(
            f"LMConfig.source={cfg.source!r}: cannot read its tokenizer.json ({why}). Token tasks "
            f"map their symbols onto the LM's own token ids, which needs the LM's tokenizer: "
            f"download the repo with the tokenizer (`huggingface-cli download {cfg.source}`, "
            f"then run with HF_HUB_OFFLINE=1) or put tokenizer.json in the folder; or set "
            f"LMConfig.input_embedding='fresh' to use a new embedding instead")
    return Tokenizer.from_file(str(path))


def task_symbols(spec: TaskSpec) -> tuple[bytes, ...]:
    """The text of task ids N_SPECIAL .. vocab_size-1, in id order, as it is shown to the LM.

    text, retrieval        : id 4 + b is the byte b.
    listops                : spt.data.listops.SYMBOLS, "]" written "X" (the authors' ListOps text).
    image, pathfinder*, pathx*, digits* (pixel tokens) : id 4 + v is the decimal string of
                           intensity v (the authors' tokenized Image, pyth-lra-cifar.yaml).
    Other token tasks raise ValueError (pass `symbols` to :func:`lm_classifier`, or use
    input_embedding="fresh").
    """
    name, n = spec.name, (spec.vocab_size or 0) - N_SPECIAL
    if name in ("text", "retrieval"):
        out = tuple(bytes([b]) for b in range(256))
    elif name == "listops":
        out = tuple(LISTOPS_TEXT.get(s, s).encode() for s in listops.SYMBOLS)
    elif name == "image" or name.startswith(("pathfinder", "pathx", "digits")):
        out = tuple(str(v).encode() for v in range(n))
    else:
        raise ValueError(f"task {name!r}: no text form of its tokens is known, so they cannot be "
                         f"mapped onto the LM's vocabulary; pass symbols= to lm_classifier or set "
                         f"LMConfig.input_embedding='fresh'")
    if len(out) != n:
        raise ValueError(f"task {name!r}: vocab_size {spec.vocab_size} does not match its "
                         f"{len(out)} symbols + {N_SPECIAL} specials")
    return out


# Bytes that never occur in UTF-8 text (0xC0 and 0xC1 would start overlong encodings, 0xF5-0xFF
# code points beyond U+10FFFF): GPT-NeoX's byte-level vocabulary (Pythia's) has no token for them.
NOT_IN_UTF8 = frozenset({0xC0, 0xC1, *range(0xF5, 0x100)})


def lm_token_table(tokenizer, symbols: Sequence[bytes]) -> list[tuple[int, ...]]:
    """LM token ids of every task id: specials first (PAD, MASK, UNK, EOS), then `symbols`.

    A one-byte symbol is the tokenizer's byte-level token of that byte; a longer symbol (UTF-8 text)
    is what the tokenizer makes of it on its own (one or more ids). Only the tokens the symbols
    need are asked for. A byte of :data:`NOT_IN_UTF8` that the vocabulary lacks (GPT-NeoX-20B's,
    Pythia's, lacks all 13) maps to ``<|endoftext|>``, as the task's <unk> does: Text and
    Retrieval are UTF-8, so those bytes occur only in invalid text. Raises ValueError naming the
    symbol when the tokenizer has no token for a byte that UTF-8 text uses, or lacks GPT-NeoX's
    special tokens.
    """
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    missing = [t for t in (END_OF_TEXT, PADDING) if t not in vocab]
    if missing:
        raise ValueError(f"the LM's tokenizer has no {missing} token(s); expected GPT-NeoX's "
                         f"{END_OF_TEXT} and {PADDING}")
    chars = byte_chars()
    eot, pad = vocab[END_OF_TEXT], vocab[PADDING]
    specials = {PAD_ID: pad, MASK_ID: eot, UNK_ID: eot, EOS_ID: eot}
    table = [(specials[i],) for i in range(N_SPECIAL)]
    for s in symbols:
        if len(s) == 1 and chars[s[0]] in vocab:
            table.append((vocab[chars[s[0]]],))
        elif len(s) == 1 and s[0] in NOT_IN_UTF8:
            table.append((eot,))
        elif len(s) == 1:
            raise ValueError(f"the LM's tokenizer has no byte-level token for byte {s[0]:#04x} "
                             f"({chars[s[0]]!r}), which UTF-8 text uses: the task mapping needs a "
                             f"byte-level BPE such as GPT-NeoX's")
        else:
            table.append(tuple(tokenizer.encode(s.decode("utf-8"), add_special_tokens=False).ids))
    return table


class LMInputMap(nn.Module):
    """Task ids -> LM token ids: inputs (B, L), valid (B, L) bool -> ids (B, L'), valid (B, L').

    Task id i becomes the LM tokens table[i] (one or more, in place). When every entry is a single
    token L' = L and padding keeps its place; otherwise the valid positions of each row are
    expanded and written from the left, so L' = the longest expanded row and rows stay
    right-padded. Padding is the LM's pad id. Buffers (saved with the model): ids (V, K) and
    lengths (V,), K = the longest entry.
    """

    def __init__(self, table: Sequence[Sequence[int]], pad_id: int):
        super().__init__()
        if not table or any(len(t) == 0 for t in table):
            raise ValueError("LMInputMap: every task id needs at least one LM token")
        k = max(len(t) for t in table)
        ids = torch.full((len(table), k), pad_id, dtype=torch.long)
        for i, t in enumerate(table):
            ids[i, :len(t)] = torch.as_tensor(t, dtype=torch.long)
        self.pad_id = int(pad_id)
        self.register_buffer("ids", ids)
        self.register_buffer("lengths", torch.as_tensor([len(t) for t in table], dtype=torch.long))

    def forward(self, inputs: torch.Tensor, valid: Optional[torch.Tensor] = None):
        if inputs.dtype not in (torch.long, torch.int32, torch.int64):
            raise TypeError(f"LMInputMap got inputs of dtype {inputs.dtype}; expected integer ids")
        inputs = inputs.long()
        if self.ids.shape[1] == 1:
            out = self.ids[inputs, 0]
            return (out if valid is None else out.masked_fill(~valid, self.pad_id)), valid
        if valid is None:
            valid = torch.ones_like(inputs, dtype=torch.bool)
        n = self.lengths[inputs] * valid  # (B, L) LM tokens per position, 0 for padding
        end = n.cumsum(1)
        start, total = end - n, end[:, -1]
        out = inputs.new_full((inputs.shape[0], int(total.max())), self.pad_id)
        for k in range(self.ids.shape[1]):
            b, t = (n > k).nonzero(as_tuple=True)
            out[b, start[b, t] + k] = self.ids[inputs[b, t], k]
        return out, torch.arange(out.shape[1], device=out.device) < total[:, None]


def task_input_map(cfg: LMConfig, spec: TaskSpec, vocab_size: int,
                   symbols: Optional[Sequence[bytes]] = None) -> LMInputMap:
    """The LMInputMap of `spec` for the LM of `cfg` (its tokenizer.json; ids < `vocab_size`)."""
    tok = load_tokenizer(cfg)
    table = lm_token_table(tok, task_symbols(spec) if symbols is None else symbols)
    if len(table) != spec.vocab_size:
        raise ValueError(f"task {spec.name!r}: {len(table) - N_SPECIAL} symbols given for a "
                         f"vocabulary of {spec.vocab_size} ({N_SPECIAL} specials + symbols)")
    top = max(max(t) for t in table)
    if top >= vocab_size:
        raise ValueError(f"LMConfig.source={cfg.source!r}: its tokenizer gives id {top}, beyond "
                         f"the model's {vocab_size} input embeddings")
    return LMInputMap(table, tok.token_to_id(PADDING))


class LMClassifier(nn.Module):
    """inputs (B, L) ids or (B, L, C) values, valid (B, L) bool -> logits (B, n_out).

    A pair task (spec.pair, LRA Retrieval) also takes inputs2 (B, L2), valid2: the two documents go
    through the LM as one batch of 2B rows (spt.models.model.stack_pair, as the authors' S4-based
    code batches them), each is pooled and the head classifies [u, v, u*v, u-v].

    inputs  : token ids through `inputs` (LMInputMap) and the LM's own embedding ``embed_in``, or
              through `encoder` (a new embedding over the task vocabulary, or the linear projection
              of continuous values; the LM's ``embed_in`` is then dropped) -> (B, L', d)
    lm      : GPT-NeoX layers + final norm (causal attention, padding from `valid`) -> (B, L', d)
    head    : pool over valid positions -> `head` ("mlp" or "linear", spt.models.heads) -> (B, n_out)
    """

    def __init__(self, lm: nn.Module, spec: TaskSpec, pooling: str = "last",
                 inputs: Optional[LMInputMap] = None, head: str = "mlp"):
        super().__init__()
        d = lm.config.hidden_size
        self.inputs, self.encoder = inputs, None
        if inputs is None:
            self.encoder = (TokenEncoder(spec.vocab_size, d) if spec.is_tokens
                            else ContinuousEncoder(spec.d_input, d))
            lm.embed_in = None  # unused: the encoder gives the input vectors
        elif not spec.is_tokens:
            raise ValueError(f"task {spec.name!r} is continuous; an LMInputMap maps token ids")
        self.lm = lm
        n_out = 1 if spec.is_regression else spec.num_classes
        self.pair = spec.pair
        self.head = (PairClassifierHead if spec.pair else ClassifierHead)(d, n_out, pooling, head)

    def embed(self, inputs: torch.Tensor, valid: Optional[torch.Tensor] = None,
              masked: Optional[torch.Tensor] = None):
        """Input vectors (B, L', d) and their valid mask (B, L') (None stays None when L' = L)."""
        if self.inputs is None:
            return self.encoder(inputs, masked), valid
        ids, valid = self.inputs(inputs, valid)
        return self.lm.embed_in(ids), valid

    def forward(self, inputs: torch.Tensor, valid: Optional[torch.Tensor] = None,
                masked: Optional[torch.Tensor] = None, *, inputs2: Optional[torch.Tensor] = None,
                valid2: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.pair != (inputs2 is not None):
            raise ValueError("LMClassifier: pass inputs2 (the second documents) exactly when the "
                             "task is a pair task (spec.pair)")
        if self.pair:
            inputs, valid = stack_pair(inputs, valid, inputs2, valid2)
        x, valid = self.embed(inputs, valid, masked)
        mask = None if valid is None else valid.long()
        h = self.lm(inputs_embeds=x, attention_mask=mask, use_cache=False).last_hidden_state
        return self.head(h, valid)


def lm_classifier(cfg: LMConfig, spec: TaskSpec,
                  symbols: Optional[Sequence[bytes]] = None) -> LMClassifier:
    """GPT-NeoX (pretrained or random) with its input path for `spec` and a pooled head.

    Token tasks with ``cfg.input_embedding == "lm"`` keep the LM's input embedding and map their
    ids onto its vocabulary (`symbols`: the text of ids N_SPECIAL.., default
    :func:`task_symbols`); otherwise a new encoder replaces it.
    """
    lm = load_lm(cfg)
    inputs = None
    if spec.is_tokens and cfg.input_embedding == "lm":
        inputs = task_input_map(cfg, spec, lm.config.vocab_size, symbols)
    return LMClassifier(lm, spec, cfg.pooling, inputs, head=cfg.head)
