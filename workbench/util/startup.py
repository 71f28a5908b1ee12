"""Ctrl-C while the command line starts (standard library only: set before NumPy loads).

`python -m workbench ...` spends a second or more importing NumPy, pydantic and its own
modules before `cli.main` runs; a Ctrl-C then raised KeyboardInterrupt from inside some
import and Python printed its traceback (status -2, from the signal). Nothing has started
by then (no run directory, no process), so the interrupt ends the start with the one line
the command line prints for an interrupt before a run starts, and exit status 1, as a
stopped run's (`EXIT_FAILED`).

Only a process launched as the command line gets this (`launched_as_cli`): `import
workbench` elsewhere (a notebook, a program run with `-m` that imports it) keeps Python's
own Ctrl-C. `cli.main` hands SIGINT back to Python (`started`) once it can catch the
interrupt itself.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

STOPPED_BEFORE_START = "stopped: interrupted before the run started"
SCRIPT = "parallel-workbench"   # the console script (pyproject's [project.scripts])


def launched_as_cli() -> bool:
    """Whether this process is `python -m workbench` or the console script, asked while
    `workbench` is first imported (runpy sets sys.argv[0] to "-m" until the module runs).

    >>> launched_as_cli()   # the doctest runner is neither
    False
    """
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 != "-m":
        return os.path.basename(argv0) == SCRIPT
    orig = list(getattr(sys, "orig_argv", []))
    for i, arg in enumerate(orig[1:], 1):   # the interpreter's options, then -m NAME
        if arg == "-m":
            return orig[i + 1:i + 2] in (["workbench"], ["workbench.__main__"])
        if arg.startswith("-m"):
            return arg[2:] in ("workbench", "workbench.__main__")
    return False


def _stop_starting(signum: int, frame: Any) -> None:
    sys.stderr.write(STOPPED_BEFORE_START + "\n")
    sys.stderr.flush()
    raise SystemExit(1)   # out through the imports: no traceback, nothing to close yet


def quiet_while_starting() -> None:
    """SIGINT ends the start in one line (`STOPPED_BEFORE_START`, exit 1) until `started`;
    nothing changes where SIGINT is not Python's default (ignored by a parent, say)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stop_starting)


def started() -> None:
    """The command line catches KeyboardInterrupt from here on: Python's own SIGINT back
    (only where `quiet_while_starting` set its handler)."""
    if signal.getsignal(signal.SIGINT) is _stop_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def as_foreground_job() -> None:
    """SIGINT and SIGHUP at their defaults, as a terminal's foreground job has them: a
    `preexec_fn` for a child that is to be stopped by a Ctrl-C or a hang-up sent to it.

    A process started as a background job (`cmd &` in a script, `nohup`) inherits them
    ignored, its children inherit that across exec, and the command line keeps an inherited
    ignored one ignored (`apps.cli.stop_on_signals`): such a parent's child would go on
    through the signal. (`subprocess.Popen`'s `restore_signals` resets only SIGPIPE, SIGXFZ
    and SIGXFSZ; `process_group` and `start_new_session` change no disposition.) Runs in the
    child between fork and exec: only the two calls.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
