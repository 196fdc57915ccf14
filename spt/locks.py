"""Lock files: at most one process at a time holds each, and every process can read who does.

spt locks three things this way: a study cell being computed (``<cell>.claim`` beside its result
file, so that two runs into one results folder divide the cells), a training run folder being
trained (``<run>/run.lock``), and an executed notebook's name.

A lock is a small JSON file ``{"host", "pid", "since"}``. :func:`acquire` writes it under a
temporary name and hard-links it into place: the link fails when the lock exists (atomic, also
on NFS), and a lock is never seen empty. While a process holds locks, a background thread
refreshes their modification times every :data:`REFRESH` seconds.

**When a lock is stale** (the next process takes it over, and says so):

* it has not been refreshed for :data:`STALE_AFTER` seconds, on any host (a live holder
  refreshes it every :data:`REFRESH` seconds, so only a dead or frozen one lets it age; on another
  host this is the only sign spt can read);
* its holder is on this host and that pid is no longer running, or runs a process that started
  after the lock was written (the pid was reused: a restarted container numbers its processes
  from 1 again);
* it names this very process, which does not hold it (an earlier process with the same pid wrote
  it).
* it is empty or unreadable and older than :data:`UNREADABLE_AFTER` seconds (spt never writes
  one; another program or a full disk did).

A lock that is not stale can be removed by hand (:func:`describe` says which file and whose) when
its holder is known to be gone.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Optional

from .atomic import current_umask, free_bytes, output_error

REFRESH = 60.0  # seconds between a holder's refreshes of its locks
STALE_AFTER = 600.0  # seconds without a refresh after which another host's lock is stale
UNREADABLE_AFTER = 60.0  # seconds after which an empty or unreadable lock is stale

_held: set[Path] = set()
_held_lock = threading.Lock()
_refresher: Optional[threading.Thread] = None


def _me() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def holder(path) -> Optional[dict]:
    """The lock's content (host, pid, since) plus its age in seconds ("age": since the last
    refresh); None when there is no lock; {"unreadable": True, "age": ...} for an empty or
    unreadable one."""
    path = Path(path)
    try:
        age = time.time() - path.stat().st_mtime
        who = json.loads(path.read_text())
        if not isinstance(who, dict) or "host" not in who or "pid" not in who:
            raise ValueError("not a lock")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        try:
            return {"unreadable": True, "age": time.time() - path.stat().st_mtime}
        except FileNotFoundError:
            return None
    return {**who, "age": age}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    except (OverflowError, ValueError):
        return False
    return True


def _started(pid: int) -> Optional[float]:
    """When process `pid` started (seconds since the epoch, to about a second), where /proc says;
    else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start time, in clock ticks
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def stale(who: Optional[dict], path=None) -> bool:
    """True when the lock described by ``holder(path)`` may be taken over (the module's rule).
    path: the lock file, so that a lock naming this process counts as held only when this
    process took it."""
    if who is None:
        return True
    if who.get("unreadable"):
        return who["age"] > UNREADABLE_AFTER
    if who["age"] > STALE_AFTER:
        return True
    if who["host"] != socket.gethostname():
        return False
    try:
        pid = int(who["pid"])
    except (TypeError, ValueError):
        return True
    if pid == os.getpid():
        with _held_lock:
            return path is None or Path(path) not in _held
    if not _alive(pid):
        return True
    started, since = _started(pid), who.get("since")
    # the clock-tick start time and the boot time are rounded: 2 s of slack
    return started is not None and isinstance(since, (int, float)) and started > since + 2


def _ago(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h"


def describe(path) -> str:
    """Who holds the lock, in words: ``host h, pid 123, since 5 min, refreshed 20 s ago``."""
    who = holder(path)
    if who is None:
        return f"{path}: free"
    if who.get("unreadable"):
        return (f"{path}: empty or unreadable, {_ago(who['age'])} old (taken over after "
                f"{UNREADABLE_AFTER:.0f} s)")
    since = who.get("since")
    held = f", held for {_ago(time.time() - since)}" if isinstance(since, (int, float)) else ""
    rule = ("taken over when that process ends or the lock is not refreshed for "
            f"{STALE_AFTER / 60:.0f} min" if who["host"] == socket.gethostname() else
            f"taken over when not refreshed for {STALE_AFTER / 60:.0f} min; delete it if that "
            f"run is gone")
    return (f"{path}: host {who['host']}, pid {who['pid']}{held}, refreshed "
            f"{_ago(who['age'])} ago ({rule})")


def acquire(path) -> bool:
    """Take the lock at `path` (creating its folder); False when another live process holds it.
    A stale lock is taken over."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({**_me(), "since": time.time()}))
    except OSError as e:
        free = free_bytes(path.parent)
        tmp.unlink(missing_ok=True)
        raise (output_error(e, path, free) or e) from None
    try:
        os.chmod(tmp, 0o666 & ~current_umask())
        for _ in range(3):
            try:
                os.link(tmp, path)
            except FileExistsError:
                who = holder(path)
                if not stale(who, path):
                    return False
                now = holder(path)  # take a stale lock over only if it is still the one judged
                if now is not None and _same_lock(now, who):
                    path.unlink(missing_ok=True)
                continue
            _hold(path)
            return True
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _same_lock(a: dict, b: Optional[dict]) -> bool:
    return b is not None and {k: v for k, v in a.items() if k != "age"} == \
        {k: v for k, v in b.items() if k != "age"}


def mine(path) -> bool:
    """True when this process holds the lock at `path`."""
    who = holder(path)
    return bool(who) and not who.get("unreadable") and \
        (who["host"], who["pid"]) == (_me()["host"], _me()["pid"])


def release(path) -> None:
    """Give the lock back. A lock another process took over meanwhile is left to it."""
    path = Path(path)
    with _held_lock:
        _held.discard(path)
    if mine(path):
        path.unlink(missing_ok=True)


def refresh(path) -> None:
    """Mark the lock as alive now (its modification time), if this process still holds it."""
    if mine(path):
        try:
            os.utime(path)
        except FileNotFoundError:
            pass


def _hold(path: Path) -> None:
    global _refresher
    with _held_lock:
        _held.add(path)
        if _refresher is None or not _refresher.is_alive():
            _refresher = threading.Thread(target=_refresh_loop, daemon=True,
                                          name="spt-refresh-locks")
            _refresher.start()


def _refresh_loop() -> None:
    while True:
        time.sleep(REFRESH)
        with _held_lock:
            paths = list(_held)
        for p in paths:
            try:
                refresh(p)
            except OSError:
                pass
