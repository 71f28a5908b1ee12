"""A simulated run in a child process: the dashboard's kernel only draws.

A simulated cluster computes every virtual worker's maths on one driver thread. Run on a
thread of the kernel, it shares the interpreter lock with everything the kernel does
(the status line, the live figures' maths, the widgets' messages): the simulation went
~1.3x slower in the dashboard than from the CLI. `run_in_process` runs `api.run` in a
child process instead (the same call the CLI makes, so `sim_wall_s` is the CLI's) and
streams its live record batches back through a pipe, exactly as `on_record` would have
received them in-process; the kernel draws them on its own core. When the run ends the
child exits, so the simulation's working memory (1,024 virtual workers' parameters,
their step logs, the collector) goes back to the operating system instead of staying in
the kernel.

Children come from a fork server started once per kernel with the workbench already
imported (`multiprocessing`'s "forkserver": forked from a single-threaded process, never
from the kernel with its threads), so a run starts in a fraction of a second instead of
the seconds a fresh interpreter needs to import NumPy, pandas and the workbench.

Stop: the kernel's `should_stop` is polled every POLL_S and passed on as an Event the
child's run polls (the engine's own stop request, so the child ends "stopped" with every
step it ran, as in-process). The child ignores SIGINT (the kernel's interrupt is the
kernel's: `Dashboard.wait` turns it into Stop) and exits if the kernel goes away.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

POLL_S = 0.05          # s: how often the kernel side checks for Stop and for batches
PRELOAD = ["workbench.api", "workbench.execution.engine", "workbench.sim.transport", "pandas",
           "workbench.ui.simproc"]
_ctx_lock = threading.Lock()
_ctx: Any = None


def _context() -> Any:
    """The fork-server context, its server preloaded with the workbench (once per process)."""
    global _ctx
    with _ctx_lock:
        if _ctx is None:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            _ctx = ctx
        return _ctx


def warm() -> None:
    """Start the fork server (importing the workbench in it) in the background, so the
    first simulated run does not wait for it; the dashboard calls this when simulate is on."""
    if not available():
        return

    def start() -> None:
        from multiprocessing import forkserver
        _context()
        try:
            forkserver.ensure_running()
        except Exception:          # the first run starts it (and reports what fails)
            pass
    threading.Thread(target=start, name="workbench-sim-forkserver", daemon=True).start()


def available() -> bool:
    """Whether children can be started here: not from a script run by its path (a child
    re-runs such a script's top level, `multiprocessing`'s "safe importing of the main
    module"); a kernel, `python -m ...`, pytest and an interactive session are fine."""
    main = sys.modules.get("__main__")
    return getattr(main, "__spec__", None) is not None or not getattr(main, "__file__", None)


def _watch_parent(ppid: int) -> None:
    """End the child if the process that started it is gone (the kernel died or was killed:
    its fork server exits and the child is re-parented)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != ppid:
            os._exit(3)


def _sendable(exc: BaseException) -> BaseException:
    """`exc` if it survives a pickle round trip, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _child(config: Any, conn: Any, stop: Any, report: bool = True) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    from .. import api
    lock = threading.Lock()

    def send(kind: str, payload: Any) -> None:
        with lock:
            conn.send((kind, payload))

    sender = _BatchSender(lambda batch: send("records", batch))
    try:
        result = api.run(config, cluster=None, on_record=sender.add, should_stop=stop.is_set, progress=False,
                         report=report)
        sender.close()                                     # every batch is sent before the result
        send("summary", result.summary)                    # saved: how it ended, before its steps are read back
        if getattr(result, "store", None) is not None:   # steps streamed to the run directory:
            steps = result.steps                            # read back here, and the store (open
            if not report:                                  # files) stays in the child; without the
                api.settle_steps(result, result.summary["config"]["out"])   # report the spool goes here
            result.steps, result.store = steps, None
        send("result", result)
    except BaseException as exc:      # the kernel raises it as if the run had been in-process
        sender.close()
        send("error", _sendable(exc))
    finally:
        conn.close()


class _BatchSender:
    """The child's live batches, sent from a thread of their own, every batch waiting when
    it gets to send joined into one message (`RecordBatch.join`, in order).

    A simulated run's end brings one last batch from each virtual worker at once (1,025
    batches after Stop at 1,024 workers): one message each cost the kernel, whose figures
    hold the interpreter lock while they redraw, ~1.5 ms apiece with both cores busy (Stop
    to "stopped" 1.55 s, 2026-12-04). Joined, they are a message or two. While the run goes,
    batches leave as soon as the previous message is out, so the live view lags no more."""

    def __init__(self, send: Callable[[Any], None]):
        import queue
        self._send, self._queue = send, queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="workbench-sim-sender", daemon=True)
        self._thread.start()

    def add(self, batch: Any) -> None:
        self._queue.put(batch)

    def _loop(self) -> None:
        import queue

        from ..results import RecordBatch
        done = False
        while not done:
            batches = [self._queue.get()]
            while True:
                try:
                    batches.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if batches[-1] is None:
                batches.pop()
                done = True
            if batches and self._error is None:
                try:
                    self._send(batches[0] if len(batches) == 1 else RecordBatch.join(batches))
                except BaseException as exc:      # the pipe is gone (the kernel went away): stop sending
                    self._error = exc

    def close(self) -> None:
        """Send what is queued, then end the thread (idempotent)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()


def run_in_process(config: Any, on_record: Callable[[Any], None] | None = None,
                   should_stop: Callable[[], bool] | None = None, report: bool = True,
                   on_summary: Callable[[dict], None] | None = None) -> Any:
    """`api.run(config, on_record=..., should_stop=..., progress=False, report=...)` for a
    simulated `config`, in a child process; returns its RunResult (or raises its exception).

    `on_record` is called on the calling thread with each batch, in order, as the child
    sends them. The run directory (`config.out`) is written by the child, as the CLI does;
    `report=False` leaves report.html to the caller (`api.write_run_report`). `on_summary`
    is called with the run's summary as soon as the child's run has ended and its
    directory is saved, before the complete step log comes back (reading it back, sending
    and receiving it took 0.6 s of a 1,024-worker run's 1.3 s from Stop with both cores busy)."""
    if not getattr(config, "simulate", False):
        raise ValueError(f"simulate: a child process runs simulated runs only, got {getattr(config, 'simulate', None)}")
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    stop = ctx.Event()
    proc = ctx.Process(target=_child, args=(config, send, stop, report), name="workbench-sim-run", daemon=True)
    proc.start()
    send.close()                      # the child's end: EOF here once the child is gone
    try:
        while True:
            if should_stop is not None and not stop.is_set() and should_stop():
                stop.set()
            if not recv.poll(POLL_S):
                if not proc.is_alive() and not recv.poll(0):
                    raise RuntimeError(f"the simulation process ended without a result (exit code {proc.exitcode})")
                continue
            try:
                kind, payload = recv.recv()
            except EOFError:
                proc.join(5)
                raise RuntimeError(f"the simulation process ended without a result (exit code {proc.exitcode})") \
                    from None
            if kind == "records":
                if on_record is not None:
                    on_record(payload)
            elif kind == "summary":
                if on_summary is not None:
                    on_summary(payload)
            elif kind == "result":
                return payload
            else:
                raise payload
    except BaseException:
        stop.set()                    # the caller was interrupted: the child's run stops too
        raise
    finally:
        recv.close()
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
