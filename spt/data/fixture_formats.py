"""The file formats the fixtures of :mod:`spt.data.fixtures` are written in, and their filler text.

    prose(rng, 5000)                     # English-looking text of >= 5,000 UTF-8 bytes
    png_bytes(img)                       # img (H, W) or (H, W, 3) uint8 -> PNG file bytes
    write_parquet(path, table)           # a pyarrow table as a parquet file
    hub_schema(fields, features)         # an arrow schema with the hub's ``huggingface`` metadata
    write_wav(path, samples)             # (n,) int16 -> 16-bit mono 16 kHz PCM WAV
    ts_text(name, x, y)                  # x (N, L, C), y (N,) -> a Monash TSER .ts file's text

Each follows the format's own conventions (the files the official releases ship), not what spt's
readers happen to accept.
"""
from __future__ import annotations

import io
import json
import wave
from pathlib import Path

import numpy as np

_WORDS = ("the model results show that we propose a method for parsing translation corpus "
          "sentence language data training evaluation baseline features grammar semantic "
          "annotation word alignment lexical dependency tree approach system performance "
          "film movie story acting plot director scene character ending great awful boring "
          "brilliant funny script camera music cast").split()
_EXTRAS = ("café", "naïve", "Pokémon", "déjà vu", "—", "…", "Zoë", "🎬", "it's", "don't",
           '"so"')


def prose(rng: np.random.Generator, n_bytes: int, extras: bool = True,
          paragraph: str = "") -> str:
    """English-looking text of at least n_bytes UTF-8 bytes: sentences, `paragraph` between
    every few of them; with `extras`, now and then a multi-byte character, apostrophe or quote."""
    parts, size = [], 0
    while size < n_bytes:
        words = [_WORDS[i] for i in rng.integers(0, len(_WORDS), int(rng.integers(6, 16)))]
        u = rng.random(4)
        if extras and u[0] < 0.3:
            words.insert(int(u[1] * len(words)), _EXTRAS[int(u[2] * len(_EXTRAS))])
        sentence = " ".join(words).capitalize() + "..!?"[int(u[3] * 4)] + " "
        if paragraph and u[3] < 0.15:
            sentence += paragraph
        parts.append(sentence)
        size += len(sentence.encode("utf-8"))
    return "".join(parts).strip()


def png_bytes(array: np.ndarray) -> bytes:
    """The PNG file of a uint8 image array (H, W) grayscale or (H, W, 3) RGB."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def write_parquet(path: Path, table) -> None:
    """Write the pyarrow `table` to `path` (parent folders created)."""
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def hub_schema(fields: list, features: dict):
    """An arrow schema carrying the ``huggingface`` features metadata the hub's files have."""
    import pyarrow as pa

    meta = {"info": {"features": features}}
    return pa.schema(fields, metadata={b"huggingface": json.dumps(meta).encode()})


def write_wav(path: Path, samples: np.ndarray) -> None:
    """(n,) int16 `samples` as a 16-bit mono 16 kHz PCM WAV file (parent folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.asarray(samples, "<i2").tobytes())


def ts_text(name: str, x: np.ndarray, y: np.ndarray) -> str:
    """A Monash TSER regression .ts file: x (N, L, C), y (N,)."""
    head = [f"#{name}: a generated stand-in for the BIDMC32 windows (PPG, ECG at 125 Hz); "
            "not real data.",
            f"@problemName {name}", "@timeStamps false", "@missing false", "@univariate false",
            f"@dimensions {x.shape[2]}", "@equalLength true", f"@seriesLength {x.shape[1]}",
            "@targetlabel true", "@data"]
    rows = [":".join(",".join(f"{v:.4f}" for v in x[i, :, c]) for c in range(x.shape[2]))
            + f":{y[i]:.2f}" for i in range(len(x))]
    return "\n".join(head + rows) + "\n"
