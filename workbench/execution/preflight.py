"""Every check that can fail before a worker starts (docs/architecture.md, step 1 of a run).

`preflight(config)` raises `ConfigError` (exit code 2 in the CLI) for anything known to
fail once workers run, and returns warnings for settings that run but make the algorithm
pointless (no elastic exchange ever happens, an lr past the curvature's stability bound).
Order matters: cheap checks first, the memory estimate before the dataset is loaded (a
`--n-samples 1000000000000` must not be generated to be refused).
"""
from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ConfigError, RunConfig, is_text_dataset
from ..config.registry import specs
from ..maths.protocol import check_model
from ..util.machine import SHARED_PAGES, WORKER_PRIVATE, beside_workers

MAX_EXCHANGE_S = 60.0          # the network emulator may slow an exchange to this, not more
# What the processes of a run hold before its data and model: measured, in `util.machine`
# (WORKER_PRIVATE, SHARED_PAGES, KERNEL_PRIVATE, JUPYTER_SERVER; `beside_workers`).
WORKER_OVERHEAD = WORKER_PRIVATE + SHARED_PAGES   # a worker as its own rss counts it (Dask's limit): 118-120 MB
# Address space a Dask process maps beyond what it has resident (thread stacks, glibc's
# per-thread arenas): a digits run of 2 workers under `ulimit -v` failed to start threads at
# 800 MB and ran at 1000 MB (this and WORKER_OVERHEAD: 762 MiB, as before the overhead was measured).
DASK_ADDRESS_SPACE = (762 << 20) - WORKER_OVERHEAD
MEMORY_SHARE = 0.8             # of a worker's memory (Dask pauses a worker at 80%) or an address space the estimate may fill
CGROUP_SHARE = 0.9             # of a cgroup's or the machine's memory the processes' sum may fill: its parts are
#                                upper bounds of what was measured (1.5x at 4.35M parameters); 10% for what the
#                                sum leaves out (the allocator's slack, page cache the kernel must reclaim first)


def preflight(config: RunConfig, overwrite: bool = False, shm: bool = True, threads: bool = False) -> list[str]:
    """Raise `ConfigError`/`DataError` for anything that would fail once workers run; return warnings.

    Checks the output directory and that a given scheduler answers as one (before anything
    slow: a refused port is reported before a dataset is generated), estimates memory before loading anything, loads the
    dataset (which checks files and checksums), builds the model (model/dataset pairing;
    one step of it on a few rows: `maths.protocol.check_model`) and the schedule (warmup against the run length), checks asked-for GPUs exist,
    and that emulated exchanges end in reasonable time.
    Every call checks again (the CLI hands its result to `api.run(checked=...)` instead).
    `shm=False`: the run maps no shared memory here (the thread transport), so this
    machine's /dev/shm is not checked. `threads`: the workers are threads of this process
    (`cluster="threads"`), whose memory is checked as one process's.
    """
    if config.out:
        check_out(config.out, overwrite=overwrite)
    spec = specs()[config.algorithm]
    if config.scheduler and not spec.in_process:   # sgd runs in this process: no scheduler asked. Before the
        check_reachable(config.scheduler)          # dataset and the model: a refused port is said at once
    from ..problem import Problem

    problem = Problem.from_config(config)
    plan = problem.plan   # the schedule, from the dataset's entry: a batch larger than the training set is refused
    #                       as that, not as the memory its pass would need
    check_memory(config, workers_memory=None, threads=threads)   # from the dataset's entry and the model's size: nothing loaded
    check_timing_model_fits(config)
    data, model = problem.data, problem.model   # loads and checks the data
    params = check_model(model, data.X_train, data.y_train, config, seed=config.seed)   # one step: the protocol
    check_evaluation(model, data, params)
    if config.simulate:   # a model with no FLOPs is timed on this machine's core: CPU workers of core / local
        from ..sim.costs import check_charge
        check_charge(config, model)
    if config.gpus not in (0, "auto") and not config.simulate:   # virtual GPUs need no GPU
        from ..maths.backend import gpu_count, gpu_install_hint
        have = gpu_count()
        if have < config.gpus:
            raise ConfigError("gpus", f"at most the {have} visible GPU(s) on this machine "
                              f"(GPU workers need CuPy and dask-cuda: {gpu_install_hint()})", config.gpus)
    check_emulator(config, model.n_params)
    if shm and config.scheduler is None and not config.simulate and not spec.in_process:   # a local cluster: here
        check_shm(config, model)                                                     # /dev/shm holds its segments
    return run_warnings(config, plan.total_steps, data=data, model=model, plan=plan)


def check_evaluation(model: Any, data: Any, params: Any) -> None:
    """Raise ModelError when a model of the user's (not a built-in, whose tests cover any
    number of rows) fails on the largest call the run's evaluation makes (`maths.metrics.
    Evaluator.largest_call`: up to `EVAL_CHUNK` rows): scored once on `params` here, one
    forward pass, rather than at the first evaluation, after training (an epoch by default)."""
    from ..maths.metrics import EvaluationError, Evaluator
    from ..maths.models import Model, ModelError
    if isinstance(model, Model):
        return
    evaluator = Evaluator(model, data)
    X, y = evaluator.largest_call()
    name = getattr(model, "spec", None) or getattr(model, "name", type(model).__name__)
    try:
        evaluator.check(params)
    except EvaluationError as exc:
        raise ModelError(f"a model whose predict and loss take the {X.shape[0]:,} rows the run's evaluation calls "
                         f"them on at once ({exc.cause}; a model written for fewer rows can split X into "
                         "smaller pieces inside predict and loss)", name) from None


def check_timing_model_fits(config: RunConfig) -> None:
    """Raise ConfigError("timing_model", ...) when a simulated GPU worker charged as a
    published language model cannot hold its weights, gradients, optimiser state and the
    activations of its slice of the batch (`sim.profiles.check_fits`)."""
    if not (config.simulate and config.timing_model and config.gpus):
        return
    from ..sim import profiles, timing_models
    profiles.check_fits(timing_models.TIMING_MODELS[config.timing_model], profiles.DEVICES[config.resolved_device],
                        slice_rows(config), timing_models.state_floats(config.optimizer, config.momentum),
                        accumulate=config.accumulate)


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Raise ConfigError("scheduler", ...) unless a Dask scheduler answers at `address`
    within `timeout` (a bounded handshake, not just an open TCP port)."""
    from ..config import check_scheduler_address
    from .cluster import probe_scheduler
    check_scheduler_address(address)
    probe_scheduler(address, timeout=timeout)


# ------------------------------------------------------------------------------ output
def check_out(out: str | os.PathLike, overwrite: bool = False, kind: str = "run") -> Path:
    """Raise ConfigError("out", ...) unless a `kind` ("run", "sweep" or "grid") can write
    its results at `out`: the one rule for the three commands' `--out`.

    Allowed: a path that does not exist yet and whose nearest existing parent is a
    writable directory, or an existing writable directory that holds no results (no
    summary.json, sweep.csv or grid_runs.csv: `results.rundir.results_held`; for a run, nor a
    killed run's checkpoints or, killed before its first, its step rows: `killed_run`), or (with `overwrite`) holds a `kind`'s results to replace. Another command's results are never
    replaced (a sweep into a run's directory); a sweep or grid into a folder holding run
    directories needs `overwrite` (its points are run directories there). Never creates anything.
    """
    text = os.fspath(out)
    if not text or "\x00" in text or len(text) > 4096:
        raise ConfigError("out", "a directory path (no NUL bytes, at most 4096 characters)", text)
    path = Path(text).expanduser()
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError) as exc:
        raise ConfigError("out", f"a path that resolves ({exc.__class__.__name__})", text) from None
    if resolved.parts[:2] in (("/", "proc"), ("/", "sys"), ("/", "dev")):
        raise ConfigError("out", "a directory outside /proc, /sys and /dev", text)
    if any(len(part.encode(errors="surrogateescape")) > 255 for part in resolved.parts):
        raise ConfigError("out", "a path whose names are at most 255 bytes each", text)
    if resolved.exists():
        if not resolved.is_dir():
            raise ConfigError("out", f"a directory to write the {kind} into (this is an existing file)", text)
        if not os.access(resolved, os.W_OK | os.X_OK) or not _can_create_in(resolved):
            raise ConfigError("out", "a directory you can write to", text)
        from ..results.rundir import results_held
        for held, marker in results_held(resolved):
            if held != kind:
                raise ConfigError("out", f"a directory for a {kind}'s results (this one holds a {held}'s, {marker}: "
                                         "name another directory)", text)
            if not overwrite:
                raise ConfigError("out", f"a directory that does not hold a {kind} already (pass --overwrite, or "
                                         f"overwrite=True, to replace that {kind})", text)
        if kind == "run" and not overwrite and not (resolved / "summary.json").exists():
            from ..checkpoint import listed
            saved = listed(resolved)
            if saved:   # a killed run's: a new run here would leave them to be resumed over its own records
                raise ConfigError("out", "a directory that does not hold a run already (it holds the checkpoints of a "
                                         f"run that was killed, the newest {saved[-1].name}: `run --resume {text}` "
                                         "continues it; pass --overwrite, or overwrite=True, to replace it)", text)
            from ..results.rundir import killed_run, killed_text
            killed = killed_run(resolved)
            if killed is not None and killed["rows"]:   # computed work: never replaced unasked (nor passed over)
                raise ConfigError("out", f"a directory that does not hold a run already ({killed_text(text, killed)}: "
                                         "pass --overwrite, or overwrite=True, to replace it, or name another "
                                         "directory)", text)
        if kind != "run" and not overwrite:   # its points are run directories in it: one there already would be
            #                                   replaced by a point of the same name (a run's w2/ by the sweep's)
            runs = sorted(p.name for p in resolved.iterdir() if p.is_dir() and (p / "summary.json").exists())
            if runs:
                raise ConfigError("out", f"a directory without runs in it (it holds {', '.join(runs[:3])}"
                                         f"{', ...' if len(runs) > 3 else ''}: pass --overwrite, or overwrite=True, "
                                         f"to let the {kind} replace them)", text)
        return resolved
    parent = resolved.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError("out", f"a path under a directory ({parent} is a file)", text)
    if not os.access(parent, os.W_OK | os.X_OK) or not _can_create_in(parent):
        raise ConfigError("out", f"a path under a directory you can write to ({parent} is not writable)", text)
    return resolved


def _can_create_in(directory: Path) -> bool:
    """Whether a file can be made there: also catches a read-only filesystem, which
    `os.access` does not report to root."""
    import tempfile
    try:
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


# ------------------------------------------------------------------------------ memory
def memory_estimate(config: RunConfig) -> dict[str, int]:
    """Bytes one worker needs, roughly: {"data", "params", "activations", "total", "n_params"}.

    data: the whole training and test set as float32 (every worker holds it), plus the
    float64 draws of the generated datasets while they are made. params: the parameter
    vector times the copies a run keeps (parameters, gradient, momentum, optimiser scratch,
    allreduce slots, the server's or centre's copy, the evaluator's). activations: a
    forward and backward pass over the largest slice of a batch (a micro-batch of it with
    `accumulate`, `pass_rows`) or over the evaluation chunk.
    """
    from ..data import dataset_info
    from ..data.files import MMAP_BYTES, ArrayFileInfo
    from ..problem import Problem

    problem = Problem.from_config(config)   # its shape and model come from the dataset's entry: nothing loaded
    shape, model = problem.shape, problem.model
    n, f, c = shape.n_train + shape.n_test, shape.n_features, shape.n_classes
    info = dataset_info(config.dataset)
    generated = info.generated
    data = n * (f + 1) * 4 + (n * f * 8 if generated else 0)
    if isinstance(info, ArrayFileInfo) and n * f * 4 > MMAP_BYTES:
        data = n * 4 * 2   # a large file of yours is memory-mapped: its pages are the host's, shared by its workers
    params = model.n_params * 4 * 8
    widths = (f, *config.model_hidden, c) if config.model == "mlp" else (f, c)
    batch = pass_rows(config)                # a training pass's rows: a (micro-batch of a) worker's slice
    evaluated = 1024
    if info.tokens:                          # X float32 and y int64 per token; the draws' int64 sequences
        from ..maths.metrics import EVAL_CHUNK
        data = n * f * 12 + (n * (f + 1) * 8 if generated else 0)
        evaluated = max(EVAL_CHUNK // f, 1)  # one evaluation chunk's sequences

    def activations(rows: int) -> int:
        rows = min(rows, n)                  # (the run refuses a batch larger than the training set)
        if hasattr(model, "activation_bytes"):   # the GPT counts what its backward pass keeps
            return model.activation_bytes(rows) * 2                  # and as much again for the backward's buffers
        if config.model == "cnn":
            ch = max(config.model_hidden) if config.model_hidden else 32
            return rows * f * ch * 4 * 4
        return rows * sum(widths) * 4 * 4
    trained, scored = activations(batch), activations(evaluated)
    act = max(trained, scored)
    total = data + params + act + WORKER_OVERHEAD
    return {"data": data, "params": params, "activations": act, "total": total, "n_params": model.n_params,
            "pass_activations": trained, "eval_activations": scored, "pass_rows": min(batch, n),
            "n_train": shape.n_train}


def slice_rows(config: RunConfig) -> int:
    """The most rows one worker computes of a global batch: an equal share (its ceiling),
    the whole batch where the shares are not known before the run (split by speed, or the
    workers of a scheduler not yet asked)."""
    workers = specs()[config.algorithm].workers or config.n_workers
    if not workers or getattr(config, "split", "equal") == "speed":
        return config.batch_size
    return -(-config.batch_size // workers)


def pass_rows(config: RunConfig) -> int:
    """The rows of one training pass of a worker: its slice, or the largest micro-batch of it
    with `accumulate` (`maths.accumulate.micro_batches`)."""
    return -(-slice_rows(config) // config.accumulate)


def check_memory(config: RunConfig, workers_memory: list[float] | None = None,
                 threads: bool = False) -> dict[str, int]:
    """Raise ConfigError naming the field to shrink when a worker cannot hold the run.

    `workers_memory`: each worker's memory limit in bytes (0 or None: unknown); default
    (a local cluster, or the single-process reference) the machine's or the cgroup's memory
    shared out as the local cluster shares it (`cluster.worker_memory_limit`). Each worker
    is held to `MEMORY_SHARE` of its limit with its rss (`memory_estimate`'s total); the
    processes on this machine together (`beside_workers()`, the client's copy of the dataset,
    its model checked on one step and an evaluation chunk, each local worker's private pages
    and its run's) to `CGROUP_SHARE` of the cgroup's limit and of the available memory.
    A simulated run, or one on `threads` of this process, is one process: the dataset once,
    each worker's parameter copies and the activations of all their slices at once.
    """
    est = memory_estimate(config)
    import psutil
    machine = psutil.virtual_memory()
    if config.simulate or (threads and not specs()[config.algorithm].in_process):
        # One process: the dataset once, each virtual worker its parameter copies, and the
        # activations of all the workers' slices at once (the lockstep and the pool stack
        # every slice of a batch, or its micro-batches, in one pass) or of an evaluation chunk.
        workers = config.n_workers or 1
        kind = "virtual worker" if config.simulate else "worker thread"

        def sim_over(e: dict[str, int]) -> list[tuple[float, float, float, str]]:
            need = (e["data"] + workers * e["params"] + max(workers * e["pass_activations"], e["eval_activations"])
                    + beside_workers())
            budgets = [(need, have, what, share) for _, have, what, share in limit_budgets(need, need)]
            budgets.append((need, machine.available, "this machine's available memory", CGROUP_SHARE))
            return _over(budgets)
        over = sim_over(est)
        if over:
            _, need, have, what, share = max(over, key=lambda o: o[0])
            _refuse_or_accumulate(config, sim_over, what, have, need, share)
            alone = est["data"] + est["params"] + est["eval_activations"] + beside_workers()   # any number of workers
            if alone > share * have:   # fewer workers cannot help: name what makes the size
                field, value = _memory_field(config, est, per_process=True)
                raise ConfigError(field, f"a size whose run fits in {_share_of(what, have, share)}: even one "
                                  f"{kind} needs about {_gib(alone)} ({_parts(est, est['eval_activations'])} "
                                  "to score one evaluation chunk)", value)
            field, value = ("cpus", config.cpus) if config.cpus >= (config.gpus or 0) else ("gpus", config.gpus)
            raise ConfigError(field, f"fewer {kind}s: {workers} need about {_gib(need)} in this process, "
                              f"more than {_share_of(what, have, share)} allows", value)
        return est
    local = config.scheduler is None or specs()[config.algorithm].in_process
    dask_here = config.scheduler is None and not specs()[config.algorithm].in_process
    rlimit = address_space_limit()
    floor = (WORKER_OVERHEAD + DASK_ADDRESS_SPACE) / MEMORY_SHARE
    if dask_here and rlimit is not None and rlimit < floor:   # no model is small enough: name the limit itself
        raise ConfigError("ulimit -v", f"at least {_gib(floor)} of address space per process for a run on local "
                          "Dask workers (they inherit the limit; their threads' stacks and allocator arenas need "
                          "it: 0.8 GB could not start them)", _gib(rlimit))
    n_local = (config.n_workers or 1) if local else 0
    if workers_memory:
        per_worker = min(m for m in workers_memory if m) if any(workers_memory) else None
    elif local and n_local:   # shared out as the local cluster shares it: what lives beside the workers first
        from .cluster import worker_memory_limit
        cgroup = cgroup_memory_limit()
        per_worker = worker_memory_limit(n_local, total=min(machine.total, cgroup or machine.total))
    else:
        per_worker = None

    def run_over(e: dict[str, int]) -> list[tuple[float, float, float, str, float]]:
        need_here = processes_need(e, n_local)   # the client (and, locally, every worker) on this machine
        budgets = [(need_here, machine.available, "this machine's available memory", CGROUP_SHARE)]
        if per_worker:
            budgets.append((e["total"], per_worker, "a worker's memory", MEMORY_SHARE))
        budgets += limit_budgets(e["total"], need_here if local else e["total"],
                                 extra=DASK_ADDRESS_SPACE if dask_here else 0)
        return _over(budgets)
    over = run_over(est)
    if over:   # the tightest limit is the one to name
        _, need, have, what, share = max(over, key=lambda o: o[0])
        _refuse_or_accumulate(config, run_over, what, have, need, share)
        per_process = "ulimit -v" in what   # more or fewer workers change nothing there
        field, value = _memory_field(config, est, per_process=per_process)
        raise ConfigError(field, f"a size whose run fits in {_share_of(what, have, share)}: this one needs about "
                          f"{_gib(need)} ({_parts(est)})", value)
    return est


def processes_need(est: dict[str, int], n_local: int) -> int:
    """Bytes the processes of a run on this machine hold together at their peak, from a
    `memory_estimate`: what lives beside the workers (`beside_workers()`), the client's copy
    (the dataset, half the parameter copies a worker keeps: the model checked on one step and
    the result, and an evaluation chunk's activations: `check_evaluation` scores one) and each
    of `n_local` local workers' private pages and its run's (the libraries' shared pages
    counted once). Measured on digits at 4.35M parameters, 2 workers: 611 MB in the cgroup
    against 904 MiB here (docs/binder.md).

    >>> est = {"data": 0, "params": 128 << 20, "activations": 64 << 20, "eval_activations": 64 << 20,
    ...        "total": (192 << 20) + WORKER_OVERHEAD}
    >>> processes_need(est, 2) >> 20 == (beside_workers() >> 20) + (64 + 64) + 2 * (96 + 192)
    True
    """
    client = est["data"] + est["params"] // 2 + est["eval_activations"]
    return beside_workers() + client + n_local * (est["total"] - SHARED_PAGES)


def _over(budgets: list[tuple[float, float, str, float]]) -> list[tuple[float, float, float, str, float]]:
    """The budgets a need does not fit, as (need over what it may fill, need, limit, what,
    share), from (need, limit, what, share)."""
    return [(need / (share * have), need, have, what, share) for need, have, what, share in budgets
            if need > share * have]


def _refuse_or_accumulate(config: RunConfig, over_of: Callable[[dict[str, int]], list], what: str,
                          have: float, need: float, share: float = MEMORY_SHARE) -> None:
    """When a larger `accumulate` (smaller passes, the same steps) makes the run fit, raise
    the ConfigError naming the smallest that does; else return (another field is to blame)."""
    most = config.most_accumulate or slice_rows(config)   # the largest the config accepts
    if config.accumulate >= most or over_of(memory_estimate(config.replace(accumulate=most))):
        return
    lo, hi = config.accumulate, most                # over at lo, fits at hi: the smallest that fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if over_of(memory_estimate(config.replace(accumulate=mid))):
            lo = mid
        else:
            hi = mid
    now, then = memory_estimate(config), memory_estimate(config.replace(accumulate=hi))
    # the rows each pass's bytes are of, as the estimate counts them (a batch larger than the data set
    # is counted as the data set: a run refuses it, and the message says so)
    larger = (f"; the batch ({config.batch_size} rows) is larger than the training set ({now['n_train']} rows), "
              "which a run refuses" if config.batch_size > now["n_train"] else "")
    raise ConfigError("accumulate", f"at least {hi} for a run that fits in {_share_of(what, have, share)}: this one "
                      f"needs about {_gib(need)}, a training pass of {now['pass_rows']} rows "
                      f"{_gib(now['pass_activations'])} of it; in micro-batches of {then['pass_rows']} rows a pass "
                      f"holds {_gib(then['pass_activations'])} (the same steps; or a smaller batch_size{larger})",
                      config.accumulate)


def address_space_limit() -> int | None:
    """This process's address-space limit in bytes (`ulimit -v`, RLIMIT_AS; the local
    workers inherit it), or None when unlimited or unknown."""
    from ..util.limits import address_space_limit as limit
    return limit()


CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max",                        # cgroup v2
                      "/sys/fs/cgroup/memory/memory.limit_in_bytes")       # cgroup v1


def cgroup_memory_limit() -> int | None:
    """The memory limit of this process's cgroup in bytes (a container's `--memory`, a
    batch job's allocation, a systemd scope's MemoryMax: the client and the local workers
    share it), or None when there is none. The root's files (`CGROUP_LIMIT_FILES`, what a
    container shows as its own) and the cgroups above this process's own
    (`util.machine.cgroup_memory_limit`: a job's or a scope's limit lives there), the
    tightest. v1's "no limit" is a huge number (above the machine's memory): None too."""
    import psutil

    from ..util.machine import cgroup_memory_limit as hierarchy_limit
    limits = []
    for name in CGROUP_LIMIT_FILES:
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        with contextlib.suppress(ValueError):   # v2's "max": no limit
            limits.append(int(text))
        break
    below = hierarchy_limit()
    if below is not None:
        limits.append(below)
    limits = [n for n in limits if 0 < n < psutil.virtual_memory().total]
    return min(limits) if limits else None


def limit_budgets(per_process: int, together: int, extra: int = 0) -> list[tuple[int, int, str, float]]:
    """(need, limit, what, share) for the limits this process lives under: the address-space
    limit binds each process (`per_process`: one worker's or the client's need, plus
    `extra` address space mapped but not used), the cgroup's limit all of them on this
    machine together (`together`). Read through `address_space_limit()` and
    `cgroup_memory_limit()` (tests monkeypatch them)."""
    out = []
    rlimit = address_space_limit()
    if rlimit is not None:
        out.append((per_process + extra, rlimit, "the address-space limit of one process (ulimit -v)", MEMORY_SHARE))
    cgroup = cgroup_memory_limit()
    if cgroup is not None:
        out.append((together, cgroup, "this cgroup's memory limit (memory.max; memory.limit_in_bytes on cgroup v1), shared by the client and the local "
                                      "workers", CGROUP_SHARE))
    return out


# ------------------------------------------------------------------------------ shared memory
SHM_DIR = "/dev/shm"    # where POSIX shared-memory segments live on Linux


def shm_free() -> int | None:
    """Free bytes in /dev/shm (a tmpfs; Docker's default is 64 MiB), or None where there is
    none to measure (macOS keeps segments elsewhere)."""
    import shutil
    try:
        return shutil.disk_usage(SHM_DIR).free
    except OSError:
        return None


def shm_need(config: RunConfig, model: Any) -> dict[str, int]:
    """Bytes of the shared-memory segments a run on one host creates, by part: the
    collective of each rank group, the shared arrays, the server role or cgdp's chunk
    master, the start barrier (what `execution.transports.dask.DaskTransport.prepare`
    creates when the workers share a host; `comm` "dask" or "nccl" needs no collective
    segment and puts the server role in an actor)."""
    from ..comm.barrier import barrier_nbytes
    from ..comm.roles import role_state_spec
    from ..comm.shm import allreduce_nbytes, master_nbytes, server_nbytes, table_nbytes

    spec = specs()[config.algorithm]
    needs, size, n = spec.needs, config.n_workers or 1, model.n_params
    shm_comm = config.comm in ("auto", "shm")   # auto between GPU workers may pick NCCL (which uses /dev/shm too)
    out = {"collective": 0, "shared": 0, "server": 0, "barrier": barrier_nbytes(size)}
    if needs.collective and shm_comm:
        elems = spec.comm_elems(n, size)
        out["collective"] = sum(allreduce_nbytes(len(ranks), elems) for ranks in needs.rank_groups(config, size))
    out["shared"] = 4 * n * len(needs.shared)
    role = needs.server
    if role is not None and role != "tournament" and config.comm in ("auto", "shm"):
        state = role_state_spec(n, **needs.options(config, model))
        out["server"] = (master_nbytes(n, size, len(model.layout()), state) if role == "cgdp_master"
                         else table_nbytes(n, size) if role == "pairwise" else server_nbytes(n, state))
    return out


def check_shm(config: RunConfig, model: Any, free: int | None = None, host: str | None = None) -> dict[str, int]:
    """Raise ConfigError when the run's shared-memory segments (`shm_need`) do not fit in
    /dev/shm's free space (`free`, default `shm_free()`; `host`: where it was measured, when
    not here): a worker writing past a full tmpfs dies of SIGBUS. Blames `comm` when the
    Dask exchange (no collective segment, the server in an actor) would fit, else the field
    that sizes the model."""
    from . import platforms
    need = shm_need(config, model)
    if not platforms.shm_supported():
        return need
    free = shm_free() if free is None else free
    total = sum(need.values())
    if free is None or total <= free:
        return need
    parts = ", ".join(f"{k} {_gib(v)}" for k, v in need.items() if v)
    where = f"the {_gib(free)} free in {SHM_DIR}" + (f" on {host}" if host else "")
    unavoidable = need["shared"] + need["barrier"]
    if unavoidable <= free and config.comm in ("auto", "shm"):
        raise ConfigError("comm", f"dask (no shared-memory collective or server) or a larger {SHM_DIR} (docker run "
                          f"--shm-size): this run's segments need {_gib(total)} ({parts}), more than {where}",
                          config.comm)
    field, value = _model_field(config)
    raise ConfigError(field, f"a model whose shared-memory segments fit {where}, or a larger {SHM_DIR} (docker run "
                      f"--shm-size): this one needs {_gib(total)} ({parts})", value)


def _model_field(config: RunConfig) -> tuple[str, Any]:
    """The field that sizes the parameter vector."""
    if config.hidden is not None and config.model != "softmax":
        return "hidden", config.hidden
    return ("n_features", config.n_features) if config.dataset == "synthetic" else ("model", config.model)


def _parts(est: dict[str, int], activations: int | None = None) -> str:
    """What a memory estimate is made of, for a refusal: the parameters, the data and, where
    they matter, a pass's activations (a GPT's grow with context squared: at 100,000 tokens
    they were all but all of 38,000 GiB, which the message did not mention)."""
    parts = f"{est['n_params']:,} parameters, {_gib(est['data'])} of data per worker"
    if activations is not None:
        return parts + f", {_gib(activations)} of activations"
    if est["activations"] > max(est["data"], est["params"]):
        parts += f", {_gib(est['activations'])} of activations for a pass"
    return parts


def _memory_field(config: RunConfig, est: dict[str, int], per_process: bool = False) -> tuple[str, Any]:
    """The field to blame: what makes the larger share of the estimate (`per_process`: a
    limit on each process, which the number of workers does not change)."""
    if not per_process and config.n_workers \
            and WORKER_OVERHEAD * config.n_workers > est["data"] + est["params"] + est["activations"]:
        return "cpus", config.cpus   # mostly the worker processes' own memory: too many workers
    if est["activations"] > max(est["data"], est["params"]) and is_text_dataset(config.dataset):
        return "context", config.context   # one sequence's pass (the run tried micro-batches first)
    if est["params"] >= est["data"]:
        if config.hidden is not None and config.model != "softmax":
            return "hidden", config.hidden
        return ("n_features", config.n_features) if config.dataset == "synthetic" else ("model", config.model)
    if config.dataset == "synthetic" and config.n_features * 10000 > config.n_samples * 64:
        return "n_features", config.n_features
    if config.dataset in ("synthetic", "mnist1d"):
        return "n_samples", config.n_samples
    return "dataset", config.dataset


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**28 else f"{nbytes / 2**20:.0f} MiB"


def _share_of(what: str, have: float, share: float = MEMORY_SHARE) -> str:
    """The budget a memory refusal is held to: `share` of the limit (`MEMORY_SHARE` of a
    worker's or an address space, `CGROUP_SHARE` of a cgroup's or the machine's), both said
    ("90% of this machine's available memory (1.8 GiB of 2.0 GiB)"): a need of 2.3 GiB was
    refused against a quoted 2.9 GiB with no word of the share."""
    return f"{share:.0%} of {what} ({_gib(share * have)} of {_gib(have)})"


# ------------------------------------------------------------------------------ emulator
def check_emulator(config: RunConfig, n_params: int) -> None:
    """Raise ConfigError when the network emulator would make one exchange of the
    parameters take longer than MAX_EXCHANGE_S (the loops would seem hung)."""
    if not (config.latency_ms or config.bandwidth_gbps):
        return
    nbytes = n_params * 4
    latency = config.latency_ms / 1e3
    seconds = 2 * latency + (8 * nbytes / (config.bandwidth_gbps * 1e9) if config.bandwidth_gbps else 0.0)
    if not math.isfinite(seconds) or seconds > MAX_EXCHANGE_S:
        if config.bandwidth_gbps and 8 * nbytes / (config.bandwidth_gbps * 1e9) > latency:
            need = 8 * nbytes / ((MAX_EXCHANGE_S - 2 * latency) * 1e9) if 2 * latency < MAX_EXCHANGE_S else math.inf
            raise ConfigError("bandwidth_gbps", f"0 (no cap) or at least {need:.3g} Gbit/s, so that one exchange "
                              f"of the {n_params:,} parameters takes under {MAX_EXCHANGE_S:g} s", config.bandwidth_gbps)
        raise ConfigError("latency_ms", f"at most {MAX_EXCHANGE_S * 1e3 / 2:g} ms, so that one exchange takes "
                          f"under {MAX_EXCHANGE_S:g} s", config.latency_ms)


# ------------------------------------------------------------------------------ warnings
def run_warnings(config: RunConfig, total_steps: int, data: Any = None, model: Any = None,
                 plan: Any = None) -> list[str]:
    """Settings that run but make the algorithm pointless; one sentence each. The home of
    "longer than the run" for a setting the run still makes sense without (a schedule that
    cannot fit is refused by the plan, `maths.optim.make_plan`); `plan` (the run's
    `maths.optim.Plan`) gives the steps per epoch and the evaluations."""
    out: list[str] = []
    from ..config.registry import with_knob
    if config.algorithm in with_knob("tau") and config.tau > total_steps:
        from ..algorithms.local import LocalSGD
        if issubclass(specs()[config.algorithm].cls, LocalSGD):   # (the local family averages after the last step)
            out.append(f"tau ({config.tau}) is longer than the run ({total_steps} steps per worker): the workers "
                       f"train apart and meet once, in the average after the run's last step")
        else:
            out.append(f"tau ({config.tau}) is longer than the run ({total_steps} steps per worker): no elastic "
                       f"exchange will ever happen, so the workers train apart and the centre stays at its start")
    spe = plan.steps_per_epoch if plan is not None else None
    if spe is not None and config.steps is not None and config.warmup != "none" \
            and config.warmup_epochs * spe > total_steps:   # (against --epochs RunConfig refuses it)
        out.append(f"the warmup ({config.warmup_epochs:g} epochs, {round(config.warmup_epochs * spe):,} steps) is "
                   f"longer than the run ({total_steps:,} steps): the lr rises for the whole run and never reaches "
                   f"its peak")
    own = specs()[config.algorithm].warn(config, total_steps, spe)   # the algorithm's own (LTFB: no tournament)
    out.extend([own] if isinstance(own, str) else own or [])
    if config.early_stop is not None and plan is not None:
        evals = math.ceil(total_steps / plan.eval_every)   # every eval_every steps and after the last one
        if evals < config.early_stop + 2:   # a stop decided at the last evaluation ends nothing early
            out.append(f"early_stop ({config.early_stop}) waits for more evaluations than the run makes ({evals}: "
                       f"every {plan.eval_every} steps of {total_steps}): it can never end the run early "
                       "(eval_every sets how often it looks)")
    every = config.checkpoint_interval
    if config.out and isinstance(every, int) and every >= total_steps:
        out.append(f"checkpoint_every ({every} steps) is at least the run's {total_steps} steps: no checkpoint is "
                   "written before the run ends, so a killed run has none to resume from")
    if data is not None and model is not None:
        msg = _stability_warning(config, data, model)
        if msg:
            out.append(msg)
    if data is not None:
        msg = scale_warning(config, data)
        if msg:
            out.append(msg)
        msg = unused_classes_warning(config, data)
        if msg:
            out.append(msg)
    return out


def unused_classes_warning(config: RunConfig, data: Any) -> str | None:
    """Say so when a data file's integer labels leave classes without a single row (labels
    10, 20, 30 make 31 classes, largest label + 1): the model has an output for each, and
    the loss, the chance level and the per-class line count them. Labels are kept as given
    (a run answers in the file's own labels), so the fix is the user's: number the classes
    0..k-1. A CSV's class names are numbered already and leave none.

    >>> import numpy as np, types
    >>> cfg = types.SimpleNamespace(dataset="prices.csv")
    >>> y = np.array([10, 20, 30, 20])
    >>> data = types.SimpleNamespace(y_train=y, y_test=y[:2], y_val=None, n_classes=31, vocab=None)
    >>> print(unused_classes_warning(cfg, data))
    the labels of prices.csv leave 28 of its 31 classes (largest label + 1) without a single row (3 used: 10, 20, 30): the model still has an output for each, and the loss and the chance level count them; number the classes 0..2 to train 3 (np.unique(y, return_inverse=True))
    """
    import numpy as np

    from ..data.files import is_data_path
    if not is_data_path(config.dataset) or getattr(data, "vocab", None) is not None:
        return None
    used = np.unique(np.concatenate([np.unique(np.asarray(y)) for y in (data.y_train, data.y_test, data.y_val)
                                     if y is not None]))
    unused = int(data.n_classes) - len(used)
    if unused <= 0:
        return None
    shown = ", ".join(str(int(v)) for v in used[:8]) + (", ..." if len(used) > 8 else "")
    return (f"the labels of {config.dataset} leave {unused:,} of its {int(data.n_classes):,} classes (largest label "
            f"+ 1) without a single row ({len(used):,} used: {shown}): the model still has an output for each, and "
            f"the loss and the chance level count them; number the classes 0..{len(used) - 1} to train {len(used):,} "
            "(np.unique(y, return_inverse=True))")


def scale_warning(config: RunConfig, data: Any) -> str | None:
    """Say so when a data file's features are far from unit scale (`data.files.unscaled`)
    and the run does not standardize them: raw measurements make the first steps jump
    (an iris-like table's centimetres at lr 0.1: the loss went from 1.8 to 120 at step 1) and the maths
    then magnifies rounding, so runs that should agree (1 worker and 2 on the same global
    batch) drift apart.

    >>> import numpy as np, types
    >>> cfg = types.SimpleNamespace(standardize=False, dataset="iris.csv", lr=0.1)
    >>> data = types.SimpleNamespace(X_train=np.array([[5.1, 3.5], [6.2, 2.9], [7.0, 3.2]]), tokens=False)
    >>> print(scale_warning(cfg, data))
    the features of iris.csv are not standardized (means up to 6.1, deviations 0.24-0.78): at lr 0.1 the first steps may jump and runs that should agree drift apart; standardize (--standardize) scales them by the training set's statistics
    """
    from ..data.files import is_data_path, unscaled
    if config.standardize or not is_data_path(config.dataset):   # (built-ins are scaled; text is token ids)
        return None
    scale = unscaled(data.X_train)
    if scale is None:
        return None
    return (f"the features of {config.dataset} are not standardized ({scale}): at lr {config.lr:g} the first steps "
            "may jump and runs that should agree drift apart; standardize (--standardize) scales them by the "
            "training set's statistics")


def peak_lr(config: RunConfig) -> float:
    """The largest lr the schedule reaches: the scaled target (LTFB: its fastest trainer)."""
    from ..maths.schedules import scaled_lr
    lr = specs()[config.algorithm].peak_lr(config)   # the algorithm's own fact (LTFB: its fastest trainer)
    return scaled_lr(lr, config.batch_size, config.base_batch, config.lr_scaling)


def sharpness(model: Any, params: Any, X: Any, y: Any, iters: int = 12) -> float:
    """The largest eigenvalue of the loss Hessian at `params`, by power iteration on
    finite-difference Hessian-vector products (2 gradients per iteration)."""
    rng = np.random.default_rng(0)
    v = rng.standard_normal(params.shape[0]).astype(np.float64)
    v /= np.linalg.norm(v)
    g1, g2 = np.empty_like(params), np.empty_like(params)
    lam = 0.0
    eps = 1e-3 / max(1.0, float(np.linalg.norm(params)) ** 0.5)
    for _ in range(iters):
        model.loss_and_grad((params + eps * v).astype(params.dtype), X, y, grad_out=g1)
        model.loss_and_grad((params - eps * v).astype(params.dtype), X, y, grad_out=g2)
        hv = (g1.astype(np.float64) - g2) / (2 * eps)
        norm = float(np.linalg.norm(hv))
        if not math.isfinite(norm) or norm == 0:
            return lam
        lam = float(v @ hv)
        v = hv / norm
    return abs(lam)


def _stability_warning(config: RunConfig, data: Any, model: Any) -> str | None:
    """Warn when the peak lr is far past the stability bound of the loss's curvature at
    the start (lr * sharpness > 2 (1 + momentum) diverges on a quadratic; we warn at 4x
    that, since curvature changes as training goes and the bound is for full batches).
    sgd only: the other rules' steps are not lr * g."""
    if model.n_params > 5_000_000:
        return None  # too costly to measure here; the run reports a divergence when it happens
    if config.optimizer != "sgd":
        return None  # adamw, lars, lamb normalise their steps: lr * sharpness bounds nothing there
    lr = peak_lr(config)
    if lr <= max(config.lr, 0.5):
        return None  # no scaling past a modest rate: not worth the measurement
    momentum = config.momentum if specs()[config.algorithm].uses_momentum else 0.0
    rows = min(256, data.n_train)
    params = model.init(config.seed)
    try:
        lam = sharpness(model, params, data.X_train[:rows], data.y_train[:rows])
    finally:   # the problem's model lives on in its cache: not with buffers for these rows (the GPT's: 74 MB)
        drop = getattr(model, "drop_work", None)
        if drop is not None:
            drop()
    bound = 2 * (1 + momentum) / lam if lam > 0 else math.inf
    if lr > 4 * bound:
        return (f"lr reaches {lr:.3g} (after {config.lr_scaling} scaling), {lr / bound:.0f}x the stability bound "
                f"{bound:.3g} of the loss's curvature at the start (sharpness {lam:.3g}, momentum {momentum:g}): "
                f"expect the loss to blow up or training to stall")
    return None
