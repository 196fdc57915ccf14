"""Where a study's cells run: one at a time in this process, or each in its own spawned worker
process (:func:`spt.studies.machinery.cells.run_cells` starts them, collects what they wrote and
stops them). A worker that dies is a :class:`WorkerKilled` naming its cell; an error in a worker is
raised again here with the worker's traceback.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import torch
import xarray as xr

from ...results import write_result
from .claims import release


def _with_coords(ds: xr.Dataset, coords: dict) -> xr.Dataset:
    return ds.expand_dims({k: [v] for k, v in coords.items()})


def _run_one(cell, path: Path, run_dir: Path, threads: int | None) -> float:
    """Run one claimed cell and write its result; returns the seconds it took."""
    t0 = time.perf_counter()
    if threads is not None:
        torch.set_num_threads(threads)
    ds = cell.run(run_dir)
    ds = _with_coords(ds, cell.coords)
    write_result(ds, path, config={"cell": cell.config, "coords": cell.coords})
    return time.perf_counter() - t0


WATCH_POLL = 1.0  # seconds between a worker's looks at whether its run is still there


class WorkerKilled(RuntimeError):
    """The process computing a cell died without a word: killed by a signal (the out-of-memory
    killer sends SIGKILL) or exited. The cell's claim is released; rerunning resumes it."""


class _RemoteTraceback(Exception):
    """The traceback of an error raised in a worker process (the cause of the re-raised error)."""

    def __str__(self):
        return "\n" + self.args[0]


def auto_workers(workers: int, log=None) -> int:
    """`workers`, or for 0 one worker process per CPU core on a machine without CUDA and one
    on a GPU machine (the cells share the GPU in one process). More workers than CPU cores are
    capped at the cores, said through `log`: each worker is a process with its own copy of torch
    (some 400 MB) and at least one thread, so more only crowd the cores and the memory."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be an int >= 0 (0: one per CPU core without a GPU), got "
                         f"{workers!r}")
    cores = max(1, os.cpu_count() or 1)
    if workers > cores:
        if log is not None:
            log(f"workers={workers} is more than this machine's {cores} CPU cores: running "
                f"{cores} at a time (each worker is a process training one cell)")
        return cores
    if workers:
        return workers
    return 1 if torch.cuda.is_available() else cores


def _not_in_a_spawned_import(study: str) -> None:
    """Worker processes start by importing the script that started the run (multiprocessing's
    "spawn"); a script that calls run_cells at its top level would start the run again inside
    every worker, which then waits forever for the cells its parent has claimed."""
    main = sys.modules.get("__mp_main__")  # the script, as a worker imports it
    # the flag multiprocessing itself reads to refuse starting processes during that import
    importing = getattr(multiprocessing.current_process(), "_inheriting", False)
    if importing and main is not None:
        raise RuntimeError(
            f"study {study}: run_cells was called while a worker process imported "
            f"{getattr(main, '__file__', 'the main script')}: put the code that runs the study "
            f"under `if __name__ == \"__main__\":` (workers > 1 start by importing that script)")


class _InProcess:
    """One cell at a time, in this process."""

    def __init__(self, study: str):
        self.study, self.running = study, []

    def full(self) -> bool:
        return bool(self.running)

    def start(self, cell, path: Path, run_dir: Path) -> None:
        self.running.append((cell, path, run_dir))

    def collect(self, timeout: float):
        out = []
        while self.running:
            cell, path, run_dir = self.running.pop(0)
            try:
                out.append((cell, _run_one(cell, path, run_dir, None)))
            finally:
                release(path)
        return out

    def stop(self) -> None:
        for _, path, _ in self.running:
            release(path)
        self.running = []


@contextmanager
def _sigint_ignored():
    """Start child processes with Ctrl-C ignored: a terminal's Ctrl-C goes to the whole process
    group, and a worker still starting up would die with Python's own "Fatal Python error"; the
    parent stops its workers itself when interrupted (stop)."""
    try:
        before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals cannot be changed here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


class _Processes:
    """Up to `workers` cells at once, each in its own spawned process; the parent holds the
    claims and watches each process, so a worker that dies is noticed within `timeout`."""

    def __init__(self, study: str, workers: int):
        self.study, self.workers, self.running = study, workers, []
        self.threads = max(1, torch.get_num_threads() // workers)
        self.ctx = multiprocessing.get_context("spawn")

    def full(self) -> bool:
        return len(self.running) >= self.workers

    def start(self, cell, path: Path, run_dir: Path) -> None:
        receive, send = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_cell_process, name=f"spt-cell-{cell.key}",
                                args=(cell, path, run_dir, self.threads, send, os.getpid()))
        try:
            with _sigint_ignored():
                proc.start()
        except BaseException:
            release(path)
            raise
        send.close()  # the child holds its end; EOF here once it is gone
        self.running.append({"cell": cell, "path": path, "run_dir": run_dir, "proc": proc,
                             "conn": receive, "message": None})

    def collect(self, timeout: float):
        from multiprocessing.connection import wait

        if not self.running:
            return []
        waiting = {r["proc"].sentinel: r for r in self.running}
        waiting.update({r["conn"]: r for r in self.running if r["message"] is None})
        out = []
        for ready in wait(list(waiting), timeout):
            r = waiting[ready]
            if ready is r["conn"]:
                r["message"] = _receive(r["conn"])
        for r in [r for r in self.running if not r["proc"].is_alive()]:
            r["proc"].join()
            if r["message"] is None:
                r["message"] = _receive(r["conn"])
            self.running.remove(r)
            r["conn"].close()
            release(r["path"])
            out.append((r["cell"], self._outcome(r)))
        return out

    def _outcome(self, r: dict) -> float:
        """The cell's seconds, or its error raised."""
        message, code, cell = r["message"], r["proc"].exitcode, r["cell"]
        if message and message[0] == "done":
            return message[1]
        if message and message[0] == "error":
            _, error, text = message
            if error is None:
                error = RuntimeError(f"study {self.study}, cell {cell.key} failed: "
                                     f"{text.strip().splitlines()[-1]}")
            raise error from _RemoteTraceback(text)
        if code is not None and code < 0:
            sig = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            why = " (out of memory?)" if -code == signal.SIGKILL else ""
            raise WorkerKilled(f"study {self.study}, cell {cell.key}: worker killed{why} by "
                               f"{sig}; rerun the same command to resume this cell from its last "
                               f"checkpoint in {r['run_dir']}")
        raise WorkerKilled(f"study {self.study}, cell {cell.key}: its worker process exited with "
                           f"code {code} without a result; rerun the same command to resume this "
                           f"cell from its last checkpoint in {r['run_dir']}")

    def stop(self) -> None:
        """Stop the cells still running (they resume from their checkpoints) and release their
        claims."""
        for r in self.running:
            if r["proc"].is_alive():
                r["proc"].terminate()
        for r in self.running:
            r["proc"].join(5)
            if r["proc"].is_alive():
                r["proc"].kill()
                r["proc"].join()
            r["conn"].close()
            release(r["path"])
        self.running = []


def _receive(conn):
    """The worker's message, or None when it sent none (it died first)."""
    try:
        return conn.recv() if conn.poll() else None
    except (EOFError, OSError):
        return None


def _cell_process(cell, path: Path, run_dir: Path, threads: int, conn,
                  parent_pid: int) -> None:
    """A worker process: run one cell, send ("done", seconds) or ("error", error or None,
    traceback text) to the parent. The worker ends itself when the run that started it is gone
    (killed, or its notebook kernel shut down: the worker is then re-parented), instead of
    computing to the end with nobody left to collect the cell."""
    def watch():
        while True:
            time.sleep(WATCH_POLL)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="spt-watch-parent").start()
    try:
        conn.send(("done", _run_one(cell, path, run_dir, threads)))
    except BaseException as e:
        text = traceback.format_exc()
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:  # an error that does not survive pickling goes as its text
            e = None
        conn.send(("error", e, text))
        raise SystemExit(1)
    finally:
        conn.close()


