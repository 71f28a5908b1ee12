"""Files only this user can touch: a private runtime directory, lock files created
exclusively in it, and the records that let a later run sweep what a dead one left.

Another local user must not be able to plant a symlink where a run creates a file, nor
open a run's lock file (a read-only descriptor is enough to `flock` it and freeze every
worker). So every such file lives in one directory per user, `$XDG_RUNTIME_DIR/workbench`
or `<tmp>/workbench-<uid>`, created mode 0700 and checked to be a real directory owned by
this user; files in it are created with O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600.

Shared-memory segments (POSIX names in /dev/shm, one namespace for everyone) are created
exclusively and mode 0600 by Python's `SharedMemory`; each gets a record here naming the
process that created it, so `sweep_stale` can free the segments and lock files of runs
whose owner process is gone (killed with -9, say) at the next start.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO

SEGMENT_PREFIX = "seg."     # records: seg.<segment name>, holding the creator's pid
LOCK_SUFFIX = ".lock"       # lock files: <run id>.<pid>.lock, holding the creator's pid


class PrivateDirError(PermissionError):
    """The private directory (or a file in it) is not what this user made: refused."""


def _ensure_private(path: Path) -> Path:
    uid = os.getuid()
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise PrivateDirError(f"{path}: a directory of this user's (mode 0700), got "
                              f"{'a symlink' if stat.S_ISLNK(st.st_mode) else 'something else'}; remove it")
    if st.st_uid != uid:
        raise PrivateDirError(f"{path}: a directory owned by uid {uid} (mode 0700), got one owned by uid "
                              f"{st.st_uid}; remove it")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)     # ours, but open to others: close it
    return path


def private_base() -> str:
    """The directory `private_dir` is made in: `$XDG_RUNTIME_DIR` when set (and a
    directory), else `tempfile.gettempdir()`."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return runtime if runtime and os.path.isdir(runtime) else tempfile.gettempdir()


def private_dir() -> Path:
    """This user's private runtime directory (created 0700 on first use).

    `$XDG_RUNTIME_DIR/workbench` when that is set and usable, else
    `<tempfile.gettempdir()>/workbench-<uid>`. Raises PrivateDirError naming the path
    when it exists but is a symlink, not a directory, or another user's."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        with contextlib.suppress(PrivateDirError, OSError):
            return _ensure_private(Path(runtime) / "workbench")
    return _ensure_private(Path(tempfile.gettempdir()) / f"workbench-{os.getuid()}")


def create_private(name: str, text: str = "") -> Path:
    """Create `private_dir()/name` exclusively (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600)
    holding `text`; FileExistsError if anything, a symlink included, is already there."""
    path = private_dir() / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return path


def open_private(path: str | os.PathLike) -> IO[bytes]:
    """Open an existing private file for reading and writing, refusing a symlink
    (O_NOFOLLOW), a non-regular file or one not owned by this user."""
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        raise PrivateDirError(f"{path}: a regular file owned by uid {os.getuid()}, got mode {oct(st.st_mode)} "
                              f"owned by uid {st.st_uid}")
    return os.fdopen(fd, "r+b", buffering=0)


def create_lock(run_id: str) -> str:
    """A fresh lock file for run `run_id` in the private directory (runs on the worker
    that creates the run's segments); returns its path."""
    return str(create_private(f"{run_id}.{os.getpid()}{LOCK_SUFFIX}", str(os.getpid())))


def record_segment(name: str) -> None:
    """Note that this process created segment `name` (for `sweep_stale`)."""
    with contextlib.suppress(OSError):
        (private_dir() / f"{SEGMENT_PREFIX}{name.lstrip('/')}").unlink(missing_ok=True)
        create_private(f"{SEGMENT_PREFIX}{name.lstrip('/')}", str(os.getpid()))


def forget_segment(name: str) -> None:
    """The segment `name` was freed: drop its record."""
    with contextlib.suppress(OSError):
        (private_dir() / f"{SEGMENT_PREFIX}{name.lstrip('/')}").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # someone's process holds that pid now: not ours to judge
        return True
    return True


def sweep_stale() -> list[str]:
    """Free the segments and lock files whose creating process is gone; returns what was
    removed (segment names and lock file names). A record whose pid is alive stays."""
    removed = []
    try:
        folder = private_dir()
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        is_seg, is_lock = entry.name.startswith(SEGMENT_PREFIX), entry.name.endswith(LOCK_SUFFIX)
        if not (is_seg or is_lock) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            pid = int(Path(entry.path).read_text().strip() or "0")
        except (OSError, ValueError):
            continue
        if pid <= 0 or _alive(pid):
            continue
        if is_seg:
            name = entry.name[len(SEGMENT_PREFIX):]
            with contextlib.suppress(OSError):
                _shm_unlink(name)
            removed.append(name)
        else:
            removed.append(entry.name)
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
    return removed


def _shm_unlink(name: str) -> None:
    try:
        import _posixshmem
        _posixshmem.shm_unlink("/" + name)
    except ImportError:   # pragma: no cover - no POSIX shared memory here
        pass
    except FileNotFoundError:
        pass
