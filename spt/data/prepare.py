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

``source=`` (``--source``) takes the files from elsewhere, for every task: another URL or a local
copy of the archive for the LRA tasks and speech (unpacked from where it is, not copied), a URL
prefix or a folder of the six ``.ts`` files for bidmc, a folder of the ``{train,test}-*.parquet``
files for the hub tasks. When a source cannot be reached (offline, blocked, gone) the error is one
line naming the task, what could not be reached, and the file to fetch by hand for ``--source``.
"""
from __future__ import annotations

import json
import shutil
import tarfile
import time
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Callable, Optional

from ..atomic import atomic_dir, atomic_write

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


class Unreachable(PrepareError):
    """A URL or the hub could not be reached (offline, DNS, refused, HTTP error).

    what : the URL or hub data set; reason : the error, on one line. prepare_task turns it into
    the task's one-line message saying how to pass a file fetched by hand with ``--source``.
    """

    def __init__(self, what: str, reason: str):
        super().__init__(f"cannot reach {what} ({reason}); check the network and re-run")
        self.what, self.reason = what, reason


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


def _open(url: str, offset: int = 0):
    req = urllib.request.Request(url, headers={"User-Agent": "spt-data-prepare"})
    if offset:
        req.add_header("Range", f"bytes={offset}-")
    return urllib.request.urlopen(req, timeout=60)


def download(url: str, dest: Path, opener: Optional[Callable] = None,
             log: Callable = print) -> Path:
    """Fetch `url` (or copy a local path) to `dest`, via ``dest.part``; resumes a partial file.

    The final name appears only when the byte count matches the server's Content-Length.
    opener(url, offset) -> response (default: urllib). Raises :class:`Unreachable` if the
    server cannot be reached, PrepareError if the download breaks off (re-run to resume).
    """
    from tqdm.auto import tqdm

    opener = opener or _open
    dest = Path(dest)
    if dest.is_file():
        log(f"have {dest}")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    if Path(url).is_file():  # a local file the user already has
        log(f"copying {url} -> {dest}")
        return atomic_write(dest, lambda tmp: shutil.copyfile(url, tmp))
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    try:
        resp = opener(url, have)
    except OSError as e:  # urllib's URLError / HTTPError, socket errors, timeouts
        inner = getattr(e, "reason", None)  # URLError wraps the socket error
        raise Unreachable(url, _one_line(inner if isinstance(inner, OSError) else e)) from None
    except ValueError as e:  # urllib: "unknown url type"
        raise PrepareError(f"{url} is neither a local file nor a URL ({e})") from None
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
    part.replace(dest)
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

    Files go to a temporary folder beside their final place first; `dest/wanted` (or `dest`) is
    renamed into place only after the whole archive was read without error. Returns the unpacked
    folder.
    """
    from tqdm.auto import tqdm

    dest = Path(dest)
    target = dest / wanted if wanted else dest
    if target.exists():
        log(f"have {target}")
        return target
    prefix = wanted.rstrip("/") if wanted else None
    found = 0

    def fill(folder: Path) -> None:
        nonlocal found
        try:
            with tarfile.open(archive, "r:*") as tar, \
                    tqdm(desc=f"unpacking {archive.name}", unit=" files", mininterval=2.0) as bar:
                for m in tar:
                    rel = _safe_relpath(m.name)
                    if rel is None or (prefix and not str(rel).startswith(prefix + "/")):
                        continue
                    out = folder / (rel.relative_to(prefix) if prefix else rel)
                    if m.isdir():
                        out.mkdir(parents=True, exist_ok=True)
                    elif m.isfile():
                        out.parent.mkdir(parents=True, exist_ok=True)
                        with tar.extractfile(m) as src, open(out, "wb") as f:
                            shutil.copyfileobj(src, f, 1 << 20)
                        found += 1
                        bar.update(1)
        except (tarfile.TarError, EOFError, OSError) as e:
            raise PrepareError(f"{archive} is corrupt or truncated ({e}); delete it and re-run") \
                from None
        if not found:
            raise PrepareError(f"{archive} holds no files under {wanted or '/'}")

    atomic_dir(target, fill)
    log(f"unpacked {found} files into {target}")
    return target


def hub_snapshot(repo_id: str, local_dir: Path, patterns: list[str]) -> Path:
    """Download the files of a hub data set matching `patterns` into `local_dir`.

    Raises :class:`Unreachable` when the hub cannot be reached (no network, HF_HUB_OFFLINE=1,
    no such repo) instead of huggingface_hub's long tracebacks.
    """
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.utils import HfHubHTTPError, LocalEntryNotFoundError

    # offline / no such repo / HTTP status, and the network errors of the hub's HTTP client
    errors: tuple = (LocalEntryNotFoundError, HfHubHTTPError, ConnectionError, TimeoutError)
    try:
        import httpx
        errors += (httpx.HTTPError,)
    except ImportError:
        pass
    try:
        return Path(huggingface_hub.snapshot_download(
            repo_id=repo_id, repo_type="dataset", allow_patterns=patterns,
            local_dir=str(local_dir)))
    except errors as e:
        if constants.HF_HUB_OFFLINE:
            reason = "HF_HUB_OFFLINE is set; unset it to download"
        else:
            reason = _one_line(e.__cause__ or e)
        raise Unreachable(f"the Hugging Face hub (dataset {repo_id})", reason) from None


def _by_hand(name: str) -> tuple[str, str]:
    """(what to fetch by hand for task `name`, the --source placeholder)."""
    if name in LRA_MEMBERS:
        return f"download {LRA_URL} (7.7 GB)", "PATH/lra_release.gz"
    if name == "speech":
        return f"download {SPEECH_URL} (2.3 GB)", "PATH/speech_commands_v0.02.tar.gz"
    if name == "bidmc":
        records = ", ".join(u.rstrip("/").split("/")[-2] for u in BIDMC_URLS.values())
        return (f"download BIDMC32{{RR,HR,SpO2}}_{{TRAIN,TEST}}.ts (zenodo records {records}) "
                f"into one folder", "FOLDER")
    repo, _ = HUB[name]
    return (f"download plain_text/{{train,test}}-*.parquet from https://huggingface.co/datasets/"
            f"{repo} into one folder", "FOLDER")


def _check_source(name: str, source: Optional[str]) -> None:
    """PrepareError unless `source` is a URL or the kind of local path task `name` takes."""
    if not source or ("://" in source and name not in HUB):
        return
    p, fetch = Path(source), _by_hand(name)[0]
    if name in HUB and not p.is_dir():
        raise PrepareError(f"prepare {name}: --source {source} must be a local folder ({fetch})")
    if not p.exists():
        raise PrepareError(f"prepare {name}: --source {source}: no such file or folder (give a "
                           f"URL or a local path)")
    if name == "bidmc" and not p.is_dir():
        raise PrepareError(f"prepare {name}: --source {source} must be a folder or a URL prefix "
                           f"({fetch})")
    if name != "bidmc" and name not in HUB and not p.is_file():
        raise PrepareError(f"prepare {name}: --source {source} must be the archive file or a URL, "
                           f"not a folder ({fetch})")


def _parquet_files(folder: Path) -> dict[str, list[Path]]:
    """{split: the {split}-*.parquet files} in `folder` or its plain_text/ subfolder."""
    for d in (folder / "plain_text", folder):
        found = {s: sorted(d.glob(f"{s}-*.parquet")) for s in ("train", "test")}
        if all(found.values()):
            return found
    return {}


def copy_parquet(source: Path, dest: Path, log: Callable = print) -> Path:
    """Copy the {train,test}-*.parquet files of `source` (or source/plain_text) into
    ``dest/plain_text``, each atomically; files already there with the same size are kept."""
    found = _parquet_files(Path(source))
    if not found:
        raise PrepareError(f"{source} holds no train-*.parquet and test-*.parquet files (directly "
                           f"or under plain_text/)")
    out = Path(dest) / "plain_text"
    for src in found["train"] + found["test"]:
        target = out / src.name
        if target.is_file() and target.stat().st_size == src.stat().st_size:
            log(f"have {target}")
            continue
        log(f"copying {src} -> {target}")
        atomic_write(target, lambda tmp, src=src: shutil.copyfile(src, tmp))
    return Path(dest)


def prepare_task(name: str, root, source: Optional[str] = None, *,
                 hub_fetch: Optional[Callable] = None, opener: Optional[Callable] = None,
                 log: Callable = print, **options) -> dict:
    """Download, unpack and verify task `name` under `root`; returns what `spt data info` says.

    source    : where to take the files from instead of the official URL: another URL or a local
                copy of the archive (LRA tasks, speech); a URL prefix or a folder of the .ts files
                (bidmc); a folder of the {train,test}-*.parquet files (text, image, scifar).
    hub_fetch : (repo_id, local_dir, patterns) -> path; default :func:`hub_snapshot`.
    opener    : (url, offset) -> response; default urllib.
    options   : passed to the task's loader for verification (e.g. target="RR").
    Raises PrepareError; when a source cannot be reached its message is one line naming the task,
    what could not be reached and how to pass a file fetched by hand with ``--source``.
    """
    from .registry import TASK_NAMES

    if name not in TASK_NAMES:
        raise ValueError(f"unknown task {name!r}; choose from {', '.join(TASK_NAMES)}")
    _check_source(name, source)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    try:
        return _prepare(name, root, source, hub_fetch or hub_snapshot, opener or _open, log,
                        options)
    except Unreachable as e:
        fetch, placeholder = _by_hand(name)
        raise PrepareError(
            f"prepare {name}: cannot reach {e.what} ({e.reason}). Re-run when online (a partial "
            f"download resumes), or {fetch} by hand and pass it: spt data prepare {name} --root "
            f"{root} --source {placeholder}") from None


def _prepare(name: str, root: Path, source: Optional[str], hub_fetch: Callable, opener: Callable,
             log: Callable, options: dict) -> dict:
    from .registry import describe_task

    t0 = time.time()
    local = Path(source) if source and Path(source).is_file() else None  # unpack it in place
    if name in LRA_MEMBERS:
        archive = local or download(source or LRA_URL, root / "downloads" / "lra_release.gz",
                                    opener, log)
        unpack(archive, root / "lra_release", LRA_MEMBERS[name], log)
    elif name in HUB:
        repo, folder = HUB[name]
        if source:
            copy_parquet(Path(source), root / folder, log)
        elif _parquet_files(root / folder):
            log(f"have {root / folder / 'plain_text'}")
        else:
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
                if Path(base).is_dir():
                    url = str(Path(base) / fname)
                    if not Path(url).is_file() and not (root / "bidmc" / fname).is_file():
                        raise PrepareError(f"prepare bidmc: --source folder {base} lacks {fname} "
                                           f"({_by_hand(name)[0]})")
                else:
                    url = base.rstrip("/") + "/" + fname
                download(url, root / "bidmc" / fname, opener, log)
    log(f"verifying {name} ...")
    if name == "bidmc" and "target" not in options:
        for target in BIDMC_URLS:  # read all three, report the default (HR)
            describe_task(name, root, target=target)
    info = describe_task(name, root, **options)
    atomic_write(root / ".spt_prepared" / f"{name}.json",
                 lambda tmp: tmp.write_text(json.dumps(info, indent=1)))
    log(f"{name}: ready in {root} ({time.time() - t0:.0f} s): "
        + ", ".join(f"{k} {v}" for k, v in info["splits"].items()))
    return info
