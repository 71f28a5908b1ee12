"""The top-level calls: `run`, `resume`, `load`, `save`, `sweep` (re-exported as `workbench.run` etc.).

The entry point above every layer: it checks the config (`execution.preflight`), hands the
run to the engine (every algorithm, `sgd` included, on the transport `engine.transport_for`
picks), adds the progress bar and writes the run directory. `sweep` repeats `run` over worker counts.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import warnings as _warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .config import ConfigError, ConfigTypeError, RunConfig, check_scheduler_address
from .execution.preflight import preflight
from .results.records import OnRecord
from .results.result import RunResult
from .trained import generate, predict, torch_module, trained_params  # noqa: F401  (wb.predict, ...: re-exported)
from .util.fileio import RunDirError  # noqa: F401  (RunDirError: for callers)


def run(config: RunConfig | dict, cluster: Any = None, on_record: OnRecord | None = None,
        should_stop: Callable[[], bool] | None = None, progress: bool = True,
        overwrite: bool = False, checked: Sequence[str] | None = None, report: bool = True) -> RunResult:
    """Train one run and return its `RunResult`; writes the run directory if `config.out` is set.

    Args:
        config: a `RunConfig` (or a dict of its fields).
        cluster: a Dask `Client`, cluster, or scheduler address; "threads"; or a transport
            `execution.engine.transport_for` chose. Default: a local cluster started (or
            reused) for this session, or the simulated one for `simulate=True`. Ignored by an
            algorithm that runs in this process (`AlgorithmSpec.in_process`: sgd).
        on_record: called with each batch of streamed records (live plots).
        should_stop: polled by the client; returning True stops the run within a second.
        progress: draw a progress bar (epochs or steps, last loss, test accuracy): a
            widget in a notebook, text in a terminal. False for none.
        overwrite: replace a run already saved in `config.out` (otherwise refused).
        checked: the warnings of the `preflight(config, overwrite)` the caller has just run
            (the CLI checks before it starts a cluster, and prints them itself); they are
            recorded, not warned again, and the checks are not repeated. None: check here.
        report: write report.html into the run directory once its data is committed
            (False: the caller renders it, `write_run_report`, as the CLI does after its
            status line).

    With `config.out`, every step row is appended to the run directory's steps.csv while
    the run goes (`results.StepStore`), so memory does not grow with the run's length and
    a stop (should_stop, Ctrl-C, the CLI's SIGINT/SIGTERM) has only its last batches to
    write: data first, summary.json last (the commit), report.html after.
    Raises:
        ConfigError: a value that would fail once workers run (checked before they start:
            `workbench.execution.preflight`); `ConfigTypeError` (also a TypeError) for arguments of
            the wrong type, such as `run(None)`.
    """
    config = _checked_args(config, cluster, on_record, should_stop)
    _check_cluster_answers(cluster, config)   # before preflight builds the data and the model
    if checked is None:
        warnings = preflight(config, overwrite=overwrite, shm=_shm_is_here(cluster), threads=_on_threads(cluster))
        for message in warnings:
            _warnings.warn(message, RunWarning, stacklevel=2)
    else:
        warnings = list(checked)
    claimed = None
    if config.out:   # claimed before training: a second run given the same folder gets out-2, never a clash
        from .results.rundir import claim_pid, claim_run_dir, final_dir, killed_run, killed_text
        killed = killed_run(config.out)
        claimed = claim_run_dir(config.out, overwrite=overwrite, private=config.out_private)
        if final_dir(claimed) != Path(config.out):   # (a staging directory replaces config.out at the commit)
            pid = claim_pid(config.out)
            warnings.append(f"out: {killed_text(config.out, killed)}; this run is written to {claimed}"
                            if killed is not None and claim_pid(config.out) == killed["pid"] else
                            f"out: {config.out} was claimed by another run"
                            f"{f' (process {pid}, still running)' if pid is not None else ''}; this run is "
                            f"written to {claimed}")
            config = config.replace(out=str(claimed))
        elif killed is not None and claimed == Path(config.out):   # it held only a killed run's claim
            warnings.append(f"out: {config.out} held only the claim of a run killed before its first step "
                            f"(process {killed['pid']} is gone); reused")
    bar = None
    if progress:
        from .execution.progress import RunProgress, bars_allowed, tee
        if bars_allowed():
            bar = RunProgress(config)
            on_record = tee(bar, on_record)
    result = None
    from .util.provenance import git_state
    code = _meanwhile(git_state)   # which code produced it (three git calls): asked while the run trains
    t0 = time.time()
    try:
        from .execution.engine import run as engine_run  # engine.transport_for: simulated, threads or Dask
        result = engine_run(config, cluster=cluster, on_record=on_record, should_stop=should_stop, out=claimed)
    except KeyboardInterrupt as exc:  # before the loops started (cluster start, set-up): nothing gathered
        result = _stopped_before_start(config, time.time() - t0, str(exc) or "KeyboardInterrupt")
    except BaseException:
        if claimed is not None:
            from .results.rundir import release_claim
            release_claim(claimed)
        raise
    finally:
        if bar is not None:
            bar.close(result.status if result is not None else "failed",
                      result.summary.get("samples_per_s") if result is not None else None,
                      why=result.why if result is not None else "")
    result.summary.update(code())  # which code produced it: commit and dirty flag, or None
    if warnings:
        result.summary["events"] = [{"time": 0.0, "event": "warning", "worker": None, "message": m}
                                    for m in warnings] + list(result.summary.get("events", []))
        result.summary["warnings"] = list(warnings)
    if config.out:
        save(result, claimed, overwrite=overwrite, report=report)
    return result


def resume(directory: str | Path, cluster: Any = None, on_record: OnRecord | None = None,
           should_stop: Callable[[], bool] | None = None, progress: bool = True, report: bool = True) -> RunResult:
    """Continue a run from the last checkpoint in its run directory; returns its `RunResult`.

    The run that wrote `directory` was stopped, failed, or killed (nothing committed);
    its newest checkpoint that reads whole (`workbench.checkpoint.latest`: a corrupted or
    truncated one is passed over, and its event says so) holds every worker's state, the
    step to go on from and the records so far. The run goes on with the same config, in
    the same directory: the step rows after the checkpoint (a killed run's) are dropped
    and run again, and the directory is committed as one run whose summary lists its
    segments. On a deterministic path (the synchronous family, local SGD, DiLoCo,
    compressed sync_sgd, dpsgd, and simulated runs) the records and final losses are
    bitwise those of the run never interrupted (docs/checkpoints.md).

    Args:
        directory: the run directory (a run replacing another, `overwrite`, that was killed
            before it committed: the directory it was to replace; its staging folder is found).
        cluster, on_record, should_stop, progress, report: as `run`'s.
    Raises:
        ConfigError: no checkpoint to continue from, a completed run, or a config the
            workers cannot run now (checked before any starts).
    """
    d, found, config, warnings = resume_checks(directory, cluster)
    kept = _kept_before(d, found.interrupted)
    from .results.rundir import reclaim_run_dir
    try:
        reclaim_run_dir(d)
    except FileExistsError as exc:
        raise ConfigError("resume", "a run directory no running process is writing", str(exc)) from None
    bar = None
    if progress:
        from .execution.progress import RunProgress, bars_allowed, tee
        if bars_allowed():
            bar = RunProgress(config)
            on_record = tee(bar, on_record)
    result = None
    from .util.provenance import git_state
    code = _meanwhile(git_state)
    # An asynchronous simulated run's workers are mid-step at any virtual instant (their
    # checkpoints are taken at different ones): it is replayed from step 0 instead, which
    # virtual time makes bitwise the run never stopped.
    replay = config.simulate and not _spec(config).sync
    try:
        from .execution.engine import run as engine_run
        result = engine_run(config, cluster=cluster, on_record=on_record, should_stop=should_stop, out=d,
                            resume=None if replay else found)
    finally:
        if bar is not None:
            bar.close(result.status if result is not None else "failed",
                      result.summary.get("samples_per_s") if result is not None else None,
                      why=result.why if result is not None else "")
    result.summary.update(code())
    if result.params is None and kept is not None:   # failed again before evaluating: what it had is not lost
        result.params, result.summary["params_final"] = kept
    from .results.result import last_segment
    spent = [e["message"] for e in last_segment(result.summary.get("events", [])) if e.get("event") == "fault_spent"]
    said = "; ".join(n for n in (resumed_note(config), *(f"resumed: {m}" for m in spent[-1:])) if n)
    if said:   # what this segment's numbers are against the run never stopped, with the run's notes
        result.summary["resumed_note"] = said
    if replay:
        result.summary["resumed_from"] = {"step": found.step, "checkpoint": found.path.name, "replayed": (
            "from step 0: an asynchronous simulated run's workers are mid-step at any instant, and virtual "
            "time makes the replay the run that was stopped")}
    if warnings:
        result.summary["events"] = [{"time": 0.0, "event": "warning", "worker": None, "message": m}
                                    for m in warnings] + list(result.summary.get("events", []))
        result.summary["warnings"] = list(warnings)
    save(result, d, overwrite=True, report=report)
    return result


def resumed_note(config: RunConfig) -> str | None:
    """What a resumed run's numbers are against the same run never stopped, where they are
    not its bits (None where they are: the synchronous family and every simulated run;
    docs/checkpoints.md's table). The CLI and the report print it with the run's notes.

    >>> resumed_note(RunConfig(algorithm="sync_sgd", cpus=2)) is None
    True
    >>> resumed_note(RunConfig(algorithm="async_sgd", cpus=2))[:52]
    'resumed: every worker and the shared state (the serv'
    """
    if config.simulate:
        return None
    if config.algorithm == "easgd":   # repeatable uninterrupted (strict round robin); its resume is not
        return ("resumed: each worker and the centre went on from their checkpointed state exactly, but the centre "
                "is rank 0's snapshot (holding the other workers' exchanges of that round made by then) and the "
                "turns start again at rank 0, so the losses and parameters after the resume point are not those of "
                "the run never stopped (docs/checkpoints.md)")
    if not config.is_sync:
        return ("resumed: every worker and the shared state (the server, the centre, the shared buffer or AD-PSGD's "
                f"table) went on from the checkpoint exactly, but {config.algorithm}'s workers race (the order their "
                "updates land in), so the losses and parameters after the resume point are one outcome of the race, "
                "not those of the run never stopped (docs/checkpoints.md)")
    if config.split == "speed":
        return ("resumed: split 'speed' re-weights the batch shares by the workers' measured speeds, so the "
                "steps after the resume point are not bitwise those of the run never stopped (nor are two "
                "runs never stopped: docs/checkpoints.md)")
    return None


def _kept_before(d: Path, told: dict | None) -> tuple[Any, dict] | None:
    """The parameters the run being resumed had kept (its params.npy: a stopped run's last,
    a failed one's last evaluation) and what they are, for a resumed segment that fails again
    before it evaluates (it has none of its own, and the directory is rewritten); None
    without them."""
    import numpy as np

    from .results.result import read_params
    path = d / "params.npy"
    if not path.is_file():
        return None
    try:
        params = np.array(read_params(path))   # (a copy: the directory is rewritten)
    except (OSError, ValueError):
        return None
    told = told or {}
    before = told.get("params_final") or {"steps": int(told.get("steps") or 0), "of": "its end"}
    return params, {"steps": before["steps"], "of": f"{before['of']} before it was resumed"}


def resume_checks(directory: str | Path, cluster: Any = None) -> tuple[Path, Any, RunConfig, list[str]]:
    """Every check `resume` makes before it claims the directory or starts anything: the
    CLI makes them before it starts its cluster (whose start a run's start-up does not count).

    Returns:
        (the directory its checkpoints are in, the checkpoint to go on from, the config, the
        warnings: newer checkpoints refused, then its preflight's)
    Raises:
        ConfigError: no checkpoint to continue from, a completed run, an algorithm without
            checkpoints, or a config the workers cannot run now.
    """
    import json

    from . import checkpoint as ckpt
    from .results.rundir import final_dir
    if not isinstance(directory, (str, os.PathLike)):
        raise ConfigTypeError("directory", "a run directory path", directory)
    d = _resumable_dir(Path(directory))
    found, refused = ckpt.latest(d)
    if found is None:
        why = f" ({refused[0].removesuffix('; the one before it is used')})" if refused else ""
        from .results.rundir import killed_run, killed_text
        killed = killed_run(d) if not refused else None
        if killed is not None:   # SIGKILL before the first checkpoint: say so, and how to start it again there
            why = (f" ({killed_text(directory, killed)}; run it again there with its flags and --out {directory} "
                   "--overwrite, which replaces it once the new run commits)")
        raise ConfigError("resume", f"a run directory holding a checkpoint to continue from{why}", str(directory))
    if (d / "summary.json").is_file():
        try:
            told = json.loads((d / "summary.json").read_text())
            found.interrupted = told if isinstance(told, dict) else None   # how it ended: the resumed summary keeps it
            status = told.get("status") if isinstance(told, dict) else None
        except (OSError, ValueError):
            status = None
        if status == "completed":
            raise ConfigError("resume", "a run that did not complete (this one did: nothing to continue)",
                              str(directory))
        if isinstance(told, dict) and (foreign := _foreign_checkpoint(found, told)):
            raise ConfigError("resume", foreign, str(directory))
    config = RunConfig.from_dict(found.config)
    why = resume_refusal(config, found.interrupted)
    if why is not None:
        raise ConfigError("resume", why, str(directory))
    spec = _spec(config)
    from .algorithms.base import checkpoints_offered
    if not checkpoints_offered(spec.cls):
        raise ConfigError("resume", f"a run of an algorithm with checkpoints ({config.algorithm} has none)",
                          str(directory))
    if (edited := _edited_config(d, config)) is not None:
        raise ConfigError("resume", edited, str(d / "config.yaml"))
    synced = found.meta.get("steps_csv_bytes")
    held = (d / "steps.csv").stat().st_size if (d / "steps.csv").is_file() else 0
    if isinstance(synced, int) and held < synced:   # cut or replaced since: the records will have a hole
        refused.append(f"checkpoint: a steps.csv holding the {synced:,} bytes of step rows {found.path.name} synced "
                       f"(it holds {held:,}: rows before step {found.step:,} are missing and stay missing from the "
                       f"resumed run's records; its parameters, evaluations and events are whole), "
                       f"got {str(d / 'steps.csv')!r}")
    config = config.replace(out=str(final_dir(d)))
    _check_cluster_answers(cluster, config)
    warnings = preflight(config, overwrite=True, shm=_shm_is_here(cluster), threads=_on_threads(cluster))
    return d, found, config, [*refused, *warnings]


def _foreign_checkpoint(found: Any, told: dict) -> str | None:
    """Why checkpoint `found` is not of the run whose summary.json `told` is, in words
    (None: it is, or either has no run id to tell by).

    The checkpoint is of the run when one descends from the other: the summary's run
    wrote it (its id is the summary's or one of the summary's segments'), or it was written
    by a later segment that went on from the summary's run (the summary's id is among its
    segments': a resumed segment killed before it committed). Anything else (a run
    started anew in the directory over a killed one's checkpoints, a checkpoint copied in)
    would continue another run in this one's records: steps.csv cut at the other run's
    byte count, and the summary and config.yaml replaced by the other run's.

    >>> mine = type("C", (), {"meta": {"run_id": "b", "segments": [{"run_id": "a"}, {"run_id": "b"}]},
    ...                        "config": {}, "path": None})()
    >>> _foreign_checkpoint(mine, {"run_id": "a"}) is None, _foreign_checkpoint(mine, {"run_id": "c"})[:31]
    (True, "a directory's own checkpoint (t")
    """
    def ids(run_id: Any, segments: Any) -> set:
        return ({run_id} | {s.get("run_id") for s in segments or [] if isinstance(s, dict)}) - {None}
    ours = ids(told.get("run_id"), told.get("segments"))
    theirs = ids(found.meta.get("run_id"), found.meta.get("segments"))
    if not ours or not theirs or found.meta.get("run_id") in ours or told.get("run_id") in theirs:
        return None
    mine, other = told.get("config") or {}, found.config or {}
    differ = [f"{k}: {other.get(k)!r} in the checkpoint, {mine.get(k)!r} in summary.json" for k in sorted(set(mine) | set(other))
              if k != "out" and mine.get(k) != other.get(k)]
    name = found.path.name if found.path is not None else "the checkpoint"
    return (f"a directory's own checkpoint (the newest, {name}, is of run {found.meta.get('run_id')}, "
            f"not of run {told.get('run_id')} whose summary.json the directory holds"
            + (f"; {'; '.join(differ[:4])}{'; ...' if len(differ) > 4 else ''}" if differ else "")
            + ": it would continue another run in this one's records)")


def _edited_config(d: Path, config: RunConfig) -> str | None:
    """Why a resume is refused when the directory's config.yaml says another config than
    the checkpoint's (edited by hand to change the resumed run, as `--resume` refuses any
    other run flag): the run would go on with the checkpoint's and write config.yaml again,
    the edit gone in silence. None: the same, or no config.yaml that reads as a config."""
    import yaml
    try:
        told = RunConfig.from_dict(yaml.safe_load((d / "config.yaml").read_text())).to_dict()
    except Exception:   # (none, or not a config: the run's own is the checkpoint's either way)
        return None
    ours = config.to_dict()
    differ = [f"{k}: {told.get(k)!r} in config.yaml, {ours.get(k)!r} in the checkpoint"
              for k in sorted(set(told) | set(ours)) if k != "out" and told.get(k) != ours.get(k)]
    if not differ:
        return None
    return (f"a config.yaml as the run wrote it (it was edited since: {'; '.join(differ[:4])}"
            f"{'; ...' if len(differ) > 4 else ''}; a resumed run goes on with its checkpoint's config: put "
            "config.yaml back, or remove it, to resume; start a new run to change the config)")


def resume_refusal(config: RunConfig, summary: dict | None) -> str | None:
    """What a run would need to be resumed, when it can never go past where it ended (None:
    it can): `resume_checks` refuses with it, and the CLI offers no `resume:` line.

    A simulated run that failed with `fail_worker` set, where the fault would fire again: an
    asynchronous one is replayed from step 0, and an elastic one names its faults by rank
    (renumbered at each regroup), so the same worker dies at the same virtual second on every
    resume. Its config is the checkpoint's (`--resume` takes no other flag), so the fault
    cannot be moved either. A synchronous one goes on from its checkpoint with the lost
    worker back, the fault spent (`engine._take_up`, `RunSetup.spent`), as a real run resumed
    after a lost worker goes on with a replacement.

    >>> cfg = RunConfig(algorithm="sync_sgd", simulate=True, cpus=4, fail_worker="1@0.005", elastic=True)
    >>> resume_refusal(cfg, {"status": "failed"}).startswith("a run that can go on past where it ended")
    True
    >>> resume_refusal(cfg, {"status": "stopped"}) is None, resume_refusal(cfg.replace(elastic=False), {"status": "failed"})
    (True, None)
    """
    if not (config.simulate and config.fail_worker and isinstance(summary, dict) and summary.get("status") == "failed"):
        return None
    if config.is_sync and not config.elastic:
        return None
    return ("a run that can go on past where it ended (this simulated run's fail_worker "
            f"{config.fail_worker} kills the same worker at the same virtual time on every resume: "
            f"{'an elastic run names its faults by rank' if config.elastic else 'an asynchronous run is replayed from step 0'}"
            "; run it again without fail_worker, or with a later time)")


def _resumable_dir(d: Path) -> Path:
    """Where a run to resume has its checkpoints: `d`, or the staging folder of a run that
    was to replace the committed one in `d` (`--overwrite`) and was killed before it did."""
    from . import checkpoint as ckpt
    if ckpt.listed(d) or not d.parent.is_dir():
        return d
    stages = sorted((p for p in d.parent.glob(f".{d.name}.overwrite-*") if ckpt.listed(p)),
                    key=lambda p: p.stat().st_mtime)
    return stages[-1] if stages else d


def _meanwhile(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Start `fn()` on a daemon thread; returns a function that waits for its value (or
    calls `fn` itself if the thread failed), so a run's end does not wait for it."""
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.update(value=fn()), name="workbench-meanwhile", daemon=True)
    thread.start()

    def value() -> Any:
        thread.join()
        return box["value"] if "value" in box else fn()
    return value


def _stopped_before_start(config: RunConfig, wall: float, why: str) -> RunResult:
    """The result of a run stopped before any worker trained: status stopped, no steps."""
    from .results.collect import Collector
    from .results.records import event_record
    from .results.result import build_result
    collector = Collector()
    collector([event_record(wall, "stop_requested", None, f"{why} before training started")])
    return build_result(config.to_dict(), collector, status="stopped", wall_time_s=wall, workers=[])


def _spec(config: RunConfig) -> Any:
    """The declaration of the config's algorithm (`config.registry.AlgorithmSpec`)."""
    from .config.registry import specs
    return specs()[config.algorithm]


class RunWarning(UserWarning):
    """A run whose settings make its algorithm pointless (it still runs)."""


def _on_threads(cluster: Any) -> bool:
    """Whether the run's workers are threads of this process (`cluster="threads"`, or the
    transport `transport_for` chose for it): the memory check counts one process."""
    from .execution.transports.base import Transport
    return (isinstance(cluster, str) and cluster == "threads") or (
        isinstance(cluster, Transport) and getattr(cluster, "name", None) == "threads")


def _shm_is_here(cluster: Any) -> bool:
    """Whether the run's shared-memory segments would be in this machine's /dev/shm, so that
    preflight measures it here: a cluster the workbench starts (None, or the transport
    `transport_for` chose for one). Not on threads (no segments), and not for a Client, a
    cluster or an address the user hands over, which may be on another host: the Dask
    transport measures /dev/shm on the workers' host instead (`DaskTransport.check`)."""
    if cluster is None:
        return True
    from .execution.transports.base import Transport
    return isinstance(cluster, Transport) and getattr(cluster, "name", None) != "threads"


@contextlib.contextmanager
def _one_client(cluster: Any, config: RunConfig, simulated: bool = False) -> Iterator[Any]:
    """`cluster` for a sweep's or a grid's runs: one Client for all of them where `cluster`
    is a scheduler address or a cluster object (a run given either opens a client of its
    own and closes it), closed when they end; anything else as it is."""
    from .execution.transports.base import Transport
    if cluster is None or isinstance(cluster, Transport) or (isinstance(cluster, str) and cluster == "threads") \
            or simulated or config.simulate or _spec(config).in_process:
        yield cluster
        return
    from .execution.cluster import open_client
    client = open_client(cluster)
    try:
        yield client
    finally:
        if client is not cluster:   # ours (an address, a cluster object): only the client, never their cluster
            with contextlib.suppress(Exception):
                client.close()


def _check_cluster_answers(cluster: Any, config: RunConfig) -> None:
    """Raise ConfigError("cluster", ...) when `cluster` is a scheduler address the run would
    connect to and no Dask scheduler answers there (`preflight.check_reachable`): before
    preflight generates the data and builds the model, as `config.scheduler` is checked
    (a refused port is said at once, not after the slow steps). Not for "threads", a
    simulated run or an algorithm that runs in this process (no cluster is used)."""
    if not isinstance(cluster, str) or cluster == "threads" or config.simulate or _spec(config).in_process:
        return
    from .execution.preflight import check_reachable
    try:
        check_reachable(cluster)
    except ConfigError as exc:   # the argument is `cluster`
        raise ConfigError("cluster", exc.allowed, cluster) from None


def _check_sweep_cluster_answers(config: Any, cluster: Any, simulate: Any) -> None:
    """`sweep`'s scheduler, probed before `Sweep.plan` (which reads each point's dataset entry
    and plans its schedule): `cluster` given as an address (`_check_cluster_answers`), or with
    no cluster `config.scheduler` (`preflight.check_reachable`), as `run` and `grid` refuse one
    in a line before their slow steps. Arguments of the wrong type, and a simulated sweep, are
    left to the plan (it names them; a simulated sweep connects to nothing)."""
    if simulate is not False or not isinstance(config, (RunConfig, Mapping)):
        return
    if not isinstance(config, RunConfig):
        config = RunConfig.from_dict(dict(config))   # (the plan would raise the same ConfigError)
    if cluster is None and config.scheduler and not _spec(config).in_process:   # (as preflight checks it)
        from .execution.preflight import check_reachable
        check_reachable(config.scheduler)
        return
    _check_cluster_answers(cluster, config)


def _checked_args(config: Any, cluster: Any, on_record: Any, should_stop: Any) -> RunConfig:
    """`run`'s arguments, type-checked with the one-line messages the CLI prints."""
    if not isinstance(config, RunConfig):
        if not isinstance(config, Mapping):
            raise ConfigTypeError("config", "a RunConfig or a dict of its fields", config)
        config = RunConfig.from_dict(dict(config))
    for name, value in (("on_record", on_record), ("should_stop", should_stop)):
        if value is not None and not callable(value):
            raise ConfigTypeError(name, "a function, or None", value)
    if cluster is not None and not isinstance(cluster, str) and not hasattr(cluster, "scheduler_info") \
            and not hasattr(cluster, "scheduler_address") and not hasattr(cluster, "start"):   # start: a Transport
        raise ConfigTypeError("cluster", 'a Dask Client, a cluster, a scheduler address, "threads" or None', cluster)
    if isinstance(cluster, str) and cluster != "threads":
        try:
            check_scheduler_address(cluster)
        except ConfigError as exc:   # the argument is `cluster`, and "threads" is a string it takes too
            raise ConfigError("cluster", f'"threads", or a scheduler address ({exc.allowed})', cluster) from None
    return config


def save(result: RunResult, directory: str | Path, overwrite: bool = False, report: bool = True) -> Path:
    """Write the run directory (data files, then summary.json: the commit), then
    report.html when plotly is installed (`report`), rendered once the data is safe. A
    write error (disk full, quota) raises `RunDirError` with one line; the files written
    before it are kept. A run that streamed its steps to `directory` (`wb.run` with `out`)
    has written steps.csv already: saving it writes only the small files. A staging
    directory (`wb.run` with `overwrite` over a committed run: `results.claim_stage`) is
    committed, then swapped in for the run it replaces; that run is kept until then."""
    from .results.rundir import final_dir, replace_run_dir
    final = final_dir(directory)
    try:
        path = result.save(directory, overwrite=overwrite)
        if final != Path(directory):
            path = replace_run_dir(directory, final)
            if result.store is not None and result.store.directory is not None:
                result.store.directory = path   # its steps.csv (and spool) moved with the directory
    except FileExistsError:
        raise
    except OSError as exc:
        raise RunDirError(f"out: could not write the run directory {directory} ({exc.strerror or exc}: "
                          f"{exc.filename or directory}); what was written is kept, marked uncommitted "
                          "(no summary.json)") from None
    if report:
        try:
            write_run_report(result, path)
        finally:
            settle_steps(result, path)
    return path


def settle_steps(result: RunResult, path: str | Path) -> None:
    """Once a streamed run's directory is written (and its report, which reads the steps
    back): drop the raw spool beside steps.csv, and a long run's steps from memory (they
    are read back from steps.csv on use)."""
    if result.store is not None and result.store.saved_in(path):
        result.store.drop_spool()              # steps.csv holds the same rows
        if result.store.rows > KEEP_STEPS:
            result.forget_steps()


KEEP_STEPS = 1_000_000   # a saved run keeps up to this many step rows in memory (RunResult.steps)


def write_run_report(result: RunResult, path: str | Path) -> Path | None:
    """report.html for a saved run directory (None without the `lab` extra); a write
    error is one line (`RunDirError`): the run itself is already committed."""
    path = Path(path)
    try:
        from .ui.report import write_report
    except ImportError as exc:  # the `lab` extra is not installed: the data files are what matter
        from .util.extras import missing_extra
        print(f"note: no report.html in {path}: {missing_extra('report.html', exc)}", file=sys.stderr)
        return None
    try:
        return write_report(result, path / "report.html")
    except OSError as exc:
        raise RunDirError(f"out: the run is saved in {path}, but report.html could not be written "
                          f"({exc.strerror or exc}); `python -m workbench compare {path}` can render it later") from None


def load(directory: str | Path) -> RunResult:
    """Read a run directory."""
    if not isinstance(directory, (str, os.PathLike)):
        raise ConfigTypeError("directory", "a run directory path", directory)
    return RunResult.load(directory)


def noise_scale(run: Any, at: str = "final", rows: int = 2048, seed: int = 0) -> Any:
    """The gradient noise scale B_simple (McCandlish et al. 2018) of a run's model and data
    at its parameters: the batch beyond which a larger one takes about as many steps, from
    per-example gradients, with its jackknife band (`analysis.noise.gradient_noise_scale`).

    Args:
        run: a RunResult (`wb.run`, `wb.load`), a run directory, or a RunConfig (then
            `at` must be "initial").
        at: "final" (params.npy), "best" (params_best.npy) or "initial" (`init(seed)`).
        rows: training examples whose gradients are taken.
        seed: which examples.
    Returns:
        A `NoiseScale` (`.b_simple`, `.low`, `.high`, `.text()`).
    """
    from .analysis.noise import gradient_noise_scale
    if at not in ("final", "best", "initial"):
        raise ConfigError("at", '"final", "best" or "initial"', at)
    if isinstance(run, (str, Path)):
        run = load(run)
    if isinstance(run, (RunConfig, dict)):
        if at != "initial":
            raise ConfigError("at", '"initial" for a config (a run has trained parameters; a config has none)', at)
        return gradient_noise_scale(RunConfig.from_dict(run) if isinstance(run, dict) else run, rows=rows, seed=seed)
    config = RunConfig.from_dict({k: v for k, v in run.summary["config"].items() if k != "out"})
    params = None if at == "initial" else trained_params(run, at)
    return gradient_noise_scale(config, params, rows=rows, seed=seed, at=at if params is not None else "initial")


def grid(config: RunConfig | dict, values: Mapping[str, Sequence[Any]], seeds: Sequence[int] = (0,),
         metric: str | None = None, cluster: Any = None, out: str | Path | None = None,
         on_result: Callable[[dict, RunResult], None] | None = None, should_stop: Callable[[], bool] | None = None,
         progress: bool = True, overwrite: bool = False) -> Any:
    """Which settings learn best, and how sure that is: `config` run at every combination of
    `values` (config field -> values to try), once per seed, and tabulated per point over its
    seeds (`analysis.grid`: the metric's mean, deviation and range, the other numbers, and a
    verdict against the best point by two standard errors of the difference).

    Everything is checked before the first run (every combination a valid config). The seeds
    are the outer loop, so a grid stopped part-way (`should_stop`, a signal to the CLI) has
    its points' first seeds. With `out`: one run directory per run (`out/lr0.01-s0`, no
    report.html: `compare` renders any of them), `grid_runs.csv` (a row per run) and
    `grid.csv` (the table), rewritten after every run. A warning its runs raise is shown once.

    Args:
        config: the base run (a RunConfig or a dict of its fields).
        values: e.g. {"lr": [0.01, 0.03, 0.1], "batch_size": [64, 256]}.
        seeds: the seeds each point runs with (its data order and initial parameters).
        metric: what ranks the points: "final_test_accuracy" (higher is better; the default),
            "final_test_loss" (the default for a language model) or "best_test_loss".
        cluster, should_stop: as `run`'s.
        out: the grid's folder (None: nothing written). A folder holding results already
            is refused (`preflight.check_out`) unless `overwrite`, which replaces a grid's
            and, once the new grid ends, removes the earlier runs and tables it did not replace.
        on_result: called after each run with (its grid_runs.csv row, RunResult).
        progress: one bar over the grid's runs.
    Returns:
        The table (a DataFrame); `analysis.grid.verdict_text(table, plan)` says it in words.
        `table.attrs["status"]`: "completed", or "stopped" (`should_stop`, a run stopped, or
        a Ctrl-C: the table of the runs that ended; the first one is a stop request,
        `interrupt_stops`).
    """
    from .analysis.grid import GridPlan
    if isinstance(config, dict):
        config = RunConfig.from_dict(config)
    plan = GridPlan.make(config, values, seeds, metric)
    return run_grid(plan, cluster=cluster, out=out, on_result=on_result, should_stop=should_stop, progress=progress,
                    overwrite=overwrite)


def run_grid(plan: Any, cluster: Any = None, out: str | Path | None = None,
             on_result: Callable[[dict, RunResult], None] | None = None, should_stop: Callable[[], bool] | None = None,
             progress: bool = True, overwrite: bool = False) -> Any:
    """Run a grid planned (and so checked) already, `analysis.grid.GridPlan.make`: what
    `grid` does after its checks (the CLI calls it once it has checked the machine)."""
    import pandas as pd

    from .analysis.grid import GridPlan, combine
    from .data import DataError
    from .execution.progress import bars_allowed, sweep_bar
    from .results.rundir import remove_stale
    stale = _claim_results(out, overwrite, "grid")
    _check_cluster_answers(cluster, plan.config)   # a refused address before every point's preflight
    for point in plan.points():   # every combination against the data and the machine, before any run
        try:
            preflight(plan.config_at(point, plan.seeds[0]).replace(out=None))
        except (ConfigError, DataError) as exc:
            raise ConfigError("values", f"combinations that make a valid run ({GridPlan.label(point)}: "
                                        f"{str(exc).splitlines()[0]})", GridPlan.label(point)) from None
    rows: list[dict] = []
    table = pd.DataFrame()
    bar = sweep_bar(plan.n_runs, f"grid of {plan.config.algorithm}") if progress and bars_allowed() else None
    whole = False
    try:
        with interrupt_stops(should_stop) as stop, stops_on_interrupt() as interrupted, \
                _one_client(cluster, plan.config) as cluster:   # one client for every run (an address given)
            whole = _grid_runs(plan, cluster, out, on_result, stop, bar, rows)
        whole = whole and not interrupted
    finally:
        if bar is not None:
            bar.close()
    if out is not None and stale and whole:   # the earlier grid's runs and tables this one did not replace
        remove_stale(out, stale, {"grid.csv", "grid_runs.csv", *(Path(r["run_dir"]).name for r in rows)})
    table = combine(rows, plan) if rows else table
    table.attrs["status"] = "completed" if whole else "stopped"
    return table


def _claim_results(out: str | Path | None, overwrite: bool, kind: str) -> set[str]:
    """Check `out` for a sweep's or a grid's results, before any run (`preflight.check_out`:
    the one rule for run, sweep and grid); returns the earlier results' entries there (with
    `overwrite`) that the new ones must replace or remove."""
    if out is None:
        return set()
    from .execution.preflight import check_out
    check_out(out, overwrite=overwrite, kind=kind)
    from .results.rundir import stale_results
    return stale_results(out, kind)


def _grid_runs(plan: Any, cluster: Any, out: str | Path | None, on_result: Any, should_stop: Any, bar: Any,
               rows: list[dict]) -> bool:
    """The grid's runs, seeds outermost; `rows` gets each run's grid_runs.csv row. Whether
    it ran every one (False: stopped)."""
    import pandas as pd

    from .analysis.grid import combine, grid_row
    from .util.fileio import atomic_write
    with warnings_once(), stops_on_interrupt() as interrupted:   # each run's warnings once, not once a run
        for seed in plan.seeds:   # (a first Ctrl-C is a stop request: `interrupt_stops`, in should_stop)
            for point in plan.points():
                if should_stop is not None and should_stop():
                    return False
                run_dir = None if out is None else str(Path(out) / plan.slug(point, seed))
                cfg = plan.config_at(point, seed)
                result = run(cfg.replace(out=run_dir) if run_dir else cfg, cluster=cluster,
                             should_stop=should_stop, progress=False, overwrite=True, report=False)
                rows.append(grid_row(result, point, seed, run_dir))
                if out is not None:
                    atomic_write(Path(out) / "grid_runs.csv", pd.DataFrame(rows).to_csv(index=False))
                    atomic_write(Path(out) / "grid.csv", combine(rows, plan).to_csv(index=False))
                if bar is not None:
                    bar.update(1)
                if on_result is not None:
                    on_result(rows[-1], result)
                if result.status == "stopped":
                    return False
    return not interrupted


def sweep(config: RunConfig | dict, workers: Sequence[int] = (1, 2, 4), mode: str = "strong",
          cluster: Any = None, on_result: Callable[[dict, RunResult], None] | None = None,
          out: str | Path | None = None, should_stop: Callable[[], bool] | None = None,
          progress: bool = True, simulate: bool = False, rounds: int | None = None,
          max_rounds: int | None = None, budget_s: float | None = None,
          run_point: Callable[..., RunResult] | None = None, overwrite: bool = False) -> Any:
    """Run `config` at each worker count and tabulate throughput, speedup and efficiency.

    The points are measured interleaved, at least `rounds` times (1, 2, 1, 2, 1, 2 for
    workers [1, 2] and 3 rounds): a shared machine's speed drifts, and interleaving spreads
    the drift over every point instead of biasing one. Then each point whose rounds are not
    yet within +-5% of their median runs again, still interleaved, until they are or the
    budget runs out (`max_rounds` rounds, `budget_s` seconds; `workbench.measure.Repeats`).
    Each row is the median over its rounds with the range (`samples_per_s_lo` / `_hi`,
    `spread`); a point not known to +-5%, or whose range overlaps the first point's, is
    marked not resolved, in words, with its spread (`resolution_note`;
    `workbench.analysis.sweep.combine_rounds`).

    Strong scaling keeps the global batch; weak scaling grows it with the workers. The
    configs, rows and the speedup/efficiency maths are `workbench.analysis.sweep`'s; this
    function runs the points (it sits above `run`, so the analysis module never imports it).

    Args:
        config: the run (a RunConfig or a dict of its fields).
        workers: worker counts, e.g. [1, 2, 4] or "1,2,4"; speedup is against the first.
        mode: "strong" (fixed global batch) or "weak" (batch_size * P / workers[0]).
        cluster: passed to `run` ("threads" runs in-process); default: one local
            cluster with max(workers) workers, reused by every run.
        on_result: called after each run with (row so far, RunResult): live figures.
        out: a folder for the run directories (out/w{P}) and out/sweep.csv, rewritten
            after every run so a stopped sweep keeps what it measured. A folder holding
            results already is refused (`preflight.check_out`) unless `overwrite`, which
            replaces a sweep's and, once the new sweep ends, removes the earlier runs it
            did not replace (a `w2` of workers 1,2 when the new one is 1,4).
        should_stop: polled by each run and between runs; True ends the sweep.
        progress: draw a bar over the runs (a widget in a notebook, text in a terminal)
            and one for the run in progress; False for none.
        simulate: run every point on the simulated cluster (also when `config.simulate`):
            `cpus` or `gpus` count virtual workers (up to 1024), no Dask cluster starts,
            and throughput is in samples per *virtual* second.
        rounds: how many times each point runs at least, interleaved (default 3; 1
            simulated: virtual time is deterministic). `out` holds round 1 as out/w{P} and
            the others as out/w{P}-r{k}.
        max_rounds: the most rounds a point runs while its rate is not known to +-5%
            (default `measure.MAX_ROUNDS`, 8; at least `rounds`; simulated: `rounds`).
        budget_s: also stop repeating once this many seconds have passed since the first
            round (checked between rounds); None: no time cap beyond `max_rounds`.
        run_point: runs one point, called as `run` is (config, cluster=, should_stop=,
            progress=, overwrite=); default `run`. The dashboard simulates each point in a
            child process with it (`ui.simproc`).
    Returns:
        A pandas DataFrame, one row per worker count, with `SWEEP_COLUMNS`;
        `table.attrs["status"]` is "completed", or "stopped" (`should_stop`, a run stopped,
        or a Ctrl-C, the first one taken as a stop request, `interrupt_stops`: the points
        that ended are kept and written).
    Raises:
        ConfigError: a bad argument, before any run starts.
    """
    from .analysis.sweep import Sweep

    _check_sweep_cluster_answers(config, cluster, simulate)   # before the plan reads the dataset's entry
    plan = Sweep.plan(config, workers, mode, simulate=simulate, rounds=rounds, max_rounds=max_rounds,
                      budget_s=budget_s)
    return run_sweep(plan, cluster=cluster, on_result=on_result, out=out, should_stop=should_stop,
                     progress=progress, run_point=run_point, overwrite=overwrite)


@contextlib.contextmanager
def interrupt_stops(should_stop: Callable[[], bool] | None) -> Iterator[Callable[[], bool]]:
    """A sweep's or a grid's runs: the first Ctrl-C (a kernel's interrupt; SIGINT whose
    handler raises KeyboardInterrupt) is taken as a stop request, as the CLI's sweep takes
    it: noted, not raised. Yields the should_stop the sweep and each of its runs poll (the
    caller's, or the interrupt): the run in progress stops and is kept, and no other starts.

    Raised, the interrupt landed between two statements of whatever ran: a run that had just
    ended was dropped before its row was kept, and one that landed after a run's loops had
    ended was taken by that run (nothing left to stop) and the sweep went on to its next
    point. A second interrupt is raised as usual (the run in progress stops waiting for its
    loops; between runs `stops_on_interrupt` ends the sweep). Off the main thread, or where
    SIGINT is not handled by Python code, the caller's should_stop is yielded as it is."""
    import signal
    import threading
    got: list[str] = []

    def stop() -> bool:
        return bool(got) or (should_stop is not None and bool(should_stop()))
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield should_stop if should_stop is not None else (lambda: False)
        return

    def first_as_request(signum: int, frame: Any) -> None:
        try:
            previous(signum, frame)
        except KeyboardInterrupt as exc:
            if got:
                raise
            got.append(str(exc) or "KeyboardInterrupt")
    signal.signal(signal.SIGINT, first_as_request)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def stops_on_interrupt() -> Iterator[list[str]]:
    """A sweep's or a grid's own code (while its cluster starts, between its runs): a
    KeyboardInterrupt (Ctrl-C, a kernel's interrupt) ends the block as a stop, as `run`
    returns a run it stops, instead of raising past what was measured. Yields the list
    the interrupt is noted in (empty: none came)."""
    got: list[str] = []
    try:
        yield got
    except KeyboardInterrupt as exc:
        got.append(str(exc) or "KeyboardInterrupt")


@contextlib.contextmanager
def warnings_once(show: Callable[[str], None] | None = None) -> Iterator[None]:
    """In this block each `RunWarning` is shown once, however many runs raise it (a sweep's
    points and rounds repeat their config's warnings); `show(message)` shows it instead of
    Python's warning format (the CLI prints "warning: ..."). Other warnings pass as they are.

    >>> with warnings_once(show=print):
    ...     for _ in range(3):
    ...         _warnings.warn("tau is longer than the run", RunWarning)
    tau is longer than the run
    """
    seen: set[str] = set()
    with _warnings.catch_warnings():
        _warnings.simplefilter("always", RunWarning)
        previous = _warnings.showwarning

        def showwarning(message: Any, category: type, filename: str, lineno: int, file: Any = None,
                        line: str | None = None) -> None:
            if issubclass(category, RunWarning):
                text = str(message)
                if text in seen:
                    return
                seen.add(text)
                if show is not None:
                    show(text)
                    return
            previous(message, category, filename, lineno, file, line)
        _warnings.showwarning = showwarning
        yield


def run_sweep(plan: Any, cluster: Any = None, on_result: Callable[[dict, RunResult], None] | None = None,
              out: str | Path | None = None, should_stop: Callable[[], bool] | None = None,
              progress: bool = True, run_point: Callable[..., RunResult] | None = None,
              overwrite: bool = False) -> Any:
    """Run a sweep planned (and so checked) already, `analysis.sweep.Sweep.plan`: what
    `sweep` does after its checks, and what the CLI calls once it has checked the largest
    point against the machine. The arguments are `sweep`'s. A warning its runs raise is
    shown once (`warnings_once`), not once a point and round.

    Returns:
        A pandas DataFrame, one row per worker count, with `SWEEP_COLUMNS`.
    """
    import pandas as pd

    from .analysis.sweep import SWEEP_COLUMNS
    stale = _claim_results(out, overwrite, "sweep")
    if not plan.simulated:   # a refused address named as the argument, `cluster`, before the cluster steps
        _check_cluster_answers(cluster, plan.config)
    table, written, stopped = pd.DataFrame(columns=list(SWEEP_COLUMNS)), set(), True
    with interrupt_stops(should_stop) as stop, stops_on_interrupt(), warnings_once(), \
            _one_client(cluster, plan.config, plan.simulated) as cluster:   # (a first Ctrl-C: a stop request)
        table, written, stopped = _run_sweep(plan, cluster, on_result, out, stop, progress, run_point)
        stopped = stopped or (should_stop is not None and bool(should_stop()))   # (the caller's; an interrupt
        #                   during the last run, which ended all the same, leaves nothing unrun: completed, as grid's)
    whole = not stopped and len(table) and "status" in table and (table["status"] != "stopped").all()
    table.attrs["status"] = "completed" if whole else "stopped"
    if out is not None and stale and whole:   # the earlier sweep's runs this one did not replace (a stopped
        #                                       sweep keeps them: it did not replace them yet)
        from .results.rundir import remove_stale
        remove_stale(out, stale, {"sweep.csv", *written})
    return table


def _run_sweep(plan: Any, cluster: Any, on_result: Callable[[dict, RunResult], None] | None,
               out: str | Path | None, should_stop: Callable[[], bool] | None,
               progress: bool, run_point: Callable[..., RunResult] | None) -> tuple[Any, set[str], bool]:
    """The sweep's points; returns its table, the names of the run directories it wrote and
    whether it was stopped (a run stopped, `should_stop`, or an interrupt between runs)."""
    import pandas as pd

    from .analysis.sweep import SWEEP_COLUMNS, combine_rounds
    from .util.fileio import atomic_write

    if plan.simulated:
        _check_simulated_sweep(cluster)
    repeats = plan.repeats()
    rows: list[dict] = []
    written: set[str] = set()
    table = pd.DataFrame(columns=list(SWEEP_COLUMNS))
    stopped = False
    with stops_on_interrupt() as interrupted:   # a Ctrl-C between runs (or while the cluster starts)
        table, stopped = _sweep_points(plan, cluster, on_result, out, should_stop, progress, run_point,
                                       repeats, rows, written, table)
    stopped = stopped or bool(interrupted)
    if rows and interrupted:   # (the table and its file as of the last run that ended)
        table = combine_rounds(rows, repeats)
    if out is not None and (not rows or interrupted):   # stopped before the first point finished: the table
        atomic_write(Path(out) / "sweep.csv", table.to_csv(index=False))   # says so, empty
    return table, written, stopped


def _sweep_points(plan: Any, cluster: Any, on_result: Any, out: Any, should_stop: Any, progress: bool,
                  run_point: Any, repeats: Any, rows: list[dict], written: set[str], table: Any) -> tuple:
    """`_run_sweep`'s cluster, warm-up and points; `rows` and `written` grow as runs end.
    Returns (the table, whether a run or `should_stop` stopped it)."""
    from .analysis.sweep import combine_rounds, scaling_row, worker_field
    from .util.fileio import atomic_write

    config, mode, rounds, simulated = plan.config, plan.mode, plan.rounds, plan.simulated
    ws = list(plan.workers)
    in_process = _spec(config).in_process   # sgd: no cluster to start or warm
    if cluster is None and not in_process and not simulated:   # simulated: each point its own
        from .execution.cluster import session_client
        field = worker_field(config)
        cluster = session_client(max(ws) if field == "cpus" else 0, max(ws) if field == "gpus" else 0,
                                 config.scheduler)
    # Warm every worker first (imports, data placement): the first run that touches a cold
    # worker spends ~10 s setting it up inside the other workers' training span (they wait
    # in the first exchange), which the first measured point would otherwise include.
    # (Virtual time has no cold workers: a simulated sweep skips it.)
    stopped = False
    if not in_process and not simulated:
        with _warnings.catch_warnings():   # its checks are of a 2-step run nobody asked for ("a warmup
            _warnings.simplefilter("ignore", RunWarning)   # longer than the run (2 steps)"): the points say the config's
            warm = run(plan.largest.replace(steps=2), cluster=cluster, progress=False,
                       should_stop=should_stop)
        stopped = warm.status == "stopped"
    from .execution.progress import bars_allowed, sweep_bar
    bar = sweep_bar(len(ws) * rounds, f"{mode} sweep of {config.algorithm}") if progress and bars_allowed() else None
    try:
        while todo := repeats.next_round():
            k = repeats.round - 1
            if bar is not None and k >= rounds:   # a repeat beyond the first rounds: the bar grows
                bar.total += len(todo)
                bar.refresh()
            for w in todo:
                cfg = plan.config_at(w)
                if stopped or (should_stop is not None and should_stop()):
                    stopped = True
                    break
                if bar is not None:
                    bar.set_postfix_str(f"{worker_field(config)}={w}" + (f", round {k + 1}" if rounds > 1 else ""))
                run_dir = None if out is None else str(Path(out) / (f"w{w}" if k == 0 else f"w{w}-r{k + 1}"))
                if run_dir is not None:
                    written.add(Path(run_dir).name)
                result = (run_point or run)(cfg.replace(out=run_dir) if run_dir else cfg, cluster=cluster,
                                            should_stop=should_stop, progress=bar is not None,
                                            overwrite=True)  # under the sweep's folder: a sweep run
                                                             # again replaces its own
                if bar is not None:
                    bar.update(1)
                rows.append({**scaling_row(result, w, mode, run_dir), "round": k})
                repeats.add(w, rows[-1]["samples_per_s"] if result.status == "completed" else None)
                table = combine_rounds(rows, repeats)
                if out is not None:
                    atomic_write(Path(out) / "sweep.csv", table.to_csv(index=False))
                if on_result is not None:
                    on_result(table[table["workers"] == w].iloc[0].to_dict(), result)
                stopped = result.status == "stopped"
            if stopped:
                break
        if rows and repeats.out_of:   # the budget ran out after the last run: its notes say so
            table = combine_rounds(rows, repeats)
            if out is not None:
                atomic_write(Path(out) / "sweep.csv", table.to_csv(index=False))
    finally:
        if bar is not None:
            bar.close()
    return table, stopped


def _check_simulated_sweep(cluster: Any) -> None:
    """A simulated sweep's cluster, before any point runs (its config: `Sweep.plan`)."""
    if cluster is not None:
        raise ConfigError("cluster", "None with simulate (each point runs on its own virtual cluster, in this "
                          "process)", cluster if isinstance(cluster, str) else type(cluster).__name__)
