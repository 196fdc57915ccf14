"""Files and folders written whole or not at all, readable by whoever the umask allows, and the
error for a damaged file.

:func:`atomic_write` writes through a temporary file in the target's folder, fsyncs it, gives it
the mode a plain ``open(path, "w")`` would (``0o666 & ~umask``: ``tempfile.mkstemp`` makes 0600
files, which collaborators on a shared cluster could not read), and renames it over the target. An
interrupted write leaves the old file (or none), never a truncated one.

:func:`atomic_dir` does the same for a folder (a generated data set, a cache entry, a saved
model): filled beside its final place, given the mode ``mkdir`` would (``0o777 & ~umask``, where
``tempfile.mkdtemp`` makes 0700), and renamed into place.

:class:`DamagedFileError` is what the readers of spt's own files (checkpoints, result files, hub
weights) raise for a truncated or corrupt file: the message names the file and what to do.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Callable

_UMASK_LOCK = threading.Lock()


class DamagedFileError(ValueError):
    """A file spt wrote earlier cannot be read back (truncated, corrupt); the message names it and
    says what to do (delete it to recompute, resume from another copy)."""

    def __init__(self, path, message: str):
        super().__init__(message)
        self.path = Path(path)

    def __reduce__(self):  # picklable, so a worker process can hand it to its parent
        return type(self), (self.path, self.args[0])


class _WriteFault:
    """An OSError of a write, said in one line (its message) and picklable, so a worker process
    can hand it to its parent. Subclasses set the errno they stand for (CODE)."""

    CODE = 0

    def __init__(self, path, message: str):
        super().__init__(self.CODE, message)
        self.path = Path(path)

    def __str__(self):
        return self.strerror

    def __reduce__(self):
        return type(self), (self.path, self.strerror)


class DiskFullError(_WriteFault, OSError):
    """No space was left on the device while spt wrote a file; nothing was half-written."""

    CODE = errno.ENOSPC


class NotWritableError(_WriteFault, PermissionError):
    """A folder spt must write into is read-only (permissions or a read-only file system)."""

    CODE = errno.EACCES


class NotAFolderError(_WriteFault, NotADirectoryError):
    """An output folder spt must write into is a file (or lies under one)."""

    CODE = errno.ENOTDIR


FULL_BELOW = 1 << 20  # bytes free under which a failed write counts as a full disk


def free_bytes(folder: Path) -> float:
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):  # no statvfs (Windows) or no folder
        return float("inf")
    return st.f_bavail * st.f_frsize


def output_error(e: BaseException, path: Path, free: float = float("inf")):
    """The one-line error for a failed write of `path`, or None when `e` is not about the disk:
    a full device (ENOSPC / EDQUOT, or any failure with less than FULL_BELOW bytes left, since
    torch.save reports a full disk as "unexpected pos") or a read-only folder."""
    path = Path(path)
    code = getattr(e, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT) or (free < FULL_BELOW and not isinstance(
            e, (KeyboardInterrupt, SystemExit))):
        return DiskFullError(path, f"no space left on the device holding {path.parent} while "
                                   f"writing {path.name}; nothing was half-written ({path.name} "
                                   f"is as it was). Free some space, then rerun the same command "
                                   f"to resume")
    if isinstance(e, PermissionError) or code == errno.EROFS:
        return NotWritableError(path, f"cannot write {path}: {path.parent} is not writable "
                                      f"({os.strerror(code) if code else e}). Make it writable "
                                      f"or choose another output folder, then rerun the same "
                                      f"command")
    return None


def writable_dir(folder) -> Path:
    """Create `folder` (and its parents) if needed and check that files can be made in it, so a
    run fails before it computes anything; NotWritableError / DiskFullError / NotAFolderError
    (`folder`, or a folder above it, is a file) name it."""
    folder = Path(folder)
    probe = folder / f".spt-write-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except (FileExistsError, NotADirectoryError):
        file = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), folder)
        raise NotAFolderError(file, f"cannot make the folder {folder}: {file} is a file, not a "
                                    f"folder. Name a folder (it is created if missing)") from None
    except OSError as e:
        raise (output_error(e, probe, free_bytes(folder)) or e) from None
    return folder


def current_umask() -> int:
    """The process umask, read without changing it where the system allows (Linux /proc)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:  # elsewhere: set and restore at once (other threads could see the 0 briefly)
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def atomic_write(path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` to fill a temporary file beside `path`, then rename it over `path`.

    write : writes the whole content to the path it is given (it may reopen or recreate it).
    The file gets mode ``0o666 & ~umask`` and is fsynced before the rename; on any error the
    temporary file is removed and `path` is left as it was. Returns `path`.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise (output_error(e, path, free_bytes(path.parent)) or e) from None
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException as e:
        free = free_bytes(path.parent)  # before the partial file is removed
        tmp.unlink(missing_ok=True)
        disk = output_error(e, path, free)
        if disk is not None:
            raise disk from None
        raise
    _fsync_dir(path.parent)
    return path


def atomic_dir(path, fill: Callable[[Path], None], replace: bool = True) -> Path:
    """Call ``fill(tmp)`` to fill a temporary folder beside `path`, then rename it to `path`.

    fill    : writes the folder's whole content into the empty folder it is given.
    replace : what happens to an existing `path`. True: it is swapped out (renamed aside, the new
              folder renamed in, the old one deleted), so `path` is missing only between two
              renames. False: it is kept and the new folder discarded (another process finished
              the same folder first).
    The folder gets mode ``0o777 & ~umask``; its files are not fsynced one by one (a data set
    holds thousands), the rename is. On any error the temporary folder is removed and `path` is
    left as it was. Returns `path`.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as e:
        raise (output_error(e, path, free_bytes(path.parent)) or e) from None
    try:
        fill(tmp)
        os.chmod(tmp, 0o777 & ~current_umask())
        if replace:
            _swap_in(tmp, path)
        else:
            try:
                os.rename(tmp, path)
            except OSError:
                if not path.exists():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # another process made `path` first
    except BaseException as e:
        free = free_bytes(path.parent)  # before the partial folder is removed
        shutil.rmtree(tmp, ignore_errors=True)
        disk = output_error(e, path, free)
        if disk is not None:
            raise disk from None
        raise
    _fsync_dir(path.parent)
    return path


def _swap_in(tmp: Path, path: Path) -> None:
    """Rename the folder `tmp` to `path`, replacing what is there (put back if the rename fails)."""
    if not (path.exists() or path.is_symlink()):
        os.rename(tmp, path)
        return
    old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink()


def _fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable; skipped where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
