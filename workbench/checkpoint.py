"""Checkpoints: what a run needs to continue, written atomically into its run directory.

    DIR/checkpoints/step-000000001200.npz      the state before step 1200 (the next to run)

One file per checkpoint, a NumPy `.npz` (a zip of `.npy` arrays, read back with
`allow_pickle=False`: no pickle anywhere), holding

    meta             the header, UTF-8 JSON as uint8: format and version, the run (id,
                     algorithm, config), the step to continue from, each worker's own step
                     and clock, its numbers that are not arrays (counters, generator
                     states), the records so far (evaluations, events, tournaments), the
                     segments already run, and a SHA-256 over every array and the header
    r{rank}.{name}   each worker's state arrays (parameters, optimiser state, error-feedback
                     memories, ...; `Algorithm.state`)
    server.{name}    the server role's state (its parameters, velocity, version, ...)

The step rows are not copied into it: the run directory's steps.csv already holds them
(written and synced before the checkpoint is; the header says how many of its bytes), and
a resumed run keeps the rows before each worker's step (`results.read_step_rows`). Writing is temp file, fsync, rename, fsync of the
folder: a reader finds the previous checkpoint or the new one, whole. Reading checks the
zip's CRCs and the digest, so a corrupted or truncated file is refused in one line
(`CheckpointError`) and the one before it is used (`latest`).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .results.rundir import CHECKPOINTS
from .util.fileio import sync_dir

FORMAT = "workbench-checkpoint"
VERSION = 1
_NAME = re.compile(r"step-(\d{12})\.npz")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; `str()` is one line naming the file and why."""


@dataclass
class Checkpoint:
    """One checkpoint: the step to continue from, each worker's state, the server's, and
    the header (`meta`: run, config, per-rank steps and clocks, records, segments)."""

    step: int
    meta: dict[str, Any]
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)   # rank -> name -> array or number
    server: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    interrupted: dict[str, Any] | None = None   # the summary the run it continues left (None: none, it was killed)
    history: list[dict[str, Any]] | None = None  # the segments before the resumed one, how each ended (`engine`)

    @property
    def config(self) -> dict[str, Any]:
        return self.meta["config"]

    def rank_step(self, rank: int) -> int:
        """The step `rank` continues from (the same for every rank of a synchronous run)."""
        return int(self.meta["workers"][str(rank)]["step"])

    def rank_time(self, rank: int) -> float:
        """`rank`'s clock (its records' `time`) when its state was taken."""
        return float(self.meta["workers"][str(rank)]["time"])


def file_name(step: int) -> str:
    """The checkpoint file of `step`: names sort in step order.

    >>> file_name(1200)
    'step-000000001200.npz'
    """
    return f"step-{int(step):012d}.npz"


def _split(state: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A worker's state as (arrays, JSON numbers): NumPy arrays go to the file's members,
    everything else (ints, floats, bools, generator states) to the header."""
    arrays, numbers = {}, {}
    for name, value in state.items():
        if isinstance(value, np.ndarray):
            arrays[name] = value
        elif isinstance(value, np.generic):
            numbers[name] = value.item()
        else:
            numbers[name] = value
    return arrays, numbers


def _digest(arrays: dict[str, np.ndarray], header: bytes) -> str:
    h = hashlib.sha256(header)
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def write(directory: str | Path, step: int, meta: dict[str, Any], ranks: dict[int, dict[str, Any]],
          server: dict[str, Any] | None = None, keep: int = 2, private: bool = True) -> Path:
    """Write the checkpoint of `step` into `directory`/checkpoints (atomically, synced),
    then remove all but the newest `keep`; returns its path.

    Args:
        directory: the run directory.
        step: the step a resumed run continues from.
        meta: the header (JSON-able: run, config, per-rank steps and clocks, records, ...).
        ranks: rank -> its state (`Algorithm.state`: arrays and numbers).
        server: the server role's state arrays, when the run has one.
        keep: how many checkpoints to keep (the newest).
        private: the file is mode 0600 (only this user), else as the umask allows.
    """
    folder = Path(directory) / CHECKPOINTS
    if not folder.is_dir():
        folder.mkdir(mode=0o700 if private else 0o777, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    workers = {str(r): dict(meta.get("workers", {}).get(str(r), {})) for r in ranks}
    for rank, state in ranks.items():
        a, numbers = _split(state)
        arrays.update({f"r{rank}.{k}": v for k, v in a.items()})
        workers[str(rank)]["numbers"] = numbers
    for k, v in (server or {}).items():
        arrays[f"server.{k}"] = np.asarray(v)
    head = {**meta, "format": FORMAT, "version": VERSION, "step": int(step), "workers": workers}
    header = json.dumps(head, sort_keys=True).encode()
    head["sha256"] = _digest(arrays, header)
    path = folder / file_name(step)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if not private:
                from .util.fileio import current_umask
                os.fchmod(f.fileno(), 0o666 & ~current_umask())
            np.savez(f, meta=np.frombuffer(json.dumps(head, sort_keys=True).encode(), dtype=np.uint8), **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        sync_dir(folder)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    for old in listed(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def listed(directory: str | Path) -> list[Path]:
    """The checkpoint files of a run directory, oldest first (none: [])."""
    folder = Path(directory) / CHECKPOINTS
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.fullmatch(p.name))


def read(path: str | Path) -> Checkpoint:
    """Read and check one checkpoint file; `CheckpointError` (one line) when it is not whole."""
    path = Path(path)

    def broken(why: str) -> CheckpointError:
        return CheckpointError(f"checkpoint: a whole checkpoint file ({why}), got {str(path)!r}")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise broken(exc.strerror or type(exc).__name__) from None
    if not raw.startswith(b"PK"):    # a checkpoint is a zip (.npz): NumPy would take anything else for a pickle
        raise broken("not an .npz archive: it does not begin as a zip file does")
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            members = {name: npz[name] for name in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise broken(f"{type(exc).__name__}: {text}" if text else type(exc).__name__) from None
    if "meta" not in members:
        raise broken("no header")
    try:
        head = json.loads(members.pop("meta").tobytes().decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise broken(f"its header is not JSON: {type(exc).__name__}") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise broken("not a workbench checkpoint")
    if head.get("version") != VERSION:
        raise broken(f"format version {head.get('version')}; this workbench reads version {VERSION}")
    digest = head.pop("sha256", None)
    if digest != _digest(members, json.dumps(head, sort_keys=True).encode()):
        raise broken("its contents do not match the digest it was written with")
    ranks: dict[int, dict[str, Any]] = {}
    for rank, info in head["workers"].items():
        ranks[int(rank)] = dict(info.get("numbers") or {})
    server = {}
    for name, value in members.items():
        who, _, key = name.partition(".")
        if who == "server":
            server[key] = value
        else:
            ranks.setdefault(int(who[1:]), {})[key] = value
    return Checkpoint(step=int(head["step"]), meta=head, ranks=ranks, server=server, path=path)


def latest(directory: str | Path) -> tuple[Checkpoint | None, list[str]]:
    """The newest checkpoint of a run directory that reads whole, and one line for each
    newer one refused (corrupted, truncated); (None, lines) when none does."""
    refused = []
    for path in reversed(listed(directory)):
        try:
            return read(path), refused
        except CheckpointError as exc:
            refused.append(f"{exc}; the one before it is used")
    return None, refused
