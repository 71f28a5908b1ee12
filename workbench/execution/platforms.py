"""What this platform offers the fast paths, probed once, and notes said once.

The shared-memory allreduce and parameter server (`comm/shm.py`) spin with
`os.sched_yield` and lock with `fcntl.flock`; Windows has neither, so there every
exchange goes through Dask (slower, but the same maths). Hogwild algorithms need one
buffer shared by every worker and have no such fallback.
"""
from __future__ import annotations

import functools
import os
import socket
import warnings

__all__ = ["shm_supported", "note_once", "PlatformNote", "host_key", "separate_hosts"]


class PlatformNote(UserWarning):
    """A platform limit the run works around (e.g. no shared-memory transport)."""


@functools.lru_cache(maxsize=1)
def shm_supported() -> bool:
    """Whether the shared-memory transport works here: POSIX shared memory, `fcntl`
    file locks and `os.sched_yield` (Linux and macOS: yes; Windows: no).

    >>> isinstance(shm_supported(), bool)
    True
    """
    if not hasattr(os, "sched_yield"):
        return False
    try:
        import fcntl  # noqa: F401
        from multiprocessing import shared_memory  # noqa: F401
    except ImportError:
        return False
    return True


_said: set[str] = set()


def note_once(message: str) -> bool:
    """Warn with `message` (a PlatformNote) the first time this process sees it;
    returns whether it was said now."""
    if message in _said:
        return False
    _said.add(message)
    warnings.warn(message, PlatformNote, stacklevel=3)
    return True


SHM_DIR = "/dev/shm"   # where Linux keeps POSIX shared memory (no such directory on macOS)


def host_key() -> str:
    """What "one host" means to the fast paths: processes with the same key see the same
    shared memory (/dev/shm) and the same private directory (its lock files), so a run's
    segments made by one are there for the others.

    The hostname alone says too little: containers started with `--network host` share
    the machine's hostname but each has its own /dev/shm and /tmp (a tmpfs mount apiece).
    So the key is the hostname, the kernel's boot id (Linux: two machines that happen to
    share a hostname differ here) and the device numbers of /dev/shm and of the private
    directory's parent (each tmpfs mount has its own; processes sharing one mount, bind
    mounts too, see the same one): a `stat` or two and a small read, no probe segment and no
    round trip between workers. A path that is not there counts as "-".
    """
    from ..util.private import private_base
    parts = [socket.gethostname(), _boot_id()]
    for path in (SHM_DIR, private_base()):
        try:
            parts.append(f"{os.stat(path).st_dev:x}")
        except OSError:
            parts.append("-")
    return "/".join(parts)


@functools.lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "-"


def separate_hosts(workers: list[dict]) -> list[dict]:
    """`workers` (dicts with `host`, the hostname, and `host_key`), with `host` telling
    apart the ones that share a hostname but not shared memory: `name#1`, `name#2`, ...
    in the order they first appear. A copy: the dicts given are not changed.

    >>> ws = [{"host": "box", "host_key": "a"}, {"host": "box", "host_key": "b"},
    ...       {"host": "box", "host_key": "a"}, {"host": "lab", "host_key": "c"}]
    >>> [w["host"] for w in separate_hosts(ws)], ws[1]["host"]
    (['box#1', 'box#2', 'box#1', 'lab'], 'box')
    """
    keys: dict[str, list[str]] = {}
    for w in workers:
        seen = keys.setdefault(w["host"], [])
        if w.get("host_key") not in seen:
            seen.append(w.get("host_key"))
    return [{**w, "host": f"{w['host']}#{keys[w['host']].index(w.get('host_key')) + 1}"}
            if len(keys[w["host"]]) > 1 else dict(w) for w in workers]
