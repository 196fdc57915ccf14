"""Speech Commands v0.02 (Warden 2018): 35-way classification of 1-second raw waveforms.

On disk (``ROOT/speech_commands/``, the unpacked ``speech_commands_v0.02.tar.gz``): one folder per
word holding 16-bit PCM mono 16 kHz WAV clips, ``_background_noise_/`` (not examples; ignored), and
the official split lists ``validation_list.txt`` / ``testing_list.txt`` (paths ``word/file.wav``);
every other clip is training data (84,843 / 9,981 / 11,005 clips).

Items: inputs FloatTensor (16000, 1), label () long, the index of the word in :data:`WORDS`
(sorted). A clip shorter than one second is zero-padded at the end, then the waveform in [-1, 1]
(samples / 32768) is standardised with statistics of the training clips only:
``x -> (x - mean) / (std + 1e-5)``, the same for train, val and test.

Why, and which statistics: the paper's numbers come from the authors' loader
(IdoAmos/not-from-scratch, ``src/dataloaders/datasets/sc.py``, forked from state-spaces/s4), whose
35-class raw-waveform path (``_process_all``, then ``normalize_all_data``) standardises the
padded training tensor of shape (clips, 1, 16000) channel by channel along its *last* axis, i.e.
each of the 16,000 time positions with the mean and (unbiased) std over the training clips at that
position, and applies the same per-position statistics to val and test. That is the default here,
``standardise="position"``. ``standardise="global"`` uses one mean and std over every training
sample instead: what the same function does per channel when it is handed channels last (its MFCC
path transposes first), which for one audio channel is a single pair.

Clips are decoded once into an int16 cache; the statistics are computed in the same build over the
training rows only, in chunks of clips (exact integer sums), and stored beside the audio (the
per-position arrays) and in the cache's extra metadata (the global pair). A clip that is not
16-bit mono 16 kHz PCM, a folder that is not one of the 35 words, or a split list naming a missing
clip is an error naming the file.
"""
from __future__ import annotations

import wave
from pathlib import Path
from typing import Optional

import numpy as np

from .cache import cached_arrays
from .datasets import ArrayDataset
from .errors import DataFormatError, DataMissingError
from .source_files import text_lines
from .task import SPLITS, Task, TaskSpec, split_task

WORDS = ("backward", "bed", "bird", "cat", "dog", "down", "eight", "five", "follow", "forward",
         "four", "go", "happy", "house", "learn", "left", "marvin", "nine", "no", "off", "on",
         "one", "right", "seven", "sheila", "six", "stop", "three", "tree", "two", "up",
         "visual", "wow", "yes", "zero")
SAMPLE_RATE = 16000
SPEECH_DIR = Path("speech_commands")
IGNORED = {"_background_noise_"}
FORMAT_VERSION = 3  # of the cache, built from clips of at least one sample only
STANDARDISE = ("position", "global")
EPS = 1e-5           # the authors' (x - mean) / (std + 1e-5)
FULL_SCALE = 32768.0  # int16 -> [-1, 1]


def read_wav(path: Path, max_len: int = SAMPLE_RATE) -> np.ndarray:
    """(n,) int16 samples (n <= max_len) of a 16-bit mono 16 kHz PCM WAV; DataFormatError else."""
    try:
        with wave.open(str(path), "rb") as w:
            fmt = (w.getnchannels(), w.getsampwidth(), w.getframerate())
            if fmt != (1, 2, SAMPLE_RATE):
                raise DataFormatError(f"{path}: expected mono 16-bit {SAMPLE_RATE} Hz PCM, got "
                                      f"{fmt[0]} channel(s), {8 * fmt[1]}-bit, {fmt[2]} Hz")
            n = w.getnframes()
            data = w.readframes(n)
    except (wave.Error, EOFError, OSError) as e:
        raise DataFormatError(f"{path}: not a readable WAV file ({e})") from None
    if len(data) != 2 * n:
        raise DataFormatError(f"{path}: truncated WAV ({len(data) // 2} of {n} samples)")
    if n == 0:
        raise DataFormatError(f"{path}: the clip holds no samples (0 time steps); unpack "
                              f"speech_commands_v0.02.tar.gz again (`spt data prepare speech`)")
    if n > max_len:
        raise DataFormatError(f"{path}: {n} samples, longer than {max_len}")
    return np.frombuffer(data, dtype="<i2")


def waveform_stats(x: np.ndarray, n_train: int, chunk: int = 256) -> dict:
    """Mean and unbiased std of the first `n_train` clips of int16 x (N, L, 1), in [-1, 1] units.

    returns {"position_mean", "position_std": (L,) float64 over the clips at each position;
             "mean", "std": floats over all their samples; "n_clips": n_train}.
    Sums are exact int64, accumulated `chunk` clips at a time (tens of MB for any cache size).
    Fewer than two clips give std 0 (the statistic is undefined; inputs stay finite).
    """
    length = x.shape[1]
    s1, s2 = np.zeros(length, np.int64), np.zeros(length, np.int64)
    for i in range(0, n_train, chunk):
        part = np.asarray(x[i:min(i + chunk, n_train), :, 0], dtype=np.int64)
        s1 += part.sum(0)
        s2 += (part * part).sum(0)

    def moments(total1, total2, n):
        mean = total1 / max(n, 1)
        var = (total2 - total1 * mean) / max(n - 1, 1)
        return mean / FULL_SCALE, np.sqrt(np.maximum(var, 0.0)) / FULL_SCALE

    pos_mean, pos_std = moments(s1.astype(np.float64), s2.astype(np.float64), n_train)
    mean, std = moments(float(s1.sum()), float(s2.sum()), n_train * length)
    return {"position_mean": pos_mean, "position_std": pos_std, "mean": float(mean),
            "std": float(std), "n_clips": n_train}


def _read_list(path: Path, data_dir: Path) -> set[str]:
    if not path.is_file():
        raise DataMissingError(f"{path} not found (the official split list); is {data_dir} an "
                               f"unpacked speech_commands_v0.02.tar.gz?")
    entries = set()
    hint = "Unpack speech_commands_v0.02.tar.gz again (`spt data prepare speech`)."
    for lineno, line in text_lines(path, hint):
        rel = line.strip()
        if not rel:
            continue
        if not (data_dir / rel).is_file():
            raise DataFormatError(f"{path}:{lineno}: lists {rel}, which does not exist")
        entries.add(rel)
    return entries


def _find_clips(root, data_dir: Path) -> tuple[dict, list[Path]]:
    """The clips of `data_dir` by official split, and the source files the cache depends on.

    returns ({"train" | "val" | "test": [(wav path, label index in WORDS)]}, [split lists and
    word folders]). A missing folder or split list, a listed clip that is missing, or a folder
    that is not one of the 35 words raises DataMissingError / DataFormatError.
    """
    if not data_dir.is_dir():
        raise DataMissingError(f"Speech Commands folder {data_dir} not found. Run `spt data "
                               f"prepare speech --root {root}`.")
    val = _read_list(data_dir / "validation_list.txt", data_dir)
    test = _read_list(data_dir / "testing_list.txt", data_dir)
    folders = sorted(p for p in data_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    unknown = [p.name for p in folders if p.name not in WORDS and p.name not in IGNORED]
    if unknown:
        raise DataFormatError(f"{data_dir}: folder(s) {unknown} are not Speech Commands v0.02 "
                              f"words; expected {len(WORDS)} words")
    clips = {"train": [], "val": [], "test": []}
    for p in folders:
        if p.name in IGNORED:
            continue
        for f in sorted(p.glob("*.wav")):
            rel = f"{p.name}/{f.name}"
            split = "val" if rel in val else "test" if rel in test else "train"
            clips[split].append((f, WORDS.index(p.name)))
    sources = [data_dir / "validation_list.txt", data_dir / "testing_list.txt"] + folders
    return clips, sources


def _decode_clips(w, clips: dict) -> dict:
    """Fill the cache writer `w`: "audio" (N, 16000, 1) int16 (train, val, test clips in order,
    zero-padded to one second), "labels" (N,) int64, and the training clips' per-position
    "position_mean" / "position_std" (16000,); returns the split counts and the global stats."""
    from tqdm.auto import tqdm

    order = clips["train"] + clips["val"] + clips["test"]
    x = w.array("audio", (len(order), SAMPLE_RATE, 1), np.int16)
    for i, (f, _) in enumerate(tqdm(order, desc="decoding speech commands", mininterval=2.0)):
        s = read_wav(f)
        x[i, :len(s), 0] = s
        x[i, len(s):, 0] = 0
    w.put("labels", np.asarray([y for _, y in order], np.int64))
    stats = waveform_stats(x, len(clips["train"]))
    w.put("position_mean", stats.pop("position_mean"))
    w.put("position_std", stats.pop("position_std"))
    return {"counts": {k: len(v) for k, v in clips.items()}, "stats": stats}


def _shift_scale(arrays: dict, extra: dict, standardise: str):
    """ArrayDataset's (shift, scale) for int16 samples s: (s - shift) / scale equals
    (s / 32768 - mean) / (std + eps). "position": (16000, 1) arrays; "global": floats."""
    if standardise == "position":
        mean = np.asarray(arrays["position_mean"])[:, None]
        std = np.asarray(arrays["position_std"])[:, None]
    else:
        mean, std = extra["stats"]["mean"], extra["stats"]["std"]
    return FULL_SCALE * mean, FULL_SCALE * (std + EPS)


def load_speech(root, folder: Optional[Path] = None, standardise: str = "position") -> Task:
    """Speech Commands v0.02, official splits; inputs (16000, 1) float, 35 classes.

    standardise : "position" (the authors' code: each time position with the training clips'
                  mean / std there) or "global" (one mean / std over all training samples).
    """
    if standardise not in STANDARDISE:
        raise ValueError(f"standardise must be one of {STANDARDISE}, got {standardise!r}")
    data_dir = Path(folder) if folder is not None else Path(root) / SPEECH_DIR
    clips, sources = _find_clips(root, data_dir)
    arrays, extra = cached_arrays(data_dir, "speech", FORMAT_VERSION, sources,
                                  lambda w: _decode_clips(w, clips))
    c = extra["counts"]
    bounds = np.cumsum([0, c["train"], c["val"], c["test"]])
    shift, scale = _shift_scale(arrays, extra, standardise)
    ds = [ArrayDataset(arrays["audio"], arrays["labels"], shift, scale,
                       np.arange(bounds[i], bounds[i + 1])) for i in range(3)]
    spec = TaskSpec(name="speech", seq_len=SAMPLE_RATE, num_classes=len(WORDS), d_input=1,
                    mask_ratio=0.25, description="Speech Commands v0.02: 1 s raw 16 kHz waveforms "
                    "(16000 samples), 35 words, official splits")
    why = {"train": f"no clip in the word folders of {data_dir} is left once the clips of "
                    f"validation_list.txt and testing_list.txt are taken out",
           "val": f"{data_dir / 'validation_list.txt'} lists no clips",
           "test": f"{data_dir / 'testing_list.txt'} lists no clips"}
    return split_task(spec, dict(zip(SPLITS, ds)), why,
                      f"rerun `spt data prepare speech --root {root or 'ROOT'}`")
