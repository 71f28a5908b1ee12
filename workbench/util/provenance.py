"""Where a run's code came from: the git commit of the workbench checkout, and whether
its tracked files had uncommitted changes. Recorded in summary.json so a run directory
says which code produced it. Outside a git checkout (a wheel install), or without git,
both are None; this never raises.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

__all__ = ["git_state"]

_TIMEOUT_S = 5.0


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):   # no git, a hung git, an unreadable folder
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_state(path: str | Path | None = None) -> dict[str, Any]:
    """`{"git_commit": sha or None, "git_dirty": bool or None}` for the checkout holding `path`.

    Args:
        path: a file or folder inside the checkout; default: this package's own source.
    Returns:
        The commit HEAD points at, and whether tracked files differ from it (untracked
        files do not count, as with `git describe --dirty`); both None outside a checkout.
    """
    try:
        here = Path(path) if path is not None else Path(__file__).resolve().parent
        folder = here if here.is_dir() else here.parent
    except OSError:
        return {"git_commit": None, "git_dirty": None}
    top = _git(["rev-parse", "--show-toplevel"], folder)
    commit = _git(["rev-parse", "--verify", "HEAD"], folder) if top else None
    if not commit:
        return {"git_commit": None, "git_dirty": None}
    status = _git(["status", "--porcelain", "--untracked-files=no"], folder)
    return {"git_commit": commit.strip(), "git_dirty": None if status is None else bool(status.strip())}
