"""The ring allreduce (comm="dask") between two hosts joined by a link of known bandwidth.

    sudo .venv/bin/python benchmarks/ring_two_hosts.py [--rates 1gbit,2gbit,none]
                                                       [--sizes 10000,536000,4000000] [--rounds 20]

Two "hosts" on this machine: the root network namespace and a new one (`wbring`), joined
by a veth pair whose two ends are shaped by the kernel's token bucket filter (`tc qdisc
... tbf rate R`) in each direction. A Dask scheduler and one worker listen on 10.77.0.1
(root namespace), the other worker on 10.77.0.2 (inside `wbring`): every byte between the
two workers crosses the shaped link through both hosts' TCP stacks, as between two
machines. Each rate's link is first measured on its own (one TCP stream of 32 MB), then
each buffer is allreduced in interleaved rounds by the ring over Dask and, when torch is
installed, by gloo between the same two processes (`bench.allreduce.allreduce_rounds`).

Beside each time, the cost model's: for P = 2 the ring swaps whole buffers, one message
of n bytes each way (`comm.ring`), so T = alpha + n beta (`comm.network.message_time`),
with beta the link's seconds per byte as measured just before (the best of 3 streams),
and alpha the per-message time, taken from the smallest buffer on the same link (its
time less its n beta); the larger buffers are then predicted, not fitted. No delay is added: this kernel has no
netem, so alpha is this machine's own (a real network's latency adds to it, see
docs/benchmarks.md).

Needs root (network namespaces, tc) and iproute2 with the tbf qdisc; everything it makes
(the namespace, the veth pair, the scheduler and workers) is removed on exit. Not part of
the test suite: it changes the machine's network configuration while it runs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid

import numpy as np

NS, A_IF, B_IF = "wbring", "wbring0", "wbring1"
A_IP, B_IP = "10.77.0.1", "10.77.0.2"


def sh(*cmd: str, ns: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    full = (["ip", "netns", "exec", NS] if ns else []) + list(cmd)
    return subprocess.run(full, check=check, capture_output=True, text=True)


def rate_bytes(rate: str) -> float:
    """Bytes per second of a tc rate ("1gbit", "100mbit").

    >>> rate_bytes("1gbit"), rate_bytes("100mbit")
    (125000000.0, 12500000.0)
    """
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale / 8
    raise ValueError(f"rate: a tc rate such as 1gbit or 100mbit, or none; got {rate!r}")


def link_up() -> None:
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", A_IF, "type", "veth", "peer", "name", B_IF)
    sh("ip", "link", "set", B_IF, "netns", NS)
    sh("ip", "addr", "add", f"{A_IP}/24", "dev", A_IF)
    sh("ip", "link", "set", A_IF, "up")
    sh("ip", "addr", "add", f"{B_IP}/24", "dev", B_IF, ns=True)
    sh("ip", "link", "set", B_IF, "up", ns=True)
    sh("ip", "link", "set", "lo", "up", ns=True)


def link_down() -> None:
    sh("ip", "link", "del", A_IF, check=False)
    sh("ip", "netns", "del", NS, check=False)


def shape(rate: str) -> None:
    """Both directions at `rate` (a tbf of 1 ms of burst), or unshaped ("none")."""
    for dev, ns in ((A_IF, False), (B_IF, True)):
        sh("tc", "qdisc", "del", "dev", dev, "root", ns=ns, check=False)
        if rate != "none":
            burst = max(64 * 1024, int(rate_bytes(rate) * 1e-3))
            sh("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst),
               "latency", "100ms", ns=ns)


def link_speed(nbytes: int = 32 << 20) -> float:
    """Bytes per second of one TCP stream from the namespace's end to the root's."""
    server = socket.socket()
    server.bind((A_IP, 0))
    server.listen(1)
    port, got = server.getsockname()[1], {}

    def receive() -> None:
        conn, _ = server.accept()
        view, n = memoryview(bytearray(1 << 20)), 0
        t0 = time.perf_counter()
        while n < nbytes:
            n += conn.recv_into(view)
        got["s"] = time.perf_counter() - t0
        conn.close()
    thread = threading.Thread(target=receive)
    thread.start()
    code = (f"import socket; s = socket.create_connection(('{A_IP}', {port})); "
            f"b = bytes(1 << 20); [s.sendall(b) for _ in range({nbytes >> 20})]; s.close()")
    sh(sys.executable, "-c", code, ns=True)
    thread.join()
    server.close()
    return nbytes / got["s"]


def start_cluster() -> tuple[list[subprocess.Popen], str]:
    dask = shutil.which("dask", path=os.path.dirname(sys.executable)) or "dask"
    port = 8786 + os.getpid() % 1000
    address = f"tcp://{A_IP}:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = [subprocess.Popen([dask, "scheduler", "--host", A_IP, "--port", str(port), "--no-dashboard"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    time.sleep(3)
    worker = ["worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--memory-limit", "0"]
    procs.append(subprocess.Popen([dask, *worker, "--host", A_IP], env={**env, "GLOO_SOCKET_IFNAME": A_IF},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    procs.append(subprocess.Popen(["ip", "netns", "exec", NS, dask, *worker, "--host", B_IP],
                                  env={**env, "GLOO_SOCKET_IFNAME": B_IF},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs, address


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1gbit,2gbit,none")
    parser.add_argument("--sizes", default="10000,536000,4000000")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("tc") or not shutil.which("ip"):
        print("error: needs root, ip and tc (network namespaces and the tbf qdisc)", file=sys.stderr)
        return 2
    from distributed import Client

    from workbench.bench.allreduce import GLOO, RING, _free_port, allreduce_rounds, summarise
    from workbench.bench.torchpeer import torch_available
    from workbench.comm.network import message_time
    from workbench.comm.ring import install
    sizes = [int(x) for x in args.sizes.split(",")]
    gloo = torch_available()
    print(f"two hosts (namespaces) over a veth pair shaped by tbf; load average {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cores; {args.rounds} interleaved rounds; gloo {'measured' if gloo else 'not installed'}")
    link_down()
    link_up()
    procs: list[subprocess.Popen] = []
    try:
        procs, address = start_cluster()
        client = Client(address, timeout=60)
        client.wait_for_workers(2, timeout=60)
        workers = sorted(client.scheduler_info()["workers"])     # tcp://10.77.0.1:..., tcp://10.77.0.2:...
        client.run(install, workers=workers)
        rows = []
        for rate in ["none", *args.rates.split(",")]:       # the first, unshaped, only warms up
            shape(rate)
            speed = max(link_speed() for _ in range(3))   # the link's capacity: its best of 3 (the host is shared)
            for n in sizes:
                port, ring = (_free_port() if gloo else None), uuid.uuid4().hex
                futs = [client.submit(allreduce_rounds, ring, r, 2, workers, None, port, n, args.rounds, A_IP,
                                      workers=[a], pure=False) for r, a in enumerate(workers)]
                got = client.gather(futs)
                slowest = {k: np.array([g["times"][k] for g in got]).max(axis=0) for k in got[0]["times"]}
                rows.append((rate, speed, n, summarise(slowest)))
        rows = rows[len(sizes):]
        alphas = {rate: stats[RING]["median_ms"] / 1e3 - 4 * n / speed
                  for rate, speed, n, stats in rows if n == min(sizes)}
        for rate, speed, n, stats in rows:
            ring_ms = stats[RING]["median_ms"]
            model_ms = message_time(4 * n, alphas[rate], 1 / speed) * 1e3
            line = (f"link {rate:>6} (measured {speed / 1e6:7.1f} MB/s)  {4 * n / 1e6:6.2f} MB:  ring {ring_ms:8.2f} ms "
                    f"[{stats[RING]['min_ms']:.2f}-{stats[RING]['max_ms']:.2f}]  model alpha + n beta "
                    f"{model_ms:8.2f} ms (alpha {alphas[rate] * 1e3:.2f} ms; ring / model {ring_ms / model_ms:.2f})")
            if GLOO in stats:
                line += (f"  gloo {stats[GLOO]['median_ms']:8.2f} ms  ring / gloo {stats[RING]['vs_gloo_median']:.2f} "
                         f"[{stats[RING]['vs_gloo_min']:.2f}-{stats[RING]['vs_gloo_max']:.2f}]")
            print(line, flush=True)
        print(f"load average {os.getloadavg()[0]:.2f}")
        client.close()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        link_down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
