"""The machine's state during a run: load, who used the cores, steal, each worker's CPU time.

A throughput measured on a machine where other processes took a share of the cores
measures the machine, not the algorithm. So every real run records (`summary["machine"]`):

- the load average (1 minute) before and after;
- the cores the run may use (`usable_cores`: the CPU affinity and the cgroup's CPU quota,
  Dask's own count, never the host's `os.cpu_count()`: a Binder pod limited to 2 cores of a
  64-core host has 2);
- the busy CPU time of those cores over the run, from `/proc/stat` where the kernel reports
  it (Linux; only the CPUs of the affinity set), split into the run's (every process of the
  run: this one, which holds the client and a local cluster's scheduler and nannies, its
  child processes, the workers and their parents) and other processes', and `steal` (time
  the hypervisor gave the machine's virtual cores to someone else);
- each worker's loop: its wall time, the CPU time of its thread, its process's CPU time,
  the compute it booked, and `stalled_s`, booked compute the thread did not spend on a
  core (descheduled: a lower bound on its stalls; CPU workers only, and only when the
  loop thread does the compute, as NumPy with one BLAS thread does).

`note(state)` is the sentence the summary (`machine_note`), the status line and the
scaling figure show when other processes (or steal) took a noticeable share of the cores:
``OTHERS_NOTICEABLE`` of them (10%: 0.2 of 2 cores) or more.
"""
from __future__ import annotations

import os
import time
from functools import lru_cache
from typing import Any

OTHERS_NOTICEABLE = 0.10   # of the machine's cores: other processes' (or steal's) share worth a sentence
PROC_STAT = "/proc/stat"


def return_freed_memory() -> None:
    """Free what a run that ended left behind in this process and give the C heap's free
    pages back to the system: a full garbage collection, then glibc's `malloc_trim(0)`
    (elsewhere only the collection).

    A run in this process (the simulator's virtual workers, threads) leaves its workers'
    objects (parameters, optimiser states, contexts, greenlets) referring to one another in
    cycles, which only the cyclic collector frees, and it runs on the count of objects made,
    not bytes: a notebook's next run started on top of the last one's arrays (diloco_lm's
    64-GPU runs, about 200 MB each: its full mode peaked at 1,001 MB, 939 MB in a script of
    its eight part-2 runs, 662 MB with the collection; 2026-12-06). Freed, glibc keeps the pages
    for reuse once its adaptive mmap threshold has risen past the arrays' sizes, so a kernel
    that runs several simulated clusters grew by each one's peak: diloco_lm's quick mode
    reached 966 MB that way, about 500 MB with the pages given back. A collection takes
    about 40 ms in a kernel with pandas and plotly loaded.
    """
    import ctypes
    import ctypes.util
    import gc
    gc.collect()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):   # not glibc (macOS, Windows, musl)
        return
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)


@lru_cache(maxsize=1)
def usable_cores() -> int:
    """The cores this process may use: the smallest of the host's cores, its CPU affinity and
    its cgroup's CPU quota (rounded up), as Dask counts them (`dask.system.CPU_COUNT`; the
    local cluster sizes its workers by it too). Never fewer than 1."""
    try:
        from dask.system import cpu_count
        return max(1, int(cpu_count()))
    except ImportError:   # dask is a dependency; without it, the affinity alone
        return max(1, len(_affinity()) or os.cpu_count() or 1)


def _affinity() -> set[int]:
    """The CPUs this process may run on (empty where the system does not say)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set()


def cpu_times(path: str = PROC_STAT, cpus: set[int] | None = None) -> dict[str, float] | None:
    """CPU seconds since boot summed over the machine's cores, or over `cpus` only (the
    per-CPU lines): busy, idle, steal; None where the kernel does not report them (not Linux).

    busy is user + nice + system + irq + softirq (guest time is already inside user);
    idle is idle + iowait."""
    try:
        with open(path) as f:
            lines = [line.split() for line in f if line.startswith("cpu")]
    except OSError:
        return None
    if not lines or lines[0][0] != "cpu":
        return None
    if cpus:
        chosen = [f for f in lines[1:] if f[0][3:].isdigit() and int(f[0][3:]) in cpus]
        lines = chosen if len(chosen) == len(cpus) else lines[:1]   # a CPU not listed: the whole machine
    else:
        lines = lines[:1]
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out = {"busy": 0.0, "idle": 0.0, "steal": 0.0}
    for fields in lines:
        v = [float(x) / hz for x in fields[1:]] + [0.0] * 10
        user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
        out["busy"] += user + nice + system + irq + softirq
        out["idle"] += idle + iowait
        out["steal"] += steal
    return out


# What the processes of a run hold before its data and model, measured in real memory cgroups
# on one CPU (`benchmarks/process_memory.py`; docs/binder.md, "What each process takes",
# 2026-12-07), each rounded up. Private pages (uss, /proc/PID/smaps_rollup) are a process's
# own; the libraries' pages are shared by the processes and a cgroup charges them once.
WORKER_PRIVATE = 96 << 20      # a Dask worker once the run's code is imported (uss 84-86 MB in a tiny run)
SHARED_PAGES = 40 << 20        # Python's, NumPy's and Dask's library pages (a worker's rss less its uss: 34 MB)
KERNEL_PRIVATE = 144 << 20     # the client's process (a kernel) with a local cluster's scheduler and nannies and
#                                the fork server (uss 130 + 7 MB in a tiny run; 87 MB on threads or simulated)
JUPYTER_SERVER = 128 << 20     # the Jupyter server beside a kernel, in its container (`jupyter server`: rss 113 MB)


def beside_workers(jupyter: bool | None = None) -> int:
    """Bytes that live beside a local cluster's workers in their cgroup (a container's, a
    job's) before a run loads anything: the client's process with the scheduler and the
    nannies, the libraries' shared pages (charged once) and, in a Jupyter kernel (`jupyter`;
    default: whether this process is a running ipykernel), the Jupyter server. The one home of that sum: each
    worker's share of a limit (`execution.cluster.worker_memory_limit`) and the memory check
    (`execution.preflight`) use it.

    >>> beside_workers(jupyter=False) >> 20, beside_workers(jupyter=True) >> 20
    (184, 312)
    """
    if jupyter is None:   # this process is a running kernel (not merely one that imported ipykernel)
        import sys
        app = getattr(sys.modules.get("ipykernel.kernelapp"), "IPKernelApp", None)
        jupyter = bool(app is not None and app.initialized())
    return KERNEL_PRIVATE + SHARED_PAGES + (JUPYTER_SERVER if jupyter else 0)


PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"


def cgroup_memory_limit(proc_cgroup: str | None = None, root: str | None = None) -> int | None:
    """The tightest memory limit in bytes over this process's own cgroup and every cgroup
    above it (v2 `memory.max`, v1 `memory.limit_in_bytes`), or None where none is set.

    A container usually shows its own cgroup as the root of /sys/fs/cgroup, which is all that
    Dask's `distributed.system.MEMORY_LIMIT` reads; a batch job's cgroup, a systemd scope
    (`systemd-run --scope -p MemoryMax=2G`) or a container that sees the host's hierarchy put
    the limit lower down, at the path /proc/self/cgroup names: read from the root alone, a
    2 GB job on a 24 GB machine gave each of its 2 workers 12 GB (2026-12-07). The root's
    files are read too. v1's "no limit" is a huge number: None. `proc_cgroup`, `root`: default
    `PROC_CGROUP`, `CGROUP_ROOT`.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / "job" / "step").mkdir(parents=True)
    >>> _ = (d / "job" / "memory.max").write_text("2147483648\\n")
    >>> _ = (d / "job" / "step" / "memory.max").write_text("max\\n")
    >>> _ = (d / "cg").write_text("0::/job/step\\n")
    >>> cgroup_memory_limit(str(d / "cg"), str(d))
    2147483648
    """
    proc_cgroup, root = proc_cgroup or PROC_CGROUP, root or CGROUP_ROOT
    try:
        with open(proc_cgroup) as f:
            groups = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        groups = []
    candidates = [f"{root}/memory.max", f"{root}/memory/memory.limit_in_bytes"]
    for _, controllers, path in groups:
        if controllers == "":                                  # v2: the unified hierarchy
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):               # v1: the memory controller's own
            base, name = f"{root}/memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        candidates += [f"{base}/{'/'.join(parts[:i])}/{name}" for i in range(len(parts), 0, -1)]
    limits = []
    for name in dict.fromkeys(candidates):
        try:
            with open(name) as f:
                text = f.read().strip()
            limits.append(int(text))
        except (OSError, ValueError):                          # absent, or v2's "max": no limit there
            continue
    limits = [n for n in limits if 0 < n < 1 << 60]            # v1's unlimited is about 2**63
    return min(limits) if limits else None


def cgroup_cpu_s() -> float | None:
    """CPU seconds the processes of this process's cgroup have used (cgroup v2 `cpu.stat`
    usage_usec, or v1 `cpuacct.usage`); None where neither is readable."""
    try:
        with open("/proc/self/cgroup") as f:
            groups = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for _, controllers, path in groups:
        where = path.rstrip("/")
        if controllers == "":   # v2: one unified hierarchy
            try:
                with open(f"/sys/fs/cgroup{where}/cpu.stat") as f:
                    for line in f:
                        if line.startswith("usage_usec "):
                            return int(line.split()[1]) / 1e6
            except (OSError, ValueError):
                continue
        elif "cpuacct" in controllers.split(","):
            for mount in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
                try:
                    with open(f"/sys/fs/cgroup/{mount}{where}/cpuacct.usage") as f:
                        return int(f.read()) / 1e9
                except (OSError, ValueError):
                    continue
    return None


def machine_cpu() -> dict[str, float] | None:
    """The busy, idle and steal seconds of what this process may use: the CPUs of its
    affinity set (`/proc/stat`), or, where a CPU quota allows fewer cores than that set has,
    its cgroup's own usage as busy (the host's other tenants are not ours to count; steal
    unknown)."""
    cpus = _affinity()
    if cpus and usable_cores() < len(cpus):
        used = cgroup_cpu_s()
        if used is not None:
            return {"busy": used, "idle": 0.0, "steal": 0.0}
    return cpu_times(cpus=cpus)


def run_processes(worker_pids: list[int] | tuple[int, ...] = ()) -> dict[int, float]:
    """{pid: CPU seconds so far} of every process of a run on this host: this process (the
    client, and a local cluster's scheduler and nannies, which run in it), its child
    processes (a local cluster's workers, the dashboard's simulation process), the given
    worker processes and their parents (the nannies of a cluster started elsewhere on this
    host). {} without psutil (a dependency of distributed)."""
    try:
        import psutil
    except ImportError:
        return {}
    me = psutil.Process()
    procs = {me.pid: me}
    try:
        procs.update({p.pid: p for p in me.children(recursive=True)})
    except psutil.Error:
        pass
    for pid in worker_pids:
        try:
            p = psutil.Process(int(pid))
            procs.setdefault(p.pid, p)
            parent = p.parent()
            if parent is not None and parent.pid > 1:
                procs.setdefault(parent.pid, parent)
        except (psutil.Error, ValueError, TypeError):
            continue
    out = {}
    for pid, p in procs.items():
        try:
            t = p.cpu_times()
            out[pid] = float(t.user + t.system)
        except psutil.Error:
            continue
    return out


def local_pids(workers: list[dict[str, Any]]) -> list[int]:
    """The process ids of the described workers (`cluster.describe_worker`) that run on this
    host (a pid of another host names nothing here).

    >>> import socket
    >>> local_pids([{"pid": 7, "host": socket.gethostname()}, {"pid": 8, "host": "elsewhere"}, {"host": "localhost"}])
    [7]
    """
    import socket
    here = socket.gethostname()
    return [int(w["pid"]) for w in workers if w.get("pid") is not None and w.get("host") == here]


def elsewhere(workers: list[dict[str, Any]]) -> int:
    """How many of the described workers run on another host than this one (an existing
    cluster's): this host's CPU says nothing of their machines (threads are "localhost").

    >>> import socket
    >>> elsewhere([{"host": socket.gethostname()}, {"host": "localhost"}, {"host": "gpu-node-3"}])
    1
    """
    import socket
    here = {socket.gethostname(), "localhost"}
    return sum(1 for w in workers if w.get("host") not in here)


def snapshot(worker_pids: list[int] | tuple[int, ...] = ()) -> dict[str, Any]:
    """The state to compare after the run: wall clock, load, the usable cores' CPU times, this
    process's CPU, and every process of the run's CPU (`run_processes(worker_pids)`)."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = None
    return {"time": time.time(), "load": load, "cpu": machine_cpu(),
            "process_cpu_s": time.process_time(), "pid": os.getpid(), "cores": usable_cores(),
            "procs": run_processes(worker_pids)}


class LoopUsage:
    """A worker loop's clocks: `start()` before it, `stop(compute_s, kind, rank)` after,
    run in the loop's own thread."""

    def __init__(self) -> None:
        self.wall0 = time.perf_counter()
        self.thread0 = time.thread_time()
        self.proc0 = time.process_time()

    def stop(self, compute_s: float, kind: str, rank: int) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall0
        cpu = time.thread_time() - self.thread0
        return {"rank": rank, "pid": os.getpid(), "kind": kind, "wall_s": wall, "cpu_s": cpu,
                "process_cpu_s": time.process_time() - self.proc0, "compute_s": float(compute_s),
                "stalled_s": max(float(compute_s) - cpu, 0.0) if kind == "cpu" else None}


def summarise(before: dict[str, Any], after: dict[str, Any], loops: list[dict[str, Any]],
              workers: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """The run's machine state from two `snapshot`s and the workers' `LoopUsage` reports.

    `workers` (`cluster.describe_worker`'s): where some ran on other hosts (`elsewhere`, an
    existing cluster's), their loops' CPU time is not this host's and is left out, and the
    state says how many (`workers_elsewhere`): the note says whose cores it read.

    Ours is the CPU time of every process of the run (`run_processes`: this process, with
    the client, a local scheduler and the nannies; its children; the workers and their
    parents), each counted once, from the snapshots' `procs`; a process that started during
    the run counts from 0; a worker loop's process not among them adds its loop's process CPU
    time. The rest of the usable cores' busy time is other processes'.

    >>> before = {"time": 0.0, "load": 0.5, "cpu": {"busy": 0.0, "idle": 0.0, "steal": 0.0},
    ...           "process_cpu_s": 0.0, "pid": 1, "cores": 2}
    >>> after = {"time": 10.0, "load": 1.9, "cpu": {"busy": 19.0, "idle": 1.0, "steal": 0.0},
    ...          "process_cpu_s": 1.0, "pid": 1, "cores": 2}
    >>> loops = [{"rank": 0, "pid": 7, "process_cpu_s": 2.0}, {"rank": 1, "pid": 8, "process_cpu_s": 2.0}]
    >>> s = summarise(before, after, loops)
    >>> s["our_cores"], s["other_cores"], s["steal_cores"]
    (0.5, 1.4, 0.0)
    """
    wall = max(float(after["time"]) - float(before["time"]), 1e-9)
    cores = int(after.get("cores") or 1)
    away = elsewhere(list(workers))
    if away:
        here = set(local_pids(list(workers))) | {after.get("pid")}
        loops = [loop for loop in loops if loop.get("pid") in here]
    procs0, procs1 = before.get("procs") or {}, after.get("procs") or {}
    if procs1:
        own = sum(max(t - procs0.get(pid, 0.0), 0.0) for pid, t in procs1.items())
        seen = set(procs1)
    else:
        own = float(after["process_cpu_s"]) - float(before["process_cpu_s"])
        seen = {after.get("pid")}
    for loop in loops:
        if loop.get("pid") not in seen:
            seen.add(loop.get("pid"))
            own += float(loop.get("process_cpu_s") or 0.0)
    out: dict[str, Any] = {"cores": cores, "wall_s": wall, "load_before": before.get("load"),
                           "load_after": after.get("load"), "our_cores": own / wall,
                           "busy_cores": None, "other_cores": None, "steal_cores": None,
                           "workers": sorted(loops, key=lambda loop: loop.get("rank", 0)), "workers_elsewhere": away}
    b, a = before.get("cpu"), after.get("cpu")
    if a is not None and b is not None:
        busy = a["busy"] - b["busy"]
        out["busy_cores"] = busy / wall
        out["other_cores"] = max(busy - own, 0.0) / wall
        out["steal_cores"] = max(a["steal"] - b["steal"], 0.0) / wall
    for key in ("our_cores", "busy_cores", "other_cores", "steal_cores"):
        if out[key] is not None:
            out[key] = round(out[key], 3)
    out["note"] = note(out)
    return out


def crowding_note(workers: list[dict[str, Any]], blas_threads: int | None, cores: int) -> str | None:
    """The sentence for a run whose CPU workers on this host, with their BLAS threads, outnumber
    its usable cores (`usable_cores`), else None. They take turns: together they compute at
    most `cores` cores' worth, so the run's throughput and scaling are the machine's, not the
    algorithm's (the lab machine with 2 cores asked for 4 workers; the Binder pod with 1).
    Workers on other hosts (an existing cluster's) are not counted; the simulated cluster is
    where more workers than cores are measured without sharing.

    >>> here = {"kind": "cpu", "host": "localhost"}
    >>> crowding_note([here] * 4, 1, 2)
    "4 CPU workers on 2 cores of this host: they take turns on the cores, so together they compute at most 2 cores' worth and the run's scaling is the machine's; simulate=True (--simulate) runs 4 workers without sharing"
    >>> crowding_note([here] * 2, 2, 2)[:60]
    '2 CPU workers with 2 BLAS threads each on 2 cores of this ho'
    >>> crowding_note([here] * 2, 1, 1).split(", so ")[1][:38]
    "together they compute at most 1 core's"
    >>> crowding_note([here] * 2, 1, 2), crowding_note([{"kind": "cpu", "host": "elsewhere"}] * 8, 1, 2)
    (None, None)
    """
    import socket
    here = {socket.gethostname(), "localhost"}
    n = sum(1 for w in workers if w.get("kind") == "cpu" and w.get("host") in here)
    blas = max(int(blas_threads or 1), 1)
    if n == 0 or n * blas <= cores:
        return None
    each = f" with {blas} BLAS threads each" if blas > 1 else ""
    worth = "cores' worth" if cores != 1 else "core's worth"
    return (f"{n} CPU worker{'s' if n != 1 else ''}{each} on {cores} core{'s' if cores != 1 else ''} of this host: "
            f"they take turns on the cores, so together they compute at most {cores} {worth} and the run's scaling "
            f"is the machine's; simulate=True (--simulate) runs {n} workers without sharing")


def cores_text(cores: int | float) -> str:
    """'1 core', '2 cores': a count of cores as the notes say it (a Binder pod has one).

    >>> cores_text(1), cores_text(2)
    ('1 core', '2 cores')
    """
    return f"{cores} core{'' if cores == 1 else 's'}"


def note(state: dict[str, Any] | None) -> str | None:
    """The sentence to show when other processes or steal took a noticeable share of the
    cores (`OTHERS_NOTICEABLE` of them), else None.

    >>> note({"cores": 2, "other_cores": 1.6, "steal_cores": 0.0})
    'other processes used 1.6 of 2 cores during this run: its throughput measures the machine, not the algorithm'
    >>> note({"cores": 2, "other_cores": 0.05, "steal_cores": 0.3})
    'the hypervisor took 0.3 of 2 cores (steal) during this run: its throughput measures the machine, not the algorithm'
    >>> note({"cores": 1, "other_cores": 0.8, "steal_cores": 0.0}).split(":")[0]   # a Binder pod's one CPU
    'other processes used 0.8 of 1 core during this run'
    >>> note({"cores": 2, "other_cores": 0.1, "steal_cores": 0.0}) is None
    True
    >>> note({"cores": 2, "other_cores": 1.6, "steal_cores": 0.0, "workers_elsewhere": 2})
    'other processes used 1.6 of 2 cores of this host during this run (2 workers on other hosts, whose load this host cannot see): its throughput measures the machine, not the algorithm'
    >>> note({"cores": 2, "other_cores": None, "load_before": 3.1, "load_after": 2.5})
    'the load average was 3.1 before this run on 2 cores (this system does not say who used them)'
    """
    if not state:
        return None
    if state.get("workers_elsewhere"):   # this host is the client's (and some workers'): others unseen
        n = int(state["workers_elsewhere"])
        inner = note({**state, "workers_elsewhere": 0})
        if inner is None:
            return None
        return inner.replace(" during this run", f" of this host during this run ({n} worker{'s' if n != 1 else ''} "
                             f"on other hosts, whose load this host cannot see)", 1)
    cores = int(state.get("cores") or 1)
    limit = OTHERS_NOTICEABLE * cores
    others, steal = state.get("other_cores"), state.get("steal_cores")
    tail = "during this run: its throughput measures the machine, not the algorithm"
    if others is None:   # no /proc/stat: only the load says something
        load = state.get("load_before")
        if load is not None and load >= cores * (1 - OTHERS_NOTICEABLE):
            return (f"the load average was {load:.1f} before this run on {cores_text(cores)} "
                    f"(this system does not say who used them)")
        return None
    parts, of = [], cores_text(cores)
    if others >= limit:
        parts.append(f"other processes used {others:.1f} of {of}")
    if steal is not None and steal >= limit:
        parts.append(f"the hypervisor took {steal:.1f} of {of} (steal)")
    return f"{' and '.join(parts)} {tail}" if parts else None
