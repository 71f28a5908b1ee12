"""Atomic file writes: a reader sees the old file or the new one, never half of one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: str | Path, text: str | bytes, private: bool = False, sync: bool = False) -> Path:
    """Write `text` (or bytes) to `path` through a temp file in the same folder and a rename.

    `private`: the file is mode 0600 (only this user), whatever the umask; else as the
    umask says. `sync`: the data reaches the disk (fsync) before the rename, and the
    rename before this returns, so a power cut leaves the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w", **({} if isinstance(text, bytes) else
                                                                         {"encoding": "utf-8"})) as f:
            f.write(text)
            if not private:
                os.fchmod(f.fileno(), 0o666 & ~current_umask())  # mkstemp makes 0600: share as the umask says
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            sync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def sync_dir(folder: str | Path) -> None:
    """fsync a folder, so the renames in it are on disk (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def private_opener(path: str, flags: int) -> int:
    """An `open(..., opener=)` that creates files mode 0600 (only this user), whatever the umask."""
    return os.open(path, flags, 0o600)


def exchange_dirs(a: str | Path, b: str | Path) -> bool:
    """Swap two directories in one step (Linux `renameat2(RENAME_EXCHANGE)`): a reader
    sees one or the other, never neither. False where the kernel or C library offers no
    such call (nothing was moved)."""
    import ctypes
    import errno
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):   # not offered here (or by this filesystem)
        return False
    raise OSError(err, os.strerror(err), str(a))


def current_umask() -> int:
    """The process's umask, read without changing it where the kernel tells (Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not atomic, but only here)
    os.umask(mask)
    return mask


class RunDirError(OSError):
    """The run directory could not be written (disk full, quota, permissions): its
    message is the one line the CLI prints (exit 1); what was written before is kept."""
