"""Run directories: claiming one for a run, staging an overwrite, committing it, and
releasing or reclaiming a claim."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from ..util.fileio import exchange_dirs
from .records import RUN_FILES
from .store import SPOOL

CLAIM = ".workbench-claim"   # in a run directory from its claim until summary.json is written
CHECKPOINTS = "checkpoints"  # in a run directory: what a resumed run continues from (`workbench.checkpoint`)


class UncommittedRunError(FileNotFoundError):
    """A run directory without its summary.json: claimed by a run that has not finished
    writing it (still running, or stopped mid-save)."""


def uncommitted_message(d: Path) -> str:
    """What an uncommitted run directory holds, in one line."""
    claim = d / CLAIM
    who, why = "", "a run still writing, or one stopped mid-save"
    if claim.exists():
        pid = claim_pid(d)
        who = ", claimed" if pid is None else f", claimed by process {pid}"
        if pid is not None and pid != os.getpid() and not pid_alive(pid):
            who, why = f"{who}, which is gone", "a run killed before it committed"
    kept = sorted(p.name for p in d.iterdir() if p.name in RUN_FILES)
    return (f"{d}: an uncommitted run directory (no summary.json{who}: {why}); it holds "
            f"{', '.join(kept) if kept else 'no run files'}")


def claim_pid(d: str | Path) -> int | None:
    """The process id `d`'s CLAIM marker names (None: no marker, or one not written yet)."""
    try:
        return int((Path(d) / CLAIM).read_text().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (one of another user's counts: it may be writing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def killed_run(d: str | Path) -> dict | None:
    """What a run killed before it committed left in `d`: {"pid", "rows" (its step rows),
    "checkpoints" (how many)}; None unless `d` has no summary.json and its CLAIM marker
    names a process that is gone (SIGKILL, a crash, a reboot: the marker outlived it)."""
    d = Path(d)
    if not d.is_dir() or (d / "summary.json").exists():
        return None
    pid = claim_pid(d)
    if pid is None or pid == os.getpid() or pid_alive(pid):
        return None
    spool = d / SPOOL / "step.f64"      # the rows written, as raw float64: 8 bytes each
    if spool.is_file():
        rows = spool.stat().st_size // 8
    else:
        try:
            with open(d / "steps.csv", "rb") as f:
                rows = max(sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b"")) - 1, 0)
        except OSError:
            rows = 0
    return {"pid": pid, "rows": int(rows), "checkpoints": len(list((d / CHECKPOINTS).glob("step-*.npz")))}


def killed_text(d: str | Path, killed: dict) -> str:
    """`killed_run`'s finding in words.

    >>> killed_text("runs/x", {"pid": 41, "rows": 8696, "checkpoints": 0})
    'runs/x holds a run killed before its first checkpoint (process 41 is gone): 8,696 step rows in steps.csv and no checkpoint to go on from'
    """
    rows = killed["rows"]
    return (f"{d} holds a run killed before its first checkpoint (process {killed['pid']} is gone): "
            f"{rows:,} step row{'s' if rows != 1 else ''} in steps.csv and no checkpoint to go on from")


def claim_run_dir(out: str | Path, overwrite: bool = False, private: bool = True) -> Path:
    """Claim `out` for one run, atomically, before it trains; returns the directory claimed.

    A new directory is made with `os.mkdir` (exactly one caller succeeds), mode 0700 when
    `private` (only this user; else as the umask says); an existing one that holds no run
    is claimed by creating its CLAIM marker exclusively. If either is taken (another run
    claimed it first, or it holds a run and `overwrite` is not set), the first free sibling
    `out-2`, `out-3`, ... is claimed instead, so two runs given the same directory (or the
    same default name in the same second) never collide. One whose claim outlived its run
    (`killed_run`: killed before it committed) is a run's when that run left step rows or
    checkpoints, and is reused when it left nothing. With `overwrite`, a directory
    holding a committed run (or what a killed one computed) is not touched: the new run is written beside it, in a staging
    directory (`claim_stage`, `.NAME.overwrite-PID-K`), which replaces it only once the new
    run commits (`replace_run_dir`); `final_dir` names where a claimed directory ends up.
    The marker stays until `RunResult.save` has written summary.json (the commit)."""
    base = Path(out)
    base.parent.mkdir(parents=True, exist_ok=True)
    path, k = base, 1
    while True:
        try:
            os.mkdir(path, 0o700 if private else 0o777)
            usable = True
        except FileExistsError:
            killed = killed_run(path)   # (its claim outlived it: the step rows it computed are a run's too)
            committed = (path / "summary.json").exists() or any((path / CHECKPOINTS).glob("step-*.npz")) \
                or bool(killed and killed["rows"])
            if overwrite and k == 1 and committed and path.is_dir():
                return claim_stage(path, private)
            usable = path.is_dir() and ((overwrite and k == 1) or not committed)
            if usable and killed is not None and _take_over(path, private):
                return path   # a run killed before its first step left only its claim: nothing to lose
        if usable and _take_claim(path, private):
            return path
        k += 1
        path = base.parent / f"{base.name}-{k}"


def _take_claim(path: Path, private: bool) -> bool:
    """Create `path`'s CLAIM marker exclusively, holding this process's id; False when
    another run holds it."""
    try:
        fd = os.open(path / CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600 if private else 0o644)
    except FileExistsError:
        return False     # another run's claim
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def _take_over(path: Path, private: bool) -> bool:
    """Replace `path`'s CLAIM marker, whose process is gone, with this process's; False when
    it is not gone after all, or another run took it over first. Under an exclusive lock on
    the directory, so two runs taking it over at once cannot both succeed (without `fcntl`:
    never taken over)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        pid = claim_pid(path)   # read again under the lock: a run that took it over first holds it now
        if pid is None or pid == os.getpid() or pid_alive(pid):
            return False
        (path / CLAIM).unlink(missing_ok=True)
        return _take_claim(path, private)
    finally:
        os.close(fd)   # (releases the lock)


_STAGE = re.compile(r"\.(?P<name>.+)\.overwrite-[0-9]+-[0-9]+")


def claim_stage(final: str | Path, private: bool = True) -> Path:
    """A fresh staging directory beside `final` (`.NAME.overwrite-PID-K`, claimed) for a
    run that is to replace the committed run in `final` once it commits itself."""
    final = Path(final)
    k = 1
    while True:
        stage = final.parent / f".{final.name}.overwrite-{os.getpid()}-{k}"
        try:
            os.mkdir(stage, 0o700 if private else 0o777)
        except FileExistsError:
            k += 1
            continue
        _take_claim(stage, private)
        return stage


def final_dir(claimed: str | Path) -> Path:
    """Where a claimed run directory ends up: the run it replaces for a staging directory
    (`claim_stage`), else itself.

    >>> str(final_dir("runs/.a.overwrite-12-1")), str(final_dir("runs/a-2"))
    ('runs/a', 'runs/a-2')
    """
    p = Path(claimed)
    m = _STAGE.fullmatch(p.name)
    return p.parent / m.group("name") if m else p


def replace_run_dir(stage: str | Path, final: str | Path) -> Path:
    """Put the committed run in `stage` where `final` is, and remove the run `final` held.

    Files of `final` that are no run's (a user's notes) move into the new run first. Then
    the two directories are swapped in one step where the kernel offers it
    (`exchange_dirs`), so `final` always holds a committed run; elsewhere `final` is
    renamed aside first (a crash between the two renames leaves both runs, hidden beside
    it). Returns `final`."""
    stage, final = Path(stage), Path(final)
    ours = set(RUN_FILES) | {SPOOL, CLAIM, CHECKPOINTS}
    if final.is_dir():
        for entry in final.iterdir():
            if entry.name not in ours and not (stage / entry.name).exists():
                os.rename(entry, stage / entry.name)
    old = stage
    if not (final.exists() and exchange_dirs(stage, final)):
        old = final.parent / f".{final.name}.replaced-{os.getpid()}"
        if final.exists():
            os.rename(final, old)
        os.rename(stage, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def reclaim_run_dir(path: str | Path) -> Path:
    """Claim an uncommitted (or stopped) run directory again, to resume the run in it: its
    CLAIM marker names a process that is gone (or there is none). FileExistsError naming
    the process when a live one holds it (that run is still writing it)."""
    d = Path(path)
    claim = d / CLAIM
    pid = claim_pid(d)
    if pid is not None and pid != os.getpid() and pid_alive(pid):
        raise FileExistsError(f"{d}: claimed by process {pid}, which is still running")
    claim.unlink(missing_ok=True)
    if not _take_claim(d, private=not (d.stat().st_mode & 0o077)):
        raise FileExistsError(f"{d}: claimed by another run as this one started")
    return d


def release_claim(path: str | Path) -> None:
    """A claimed directory whose run ended before saving: drop the claim, and the
    directory if nothing else is in it (a staging directory whole: the run it was to
    replace stays as it was)."""
    d = Path(path)
    if final_dir(d) != d:
        shutil.rmtree(d, ignore_errors=True)
        return
    (d / CLAIM).unlink(missing_ok=True)
    try:
        d.rmdir()
    except OSError:
        pass


def free_run_dir(parent: str | Path, name: str, marker: str = "summary.json") -> Path:
    """`parent/name`, or `parent/name-2`, `-3`, ... : the first that holds no run yet (a
    second session writing into the same folder must not replace the first one's runs);
    `marker` is the file that says a folder is taken (a sweep's: sweep.csv)."""
    parent = Path(parent)
    path, k = parent / name, 1
    while (path / marker).exists():
        k += 1
        path = parent / f"{name}-{k}"
    return path


# The file that says a folder holds a command's results. One rule for run, sweep and grid
# (`execution.preflight.check_out`): a folder holding another command's results is refused,
# and one holding the same command's results unless overwrite, which replaces them and
# then removes what the new results did not replace (`stale_results`, `remove_stale`).
RESULT_MARKERS = {"run": ("summary.json",), "sweep": ("sweep.csv",), "grid": ("grid_runs.csv", "grid.csv")}
_TABLES = {"sweep": ("sweep.csv", "sweep.html"), "grid": ("grid.csv", "grid_runs.csv", "grid.html")}
_SWEEP_RUN = re.compile(r"w[0-9]+(-r[0-9]+)?")


def results_held(d: str | Path) -> list[tuple[str, str]]:
    """(command, marker file) of each command's results `d` holds: ("run", "summary.json"),
    ("sweep", "sweep.csv"), ("grid", "grid_runs.csv"); empty for a folder holding none."""
    d = Path(d)
    out = []
    for kind, markers in RESULT_MARKERS.items():
        found = next((m for m in markers if (d / m).exists()), None)
        if found is not None:
            out.append((kind, found))
    return out


def stale_results(d: str | Path, kind: str) -> set[str]:
    """The names in folder `d` that belong to the `kind` ("sweep" or "grid") results it holds:
    their tables and figure, and the run directories they list (a sweep's `w{P}`, `w{P}-r{k}`)."""
    import csv
    d = Path(d)
    if not d.is_dir() or kind not in _TABLES:
        return set()
    names = {n for n in _TABLES[kind] if (d / n).exists()}
    table = d / ("sweep.csv" if kind == "sweep" else "grid_runs.csv")
    try:
        with open(table, newline="", encoding="utf-8") as f:
            listed = [Path(row["run_dir"]) for row in csv.DictReader(f) if row.get("run_dir")]
    except (OSError, UnicodeDecodeError, csv.Error, KeyError):
        listed = []
    names |= {p.name for p in listed if p.parent.resolve() == d.resolve()}
    if kind == "sweep":
        names |= {p.name for p in d.iterdir() if p.is_dir() and _SWEEP_RUN.fullmatch(p.name)}
    return {n for n in names if (d / n).exists()}


def remove_stale(d: str | Path, stale: set[str], written: set[str]) -> list[str]:
    """Remove from `d` the earlier results' entries (`stale`) the new results did not write
    (`written`); returns their names, sorted."""
    gone = sorted(set(stale) - set(written))
    for name in gone:
        path = Path(d) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return gone
