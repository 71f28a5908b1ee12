"""Dask clusters for training: local CPU workers, dask-cuda GPU workers, or both.

`make_cluster(gpus="auto", cpus=2)` starts the session's cluster (later runs reuse it);
`connect("tcp://HOST:8786")` (or tls://) joins one started elsewhere (`dask scheduler` / `dask worker`,
dask-jobqueue, dask-kubernetes).

Worker processes get one thread each (the training loop), one BLAS thread each at start
(every run then sets its own `blas_threads`, 1 unless asked: `workbench.util.blas`, the
one rule every entry point shares), and none of the `MALLOC_TRIM_THRESHOLD_` that Dask's nanny sets by
default (it halved NumPy MLP throughput here), and Dask's own background work in each
worker slowed down (`QUIET_WORKERS`). The client's own `os.environ` is left as it was
(starting a LocalCluster copies the nanny's environment into it).

Local clusters bind to 127.0.0.1 and speak TLS with mutual authentication (`local_security`):
binding to loopback does not keep out the host's other users, a certificate does. The
credentials are a key pair made for this cluster that lives only in this process and its
workers' memory (Dask's `Security.temporary()`), so nobody else can connect to the
scheduler or the workers and run code as you. A cluster given by address (`connect`) is
secured, or not, by whoever started it: a tls:// one is reached with the user's Dask TLS
settings (`scheduler_security`: `distributed.comm.tls.*`), see Dask's TLS documentation.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config import ConfigError
from ..maths.backend import GPUUnavailable, gpu_install_hint
from ..util.blas import DEFAULT_BLAS_THREADS

WORKER_KIND_ENV = "WORKBENCH_WORKER_KIND"   # "cpu" | "gpu": set on every worker we start
_SESSION: dict[str, Any] = {}               # the session's cluster: {"key", "client"}


# Dask's background work inside every worker process, slowed down for the workers we start.
# A training step at teaching sizes is ~0.1 ms and a synchronous step waits for every
# worker, so anything that takes a worker's core or its GIL for a moment (the statistical
# profiler samples every thread's stack each 10 ms; the event loop's tick fires every
# 20 ms; the system and memory monitors call psutil every 0.5 s and 0.1 s) stalls all of
# them. Interleaved runs of sync_sgd on the teaching MLP, 2 workers on 2 cores: 0.53 of
# the no-exchange limit on average with Dask's defaults (15 runs, best 0.66), 0.64 with
# these (12 runs, best 0.90). Our own timings replace the profiler; the Dask dashboard's
# CPU and memory plots update every few seconds instead of twice a second.
QUIET_WORKERS = {"distributed.worker.profile.enabled": False,
                 "distributed.admin.tick.interval": "1s",
                 "distributed.admin.system-monitor.interval": "5s",
                 "distributed.worker.memory.monitor-interval": "1s"}


def _blas_env(threads: int) -> dict[str, Any]:
    n = str(max(1, threads))
    return {"OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "MALLOC_TRIM_THRESHOLD_": None}


def _spawn_hook_env() -> dict[str, str]:
    """PYTHONPATH for the worker processes: `spawnhook` first (they ignore Ctrl-C from
    their first instruction), then the client's own PYTHONPATH."""
    hook = str(Path(__file__).resolve().parent / "spawnhook")
    return {"PYTHONPATH": os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH")) if p)}


@contextlib.contextmanager
def _pristine_environ():
    """Restore the client's os.environ after the nanny copied worker variables into it."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _workers_environ():
    """`_pristine_environ`, with the spawn hook in os.environ's own PYTHONPATH while the
    workers spawn. The nanny copies `pre-spawn-environ` into os.environ, but a variable set
    there already wins over that setting (distributed's `_get_env_variables`): with a
    PYTHONPATH of the user's, the workers started without the hook and a Ctrl-C while they
    imported Dask printed each one's KeyboardInterrupt traceback."""
    with _pristine_environ():
        os.environ.update(_spawn_hook_env())
        yield


def _preloads() -> list[str]:
    """The user's worker preloads plus ours (workers ignore the terminal's Ctrl-C)."""
    import dask
    configured = dask.config.get("distributed.worker.preload", default=[]) or []
    configured = [configured] if isinstance(configured, str) else list(configured)
    return configured + [m for m in ("workbench.execution.workerinit",) if m not in configured]


def _dashboard() -> str | None:
    try:
        import bokeh  # noqa: F401  (the Dask dashboard needs it)
        return "127.0.0.1:0"
    except ImportError:
        return None


def _visible_gpus() -> int:
    from ..maths.backend import gpu_count
    return gpu_count()


TLS_INSTALL_HINT = "pip install cryptography (a dependency of parallel-workbench)"


def local_security() -> Any:
    """TLS credentials for a cluster this process starts: a self-signed key pair, in memory
    only (`distributed.Security.temporary()`), required of every client, scheduler and
    worker (mutual TLS, `require_encryption`). Without it, another user of the host could
    connect to the cluster's 127.0.0.1 ports and run code on its workers as you.

    Raises:
        ImportError: `cryptography` (which makes the key pair) is missing, with the install command.
    """
    from distributed import Security
    try:
        import cryptography  # noqa: F401  (Security.temporary's key maker)
    except ImportError:
        raise ImportError(f"the local cluster's TLS credentials need cryptography: {TLS_INSTALL_HINT}") from None
    return Security.temporary()


_NANNY_KEEPING: dict[type, type] = {}


def nanny_keeping(base: type) -> type:
    """`base` (a distributed SpecCluster: LocalCluster, LocalCUDACluster, SpecCluster) that
    leaves a lost worker to its Nanny, which brings a fresh worker process back itself.

    SpecCluster hard-closes the object behind a worker name when, `distributed.deploy.
    lost-worker-timeout` (15 s) after the scheduler removed a worker, no worker of that name
    is registered (dask/distributed#3088: meant for job-queue jobs that do not come back; the
    PR notes it also closes one whose replacement "has not spun up yet"). For a Nanny that is
    the replacement: a restart (a new interpreter, its imports, a TLS handshake) takes longer
    than 15 s on a loaded machine, and a second loss of the same name within 15 s of an
    earlier one is closed by the earlier loss's timer whatever the speed. The cluster then
    kept one worker fewer for good ("Closing Nanny ... Reason: nanny-close" right after
    "Restarting worker"). Here a removal whose Nanny is still running is left to that Nanny;
    a Nanny that cannot restart its worker closes itself (`nanny-instantiate-failed`), and
    every other removal keeps SpecCluster's rule."""
    if base not in _NANNY_KEEPING:
        from distributed import Nanny
        from distributed.core import Status
        from distributed.deploy.cluster import Cluster

        def _update_worker_status(self, op, msg):
            if op == "remove":
                name = self.scheduler_info["workers"].get(msg, {}).get("name")
                spec = self.workers.get(name)
                if isinstance(spec, Nanny) and spec.status == Status.running:
                    return Cluster._update_worker_status(self, op, msg)   # the bookkeeping, no close
            return base._update_worker_status(self, op, msg)

        _NANNY_KEEPING[base] = type(base.__name__, (base,), {
            "_update_worker_status": _update_worker_status, "__module__": __name__,
            "__doc__": f"{base.__name__} whose nannies restart their lost workers (see nanny_keeping)."})
    return _NANNY_KEEPING[base]


_GPU_TAGGING: dict[type, type] = {}


def gpu_tagging(base: type) -> type:
    """`base` (dask-cuda's LocalCUDACluster) whose workers carry our kind variable.

    LocalCUDACluster writes each worker's `env` itself (`new_worker_spec` sets it to the
    worker's CUDA_VISIBLE_DEVICES alone), so an `env=` given to the constructor never
    reaches a worker: on the first real GPU run (an H200, 2026-12-04) every dask-cuda
    worker described itself as a CPU worker and `gpus=1` was refused. Here the variable is
    added to each worker's spec after dask-cuda has made it."""
    if base not in _GPU_TAGGING:
        def new_worker_spec(self):
            spec = base.new_worker_spec(self)
            for one in spec.values():
                options = one.setdefault("options", {})
                options["env"] = {**(options.get("env") or {}), WORKER_KIND_ENV: "gpu"}
            return spec

        _GPU_TAGGING[base] = type(base.__name__, (base,), {
            "new_worker_spec": new_worker_spec, "__module__": __name__,
            "__doc__": f"{base.__name__} whose workers say they are GPU workers (see gpu_tagging)."})
    return _GPU_TAGGING[base]


def worker_memory_limit(n_workers: int, total: int | None = None, beside: int | None = None) -> int:
    """Each local worker's memory limit in bytes: its share of the memory this process tree
    may use (`total`; default the smaller of Dask's `distributed.system.MEMORY_LIMIT`, which
    reads the machine's memory and the root cgroup's limit, a container's, and the limits of
    the cgroups above this process's own, `util.machine.cgroup_memory_limit`: a batch job's
    or a systemd scope's, which Dask does not see), whatever the CPU count, once what lives
    beside the workers in it is set aside (`beside`; default `util.machine.beside_workers()`:
    the kernel with the scheduler and the nannies, the libraries' shared pages, a Jupyter
    server), never less than half of `total` shared out.

    Dask's own "auto" gives each worker total * min(1, threads / cores): on one CPU, as
    Binder gives, that is the whole container for every worker, so Dask cannot pause or
    restart a worker before the container's limit kills the pod. Shared out without what
    lives beside them, 2 workers in 1 GiB got 512 MiB each, 1 GiB together beside a kernel
    of 130 MB and more: Dask's thresholds came after the container's limit.

    >>> worker_memory_limit(2, total=2_000_000_000, beside=0), worker_memory_limit(3, total=10, beside=0)
    (1000000000, 3)
    >>> worker_memory_limit(2, total=1 << 30, beside=184 << 20) >> 20   # Binder's 1 GiB, beside a script's client
    420
    """
    if total is None:
        from distributed.system import MEMORY_LIMIT

        from ..util.machine import cgroup_memory_limit
        total = min(MEMORY_LIMIT, cgroup_memory_limit() or MEMORY_LIMIT)
    if beside is None:
        from ..util.machine import beside_workers
        beside = beside_workers()
    total = int(total)
    return max(1, max(total - int(beside), total // 2) // max(1, n_workers))


def make_cluster(gpus: int | str = "auto", cpus: int = 2, *, threads_per_worker: int = 1,
                 memory_limit: str | float | None = "auto", quiet: bool = False, tls: bool = True) -> Any:
    """Start a local cluster and return a `distributed.Client` connected to it.

    Args:
        gpus: GPU workers (one per device) or "auto" for every visible GPU; "auto" falls
            back to CPU workers with a one-line note when no GPU (or no dask-cuda/CuPy) is there.
        cpus: CPU worker processes.
        threads_per_worker: Dask threads per worker (the training loop needs one).
        memory_limit: per worker, as Dask takes it; "auto": each worker's share of the
            machine's or the cgroup's memory (`worker_memory_limit`), on any CPU count.
        quiet: no note on stderr.
        tls: mutual TLS (`local_security`); False only for benchmarks of plain tcp (the
            ring allreduce between hosts of a cluster without TLS): anyone on the host could
            then reach the workers.
    Returns:
        A Client; `client.cluster` is the cluster.
    """
    import dask
    from distributed import Client, LocalCluster

    n_gpus = _resolve_gpus(gpus, quiet)
    if isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 0:
        raise ConfigError("cpus", "a whole number >= 0", cpus)
    if n_gpus + cpus < 1:
        raise ConfigError("cpus", "at least one worker in total (cpus + gpus)", cpus)
    if memory_limit == "auto":
        memory_limit = worker_memory_limit(n_gpus + cpus)
    # one BLAS thread per worker whatever the worker count (util.blas): the run sets its own
    settings = {"distributed.nanny.pre-spawn-environ": {**_blas_env(DEFAULT_BLAS_THREADS), **_spawn_hook_env()},
                "distributed.scheduler.allowed-failures": 0,
                "distributed.worker.daemon": False,
                "distributed.worker.preload": _preloads(), **QUIET_WORKERS}
    security = local_security() if tls else None
    cluster = client = None
    try:
        # a Ctrl-C while the workers start is held until the start ends (`interrupts_held`),
        # then raised here: what started is closed below
        with interrupts_held(), dask.config.set(settings), _workers_environ():
            if n_gpus == 0:
                cluster = nanny_keeping(LocalCluster)(
                    n_workers=cpus, threads_per_worker=threads_per_worker, processes=True, host="127.0.0.1",
                    dashboard_address=_dashboard(), security=security, memory_limit=memory_limit,
                    env={WORKER_KIND_ENV: "cpu"})
            elif cpus == 0:
                from dask_cuda import LocalCUDACluster
                cluster = nanny_keeping(gpu_tagging(LocalCUDACluster))(
                    CUDA_VISIBLE_DEVICES=list(range(n_gpus)), threads_per_worker=threads_per_worker,
                    host="127.0.0.1", dashboard_address=_dashboard(), security=security, memory_limit=memory_limit)
            else:
                cluster = _mixed_cluster(n_gpus, cpus, threads_per_worker, memory_limit, security=security)
            client = Client(cluster, set_as_default=False, security=security)
            client.wait_for_workers(n_gpus + cpus, timeout=120)
    except BaseException:   # the interrupt held, or a start that failed: nothing of it is left running
        if client is not None:
            close_client(client)
        elif cluster is not None:
            with contextlib.suppress(Exception), _quiet_logs():
                cluster.close()
        raise
    return client


@contextlib.contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """While a local cluster starts: SIGINT (Ctrl-C, a kernel's interrupt) is recorded, not
    raised, and its handler is called once the block ends, where the caller can close
    what it started. Yields the list it is recorded in.

    Raised inside Dask's start, its KeyboardInterrupt left a half-made cluster that nobody
    closed, and a screen of "Nanny failed to start" tracebacks. (The worker processes the
    start spawns ignore it themselves: `spawnhook`.) Off the main thread, or where SIGINT
    is not handled by Python code (ignored, the default), nothing changes.
    """
    import signal
    import threading
    sig = signal.SIGINT
    handler = signal.getsignal(sig)
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread() or not callable(handler):
        yield got
        return
    signal.signal(sig, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        signal.signal(sig, handler)
        if got:   # the CLI's note and its KeyboardInterrupt, raised here (over a start it made fail)
            handler(sig, None)

def _resolve_gpus(gpus: int | str, quiet: bool) -> int:
    if gpus == "auto":
        n = _visible_gpus()
        if n and not _has_dask_cuda():
            if not quiet:
                print(f"note: {n} GPU(s) visible but dask-cuda is not installed; using CPU workers "
                      f"({gpu_install_hint()})", file=sys.stderr)
            return 0
        if n == 0 and not quiet:
            print("note: no GPU found (or CuPy missing); using CPU workers only", file=sys.stderr)
        return n
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ConfigError("gpus", 'a whole number >= 0 or "auto"', gpus)
    if gpus == 0:
        return 0
    have = _visible_gpus()
    if have < gpus:
        raise GPUUnavailable(f"gpus: at most the {have} visible GPU(s) here; GPU workers need an NVIDIA "
                             f"GPU, CuPy and dask-cuda ({gpu_install_hint()}), got {gpus}")
    if not _has_dask_cuda():
        raise GPUUnavailable(f"gpus: dask-cuda is needed for GPU workers ({gpu_install_hint()}), got {gpus}")
    return gpus


def _has_dask_cuda() -> bool:
    try:
        import dask_cuda  # noqa: F401
        return True
    except Exception:
        return False


def _mixed_cluster(n_gpus: int, cpus: int, threads: int, memory_limit: Any,
                   devices: list[int] | None = None, security: Any = None) -> Any:
    """GPU and CPU workers in one SpecCluster; each knows its kind and device.

    `devices[i]` is GPU worker i's device (default i); repeating a device lets several
    workers share one GPU (what a one-GPU machine can show: never multi-GPU scaling)."""
    from distributed import Nanny, Scheduler, SpecCluster

    devices = devices or list(range(n_gpus))
    security = security if security is not None else local_security()
    # LocalCluster's default: Dask's INFO lines (worker start, client connections) stay out
    # of the run's output, in the scheduler here and in every worker
    tls = {"security": security, "protocol": "tls://", "silence_logs": logging.WARN}
    workers: dict[str, dict] = {}
    for i in range(n_gpus):
        workers[f"gpu-{i}"] = {"cls": Nanny, "options": {
            "nthreads": threads, "host": "127.0.0.1", "memory_limit": memory_limit, **tls,
            "resources": {"GPU": 1}, "env": {WORKER_KIND_ENV: "gpu", "CUDA_VISIBLE_DEVICES": str(devices[i])}}}
    for i in range(cpus):
        workers[f"cpu-{i}"] = {"cls": Nanny, "options": {
            "nthreads": threads, "host": "127.0.0.1", "memory_limit": memory_limit, **tls,
            "env": {WORKER_KIND_ENV: "cpu", "CUDA_VISIBLE_DEVICES": ""}}}
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": _dashboard(),
                                               "security": security, "protocol": "tls://"}}
    return nanny_keeping(SpecCluster)(workers=workers, scheduler=scheduler, security=security,
                                      silence_logs=logging.WARN)


def shared_gpu_cluster(gpu_workers: int, cpus: int = 0) -> Any:
    """A Client whose `gpu_workers` GPU workers all share device 0 (one-GPU machines)."""
    import dask
    from distributed import Client

    settings = {"distributed.nanny.pre-spawn-environ": {**_blas_env(DEFAULT_BLAS_THREADS), **_spawn_hook_env()},
                "distributed.scheduler.allowed-failures": 0,
                "distributed.worker.preload": _preloads(), **QUIET_WORKERS}
    with dask.config.set(settings), _workers_environ():
        cluster = _mixed_cluster(gpu_workers, cpus, 1, "auto", devices=[0] * gpu_workers, security=local_security())
        client = Client(cluster, set_as_default=False, security=cluster.security)
    client.wait_for_workers(gpu_workers + cpus, timeout=120)
    return client


CONNECT_TIMEOUT_S = 5.0   # a scheduler answers its first message within this, or it is not one


def connect(address: str, timeout: float = 10.0, security: Any = None) -> Any:
    """A Client for an existing scheduler (dask-jobqueue, dask-kubernetes, `dask scheduler`).

    The address is first probed with a bounded handshake (`probe_scheduler`): a server that
    accepts and never answers would otherwise hang `Client()` for minutes, whatever its
    `timeout` says. `security`: a `distributed.Security` for a tls:// scheduler; None: the
    user's Dask TLS settings (`scheduler_security`)."""
    from distributed import Client

    from ..config import check_scheduler_address
    check_scheduler_address(address)
    security = scheduler_security(address, security)
    probe_scheduler(address, timeout=min(timeout, CONNECT_TIMEOUT_S), security=security)
    return Client(address, timeout=timeout, set_as_default=False, security=security)


def open_client(cluster: Any) -> Any:
    """`cluster` as a Client: a Client as it is; for a scheduler address (`connect`) or a
    cluster object, one opened here, which its opener closes (`client.close()` alone: the
    cluster and its scheduler are the user's). One run closes its own
    (`DaskTransport.let_go`); a sweep opens one for all its points."""
    from distributed import Client
    if isinstance(cluster, Client):
        return cluster
    if isinstance(cluster, str):
        return connect(cluster)
    return Client(cluster, set_as_default=False)


TLS_SETTINGS = ("distributed.comm.tls.ca-file", "distributed.comm.tls.client.cert")


def scheduler_security(address: str, security: Any = None) -> Any:
    """The `distributed.Security` a connection to `address` uses: `security` when given,
    else the one Dask's own settings make (`Security()` reads `distributed.comm.tls.*`:
    ca-file, client.cert, client.key, from ~/.config/dask/*.yaml or the
    DASK_DISTRIBUTED__COMM__TLS__... variables). A tls:// address without a CA and a client
    certificate is a ConfigError naming the settings (Dask's TLS is mutual: the scheduler
    checks the client's certificate, the client the scheduler's)."""
    from distributed import Security
    security = Security() if security is None else security
    if address.startswith("tls://") and not (security.tls_ca_file and security.tls_client_cert):
        raise ConfigError("scheduler", "tls:// only with Dask's TLS settings for the client: "
                          f"{TLS_SETTINGS[0]}, {TLS_SETTINGS[1]} and distributed.comm.tls.client.key in Dask's "
                          "config (or wb.run(cfg, cluster=Client(address, security=...)))", address)
    if address.startswith("tls://"):   # the files must load: a certificate without its key was 25 lines of ssl
        import ssl
        try:
            security.get_connection_args("client")
        except (ssl.SSLError, OSError, ValueError) as exc:
            def shown(value: Any) -> str:
                return "unset" if not value else "(in memory)" if str(value).lstrip().startswith("-----") \
                    else str(value)
            raise ConfigError("scheduler", "tls:// with Dask's TLS settings for the client that load: "
                              f"{TLS_SETTINGS[0]} {shown(security.tls_ca_file)}, {TLS_SETTINGS[1]} "
                              f"{shown(security.tls_client_cert)}, distributed.comm.tls.client.key "
                              f"{shown(security.tls_client_key)} (the key must match the certificate, in client.key "
                              f"or in the certificate's file) gave {type(exc).__name__}: {_first_line(exc)}",
                              address) from None
    return security


def probe_scheduler(address: str, timeout: float = CONNECT_TIMEOUT_S, security: Any = None) -> dict:
    """Connect, ask the scheduler who it is and return its identity, all within `timeout`.

    Raises ConfigError("scheduler", ...) when nothing listens there, when the server
    stays silent, or when what answers is not a Dask scheduler. Runs in a helper thread
    with its own event loop, so it works under a running loop (Jupyter) too; a hung
    attempt is abandoned there (a daemon thread), never waited for. A tls:// address is
    spoken with `security` (default: `scheduler_security`, the user's Dask TLS settings).
    """
    import asyncio
    import queue
    import threading
    from urllib.parse import urlsplit

    # Dask (0.5-1 s of imports) only once something listens: a tcp:// address needs no
    # Security, and a refused port is reported before Dask is imported
    tls_args = scheduler_security(address, security).get_connection_args("client") \
        if address.startswith("tls://") else {}

    async def ask() -> Any:
        comm = await asyncio.wait_for(comm_connect(address, timeout=timeout, **tls_args), timeout)
        try:
            await asyncio.wait_for(comm.write({"op": "identity", "reply": True}), timeout)
            return await asyncio.wait_for(comm.read(), timeout)
        finally:
            comm.abort()

    url = urlsplit(address)
    try:  # a plain TCP connection first: refusals and unknown hosts fail fast and say so
        with socket.create_connection((url.hostname, url.port), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError("scheduler", f"a reachable Dask scheduler ({exc.strerror or exc or 'timed out'})",
                          address) from None
    from distributed.comm import connect as comm_connect  # here, not in the attempt: its timeout is the answer's
    answers: queue.SimpleQueue = queue.SimpleQueue()

    def attempt() -> None:
        try:
            answers.put(("ok", asyncio.run(ask())))
        except BaseException as exc:  # reported to the caller below
            answers.put(("error", exc))

    threading.Thread(target=attempt, name="workbench-probe-scheduler", daemon=True).start()
    try:
        kind, got = answers.get(timeout=timeout + 2.0)
    except queue.Empty:
        kind, got = "error", TimeoutError()
    if kind == "ok" and isinstance(got, dict) and got.get("type") == "Scheduler":
        return got
    if kind == "ok":
        why = "a Dask scheduler; the server there answered something else"
    elif isinstance(got, (TimeoutError, asyncio.TimeoutError)) or "Timed out" in str(got):
        why = f"a Dask scheduler answering within {timeout:g} s (it connected and then stayed silent, or nothing answered)"
    elif address.startswith("tcp://") and _speaks_tls(url.hostname, url.port, min(timeout, 2.0)):
        why = (f"a Dask scheduler over plain TCP there, but the server there speaks TLS (a Dask scheduler with TLS, "
               f"or another TLS server): for a TLS scheduler give tls://{url.netloc} (with Dask's TLS settings for "
               "the client)")
    elif isinstance(got, OSError) or "connect" in str(got).lower():
        why = f"a reachable Dask scheduler ({_first_line(got)})"
    else:
        # (the error Dask's comm raised reading it, e.g. a MemoryError for a length it read from the
        #  bytes of an HTTP reply, says nothing of the cause and reads like a problem of this machine)
        why = "a Dask scheduler; something that is not a Dask scheduler answered there (it spoke another protocol)"
    raise ConfigError("scheduler", why, address)


def _speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether the server at host:port answers a TLS handshake (no certificate checked,
    none offered): what a tcp:// address given for a tls:// scheduler runs into."""
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, context.wrap_socket(raw):
            return True
    except ssl.SSLError as exc:   # an alert is a TLS server's answer (it wants our certificate, say)
        return "alert" in str(exc).lower()
    except OSError:               # a plain server waits for the rest of its frame, or hangs up
        return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def session_client(cpus: int, gpus: int | str, scheduler: str | None = None) -> Any:
    """The session's client: reused while it has the asked-for shape, else replaced."""
    key = ("connect", scheduler) if scheduler else ("local", cpus, gpus)
    cached = _SESSION.get("client")
    if cached is not None and _SESSION.get("key") == key and cached.status == "running":
        try:
            alive = len(cached.nthreads())
        except Exception:
            alive = -1
        if scheduler or alive == cpus + (_visible_gpus() if gpus == "auto" else gpus):
            return cached
    close_session()
    client = connect(scheduler) if scheduler else make_cluster(gpus=gpus, cpus=cpus)
    _SESSION.update(key=key, client=client)
    return client


def close_session() -> None:
    """Close the session's cluster (started by `session_client`)."""
    client = _SESSION.pop("client", None)
    _SESSION.pop("key", None)
    close_client(client)


def close_client(client: Any) -> None:
    """Close a client and, when it owns one (`make_cluster`), its cluster, without the
    shutdown chatter of workers whose heartbeat races the scheduler's close."""
    if client is None:
        return
    with cancellations_unlogged():   # a client whose scheduler is gone cancels its reconnect as it closes
        _close_client(client)


def _close_client(client: Any) -> None:
    cluster = getattr(client, "cluster", None)  # None for a connected (not owned) cluster
    if cluster is not None:  # our workers are going: their shutdown chatter is no news
        with contextlib.suppress(Exception):
            client.run(_silence_logs, callback_timeout=2)
    with contextlib.suppress(Exception):
        client.close()
    if cluster is not None:
        with contextlib.suppress(Exception), _quiet_logs():
            cluster.close()


def _silence_logs() -> None:
    """On a worker about to be closed: a heartbeat racing the scheduler's close would
    log a traceback that says nothing about the run."""
    import logging
    logging.getLogger("distributed").setLevel(logging.CRITICAL)


@contextlib.contextmanager
def _quiet_logs():
    """The same for the nannies and scheduler in this process, while the cluster closes."""
    import logging
    log = logging.getLogger("distributed")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _cancelled(record: logging.LogRecord) -> bool:
    """Whether a log record is of a task Dask cancelled (its exception a CancelledError)."""
    import asyncio
    return bool(record.exc_info) and isinstance(record.exc_info[1], asyncio.CancelledError)


class _NoCancelled(logging.Filter):
    """Leaves out a log record of a task Dask cancelled: the client's reconnect to a lost
    scheduler, cancelled as the client closes, was logged as an ERROR with no message,
    "distributed.client - ERROR -  (CancelledError)", beside the run's own `scheduler_lost`
    line (and in a notebook after a run closed). The run says what happened itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _cancelled(record)


@contextlib.contextmanager
def cancellations_unlogged() -> Iterator[None]:
    """`_NoCancelled` on the handlers Dask's log lines go through (its loggers' own, the root
    logger's) and on its client's logger, for the duration only: every door (`wb.run`, a
    notebook, the CLI) gets it around a run (`engine.run`) and a client's close
    (`close_client`), and nothing of it outlives them. Dask is not imported here (a simulated
    run never loads it): a Dask run's client, made before, has configured its logging."""
    manager = logging.Logger.manager
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in list(manager.loggerDict)
                                      if name == "distributed" or name.startswith("distributed."))]
    handlers = {id(h): h for lg in loggers for h in lg.handlers}
    targets = [*handlers.values(), logging.getLogger("distributed"), logging.getLogger("distributed.client")]
    mine = _NoCancelled()
    for t in targets:
        t.addFilter(mine)
    try:
        yield
    finally:
        for t in targets:
            t.removeFilter(mine)


class _NoTracebacks(logging.Filter):
    """Dask's log lines keep their message but lose the traceback: a lost scheduler or a
    closing cluster is reported by the run itself, in one line (the summary has the rest).
    A cancelled task's record is left as it is, for `cancellations_unlogged` to leave out
    (the CLI's runs and closes are inside it, as every door's are)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and not _cancelled(record):
            exc = record.exc_info[1]
            detail = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if exc is not None and str(exc) \
                else type(exc).__name__
            record.msg, record.args = f"{record.getMessage()} ({detail})", ()
            record.exc_info, record.exc_text = None, None
        return True


def one_line_logs() -> None:
    """Put `_NoTracebacks` on the handlers Dask's logging writes through (the CLI calls it)."""
    import distributed  # noqa: F401  (configures its logging)
    for handler in logging.getLogger("distributed").handlers + logging.getLogger().handlers:
        if not any(isinstance(f, _NoTracebacks) for f in handler.filters):
            handler.addFilter(_NoTracebacks())


def describe_worker(dask_worker: Any) -> dict[str, Any]:
    """Runs on a worker (via `Client.run`): its kind, host and device."""
    w = dask_worker
    kind = os.environ.get(WORKER_KIND_ENV) or ("gpu" if w.state.total_resources.get("GPU") or _started_by_dask_cuda(w)
                                               else "cpu")
    from ..util.identity import code_identity
    from .platforms import host_key
    return {"address": w.address, "name": str(w.name), "kind": kind, "host": socket.gethostname(),
            "host_key": host_key(),   # one host: the same /dev/shm too (platforms.separate_hosts)
            "ip": w.address.split("://")[-1].rsplit(":", 1)[0], "pid": os.getpid(),
            "device": os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0] if kind == "gpu" else None,
            "memory_limit": int(getattr(getattr(w, "memory_manager", None), "memory_limit", None) or 0),
            "identity": code_identity()}


def _started_by_dask_cuda(worker: Any) -> bool:
    """A worker that dask-cuda started (`dask cuda worker` on another host, say): it holds
    dask-cuda's worker plugins (CPU affinity, RMM set-up), which a plain worker never has."""
    plugins = getattr(worker, "plugins", None) or {}
    return any(type(p).__module__.startswith("dask_cuda.") for p in plugins.values())


def workers_of(client: Any, others: list[str] | None = None) -> list[dict[str, Any]]:
    """Every worker of the cluster, described, GPU workers first, then by name.

    Each must run this process's code (`util.identity`: the workbench release, its files
    and the Python version): a ConfigError naming the first that does not, and what
    differs, before anything is sent to it (a worker of other code failed, or died, as it
    unpacked its first task). With `others` (a list), such workers are left out instead,
    each noted there as `worker NAME (ADDRESS): what differs` (`other_code_error` makes
    the ConfigError of the first)."""
    info = client.run(describe_worker, on_error="return")
    from ..util import identity
    mine = identity.code_identity()
    failed = sorted(addr for addr, w in info.items() if isinstance(w, BaseException))
    bad: list[str] = []
    if failed:   # it could not even describe itself: ask what it runs, by value (it may not import workbench)
        import cloudpickle
        cloudpickle.register_pickle_by_value(identity)
        try:
            theirs = client.run(identity.fresh_identity, workers=failed if others is not None else failed[:1],
                                on_error="return")
        finally:
            cloudpickle.unregister_pickle_by_value(identity)
        for addr in failed if others is not None else failed[:1]:
            got, error = theirs.get(addr), info[addr]
            what = (", ".join(identity.differences(mine, got)) if isinstance(got, dict) else "") or \
                f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
            bad.append(f"worker {addr}: {what}")
    from .platforms import separate_hosts
    workers = separate_hosts(sorted((w for w in info.values() if not isinstance(w, BaseException)),
                                    key=lambda w: (w["kind"] != "gpu", _natural(w["name"]), w["address"])))
    kept = []
    for w in workers:
        what = identity.differences(mine, w.pop("identity", None) or {})
        if what:
            bad.append(f"worker {w['name']} ({w['address']}): {', '.join(what)}")
        else:
            kept.append(w)
    if bad and others is None:
        raise other_code_error(bad[0])
    if others is not None:
        others.extend(bad)
    return kept


def other_code_error(worker: str) -> ConfigError:
    """The ConfigError for a worker of other code (`worker`: as `workers_of` notes it)."""
    from ..util import identity
    return ConfigError("workers", f"workers running this process's code ({identity.describe(identity.code_identity())})",
                       worker)


def _natural(name: str) -> tuple:
    import re
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


# ------------------------------------------------------------------------------ the session's client, for people
DEFAULT_LINK = "{scheme}://{host}:{port}/status"      # distributed's own dashboard link template
PROXY_LINK = "{JUPYTERHUB_SERVICE_PREFIX}proxy/{port}/status"   # through jupyter-server-proxy


def session_warm(cpus: int, gpus: int | str, scheduler: str | None = None) -> bool:
    """Whether `session_client` with these arguments would reuse the running cluster
    (no start-up to wait for)."""
    key = ("connect", scheduler) if scheduler else ("local", cpus, gpus)
    cached = _SESSION.get("client")
    return cached is not None and _SESSION.get("key") == key and cached.status == "running"


def current_client() -> Any:
    """The session's client if one is running, else None (starts nothing)."""
    cached = _SESSION.get("client")
    return cached if cached is not None and cached.status == "running" else None


def client(cpus: int = 2, gpus: int | str = 0, scheduler: str | None = None) -> Any:
    """The session's Dask client (`workbench.client()`), started if needed, registered as
    Dask's default client.

    The default client is what dask-labextension's dashboard search and
    `distributed.default_client()` find, so the JupyterLab Dask panes follow this
    session's cluster; `workbench.run` without `cluster=` uses the same one.

    Args:
        cpus, gpus, scheduler: as RunConfig's fields of those names.
    Returns:
        A running `distributed.Client` (`.dashboard_link` is its Dask dashboard;
        `dashboard_link(client)` gives it through Binder's proxy where that applies).
    """
    from distributed.client import ensure_default_client

    c = session_client(cpus, gpus, scheduler)
    ensure_default_client(c)
    return c


def dashboard_link(obj: Any) -> str | None:
    """The Dask dashboard URL of a Client or cluster (None without one, or without bokeh).

    `distributed.dashboard.link` (a template) shapes it; on JupyterHub / Binder, where
    the browser reaches the dashboard's port only through jupyter-server-proxy, a
    template left at Dask's default is replaced by `<service prefix>proxy/<port>/status`
    (binder/start sets the same through DASK_DISTRIBUTED__DASHBOARD__LINK).
    """
    import dask

    link = getattr(obj, "dashboard_link", None)
    if not link:
        return None
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if prefix and dask.config.get("distributed.dashboard.link") == DEFAULT_LINK:
        from urllib.parse import urlparse
        port = urlparse(link).port
        if port:
            return PROXY_LINK.format(JUPYTERHUB_SERVICE_PREFIX=prefix if prefix.endswith("/") else prefix + "/",
                                     port=port)
    return link
