"""`spt data prepare TASK --root DIR`: download, verify and unpack a task's official files.

Sources (nothing is downloaded at import or by the readers; only :func:`prepare_task` downloads):

- LRA release ``lra_release.gz`` (7.7 GB tar.gz, Google storage) for listops, retrieval,
  pathfinder, pathx, pathx256: only the task's folder is unpacked into ``ROOT/lra_release/``; the
  archive is kept in ``ROOT/downloads/`` so the other LRA tasks reuse it.
- Hugging Face hub (``huggingface_hub.snapshot_download``) for text (``stanfordnlp/imdb``) and
  image / scifar (``uoft-cs/cifar10``): ``plain_text/{train,test}-*.parquet`` into ``ROOT/imdb/`` or
  ``ROOT/cifar10/``.
- Speech Commands ``speech_commands_v0.02.tar.gz`` (2.3 GB, download.tensorflow.org) unpacked to
  ``ROOT/speech_commands/``; BIDMC32 ``{RR,HR,SpO2}_{TRAIN,TEST}.ts`` (zenodo) into ``ROOT/bidmc/``.

Safe to interrupt and re-run: a download streams into ``NAME.part`` (resumed with an HTTP range
request when the server allows) and is renamed only once its size matches the server's; archives
unpack into a temporary folder renamed into place at the end; a task is marked done in
``ROOT/.spt_prepared/TASK.json`` only after verification. No official checksums are published for
these files, so verification is: the full size arrived, the archive reads to its end (gzip CRC),
and the task's reader reads every file (so a truncated parquet or .ts file is caught here).
``source=`` replaces the download URL with another URL, or names a local archive you already
have (unpacked from where it is, not copied).
"""
from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
import urllib.request
import uuid
from pathlib import Path, PurePosixPath
from typing import Callable, Optional

LRA_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
SPEECH_URL = "http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz"
BIDMC_URLS = {"RR": "https://zenodo.org/record/4001463/files/",
              "HR": "https://zenodo.org/record/4001456/files/",
              "SpO2": "https://zenodo.org/record/4001464/files/"}
HUB = {"text": ("stanfordnlp/imdb", "imdb"), "image": ("uoft-cs/cifar10", "cifar10"),
       "scifar": ("uoft-cs/cifar10", "cifar10")}
HUB_PATTERNS = ["plain_text/train-*.parquet", "plain_text/test-*.parquet"]
# task -> folder inside the LRA release (relative to its top folder lra_release/)
LRA_MEMBERS = {"listops": "listops-1000", "retrieval": "tsv_data",
               "pathfinder": "pathfinder32/curv_contour_length_14",
               "pathx": "pathfinder128/curv_contour_length_14",
               "pathx256": "pathfinder256/curv_contour_length_14"}


class PrepareError(RuntimeError):
    """A download or unpack failed; the message says what happened and that re-running resumes."""


def _open(url: str, offset: int = 0):
    req = urllib.request.Request(url, headers={"User-Agent": "spt-data-prepare"})
    if offset:
        req.add_header("Range", f"bytes={offset}-")
    return urllib.request.urlopen(req, timeout=60)


def download(url: str, dest: Path, opener: Callable = _open, log: Callable = print) -> Path:
    """Fetch `url` (or copy a local path) to `dest`, via ``dest.part``; resumes a partial file.

    The final name appears only when the byte count matches the server's Content-Length.
    """
    from tqdm.auto import tqdm

    dest = Path(dest)
    if dest.is_file():
        log(f"have {dest}")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    if Path(url).is_file():  # a local file the user already has
        log(f"copying {url} -> {dest}")
        part = dest.with_name(dest.name + ".part")
        shutil.copyfile(url, part)
        os.replace(part, dest)
        return dest
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    try:
        resp = opener(url, have)
    except OSError as e:
        raise PrepareError(f"cannot download {url}: {e}. Check the network and re-run.") from None
    with resp:
        status = getattr(resp, "status", 200)
        if have and status != 206:  # the server ignored the range request: start over
            have = 0
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        log(f"downloading {url} -> {dest}" + (f" (resuming at {have} bytes)" if have else ""))
        with open(part, "ab" if have else "wb") as f, \
                tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=dest.name,
                     mininterval=1.0) as bar:
            try:
                while chunk := resp.read(1 << 20):
                    f.write(chunk)
                    bar.update(len(chunk))
            except OSError as e:
                raise PrepareError(f"download of {url} interrupted ({e}); re-run to resume "
                                   f"from {part}") from None
    got = part.stat().st_size
    if total is not None and got != total:
        raise PrepareError(f"download of {url} incomplete ({got} of {total} bytes); re-run to "
                           f"resume from {part}")
    os.replace(part, dest)
    return dest


def _safe_relpath(name: str) -> Optional[PurePosixPath]:
    """The member path without './' and a leading 'lra_release/', or None if unsafe."""
    p = PurePosixPath(name)
    parts = [x for x in p.parts if x not in (".", "")]
    if p.is_absolute() or ".." in parts:
        return None
    while parts and parts[0] == "lra_release":
        parts = parts[1:]
    return PurePosixPath(*parts) if parts else None


def unpack(archive: Path, dest: Path, wanted: Optional[str] = None, log: Callable = print) -> Path:
    """Unpack the tar(.gz) `archive` (only the folder `wanted`, if given) into `dest`.

    Files go to a temporary folder beside `dest` first; `dest/wanted` (or `dest`) is renamed into
    place only after the whole archive was read without error. Returns the unpacked folder.
    """
    from tqdm.auto import tqdm

    dest = Path(dest)
    target = dest / wanted if wanted else dest
    if target.exists():
        log(f"have {target}")
        return target
    tmp = dest.parent / f".{dest.name}.unpack-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    found = 0
    try:
        with tarfile.open(archive, "r:*") as tar, \
                tqdm(desc=f"unpacking {archive.name}", unit=" files", mininterval=2.0) as bar:
            for m in tar:
                rel = _safe_relpath(m.name)
                if rel is None or (wanted and not str(rel).startswith(wanted.rstrip("/") + "/")):
                    continue
                if m.isdir():
                    (tmp / rel).mkdir(parents=True, exist_ok=True)
                elif m.isfile():
                    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(m) as src, open(tmp / rel, "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    found += 1
                    bar.update(1)
    except (tarfile.TarError, EOFError, OSError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrepareError(f"{archive} is corrupt or truncated ({e}); delete it and re-run") \
            from None
    if not found:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrepareError(f"{archive} holds no files under {wanted or '/'}")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp / wanted if wanted else tmp, target)
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"unpacked {found} files into {target}")
    return target


def hub_snapshot(repo_id: str, local_dir: Path, patterns: list[str]) -> Path:
    """Download the files of a hub data set matching `patterns` into `local_dir`."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=repo_id, repo_type="dataset", allow_patterns=patterns,
                                  local_dir=str(local_dir)))


def prepare_task(name: str, root, source: Optional[str] = None, *,
                 hub_fetch: Callable = hub_snapshot, opener: Callable = _open,
                 log: Callable = print, **options) -> dict:
    """Download, unpack and verify task `name` under `root`; returns what `spt data info` says.

    source  : another URL or local file for the archive (for bidmc: a URL prefix or a folder
              holding the .ts files); hub tasks ignore it.
    options : passed to the task's loader for verification (e.g. target="RR").
    """
    from .tasks import TASK_NAMES, describe_task

    if name not in TASK_NAMES:
        raise ValueError(f"unknown task {name!r}; choose from {', '.join(TASK_NAMES)}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    local = Path(source) if source and Path(source).is_file() else None  # unpack it in place
    if name in LRA_MEMBERS:
        archive = local or download(source or LRA_URL, root / "downloads" / "lra_release.gz",
                                    opener, log)
        unpack(archive, root / "lra_release", LRA_MEMBERS[name], log)
    elif name in HUB:
        repo, folder = HUB[name]
        log(f"fetching {repo} ({', '.join(HUB_PATTERNS)}) from the Hugging Face hub -> "
            f"{root / folder}")
        hub_fetch(repo, root / folder, HUB_PATTERNS)
    elif name == "speech":
        archive = local or download(source or SPEECH_URL,
                                    root / "downloads" / "speech_commands_v0.02.tar.gz", opener,
                                    log)
        unpack(archive, root / "speech_commands", None, log)
    elif name == "bidmc":
        for target in BIDMC_URLS:
            for split in ("TRAIN", "TEST"):
                fname = f"BIDMC32{target}_{split}.ts"
                base = source or BIDMC_URLS[target]
                url = (str(Path(base) / fname) if Path(base).is_dir()
                       else base.rstrip("/") + "/" + fname)
                download(url, root / "bidmc" / fname, opener, log)
    log(f"verifying {name} ...")
    if name == "bidmc" and "target" not in options:
        for target in BIDMC_URLS:  # read all three, report the default (HR)
            describe_task(name, root, target=target)
    info = describe_task(name, root, **options)
    marks = root / ".spt_prepared"
    marks.mkdir(exist_ok=True)
    (marks / f"{name}.json").write_text(json.dumps(info, indent=1))
    log(f"{name}: ready in {root} ({time.time() - t0:.0f} s): "
        + ", ".join(f"{k} {v}" for k, v in info["splits"].items()))
    return info
