"""`--scheduler tls://...` (issue 29, leftover of deliverable 1): an external cluster secured
with Dask's TLS is reached with the user's own Dask TLS settings (`distributed.comm.tls.*`),
as `dask scheduler` / `dask worker` started by hand would be.

Here: a real `dask scheduler` and one `dask worker` as subprocesses, with certificate files
made for the test (one self-signed pair used as CA and as every role's certificate, written
0600). Without the settings the address is one line naming them (before a connection is
tried); with them a run on that cluster completes; with someone else's valid credentials
the scheduler refuses the handshake (one line).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parent.parent


def _pem_files(directory: Path, name: str) -> dict[str, str]:
    from distributed import Security
    sec = Security.temporary()
    out = {}
    for kind, text in (("ca", sec.tls_ca_file), ("cert", sec.tls_client_cert), ("key", sec.tls_client_key)):
        path = directory / f"{name}-{kind}.pem"
        path.touch(mode=0o600)
        path.write_text(text)
        out[kind] = str(path)
    return out


def _settings(pem: dict[str, str]) -> dict[str, str]:
    return {"distributed.comm.tls.ca-file": pem["ca"], "distributed.comm.tls.client.cert": pem["cert"],
            "distributed.comm.tls.client.key": pem["key"]}


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """(address, pem files) of a `dask scheduler` + one `dask worker` speaking mutual TLS."""
    tmp = tmp_path_factory.mktemp("tls")
    pem = _pem_files(tmp, "ours")
    tls = ["--tls-ca-file", pem["ca"], "--tls-cert", pem["cert"], "--tls-key", pem["key"]]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    log = open(tmp / "scheduler.log", "w+")
    sched = subprocess.Popen([*dask, "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
                              "--protocol", "tls", *tls], env=env, stdout=log, stderr=subprocess.STDOUT)
    procs = [sched]
    try:
        address = None
        for _ in range(600):   # the scheduler prints its address once it listens (a hang guard, 60 s)
            found = re.search(r"Scheduler at:\s+(tls://127\.0\.0\.1:\d+)", (tmp / "scheduler.log").read_text())
            if found:
                address = found.group(1)
                break
            assert sched.poll() is None, (tmp / "scheduler.log").read_text()
            time.sleep(0.1)
        assert address, (tmp / "scheduler.log").read_text()
        worker_log = open(tmp / "worker.log", "w+")
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                                       "--nthreads", "1", "--nworkers", "1", "--host", "127.0.0.1", *tls],
                                      env=env, stdout=worker_log, stderr=subprocess.STDOUT))
        import dask
        from distributed import Client
        with dask.config.set(_settings(pem)), Client(address, timeout=60) as c:
            c.wait_for_workers(1, timeout=120)
        yield address, pem, tmp
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def test_without_the_tls_settings_the_address_is_one_line_naming_them(tls_cluster):
    from workbench.config import ConfigError
    from workbench.execution.cluster import connect
    from workbench.execution.preflight import check_reachable
    address, _, _ = tls_cluster
    for attempt in (lambda: connect(address), lambda: check_reachable(address)):
        with pytest.raises(ConfigError) as e:
            attempt()
        text = str(e.value)
        assert text.startswith("scheduler: tls:// only with Dask's TLS settings") and "\n" not in text
        assert "distributed.comm.tls.ca-file" in text and text.endswith(f"got {address!r}")


def test_a_run_on_the_tls_cluster_with_the_users_settings_completes(tls_cluster):
    import dask

    import workbench as wb
    from workbench.execution.cluster import close_session, connect
    address, pem, _ = tls_cluster
    with dask.config.set(_settings(pem)):
        client = connect(address)
        try:
            assert client.scheduler.address == address
            assert client.submit(lambda: 6 * 7).result(timeout=60) == 42
        finally:
            client.close()
        cfg = wb.RunConfig(algorithm="sync_sgd", dataset="digits", cpus=1, batch_size=16, steps=4,
                           scheduler=address)
        try:
            result = wb.run(cfg, progress=False)
        finally:
            close_session()
    assert result.status == "completed" and result.summary["steps"] == 4


def test_someone_elses_credentials_are_refused_in_one_line(tls_cluster):
    import dask

    from workbench.config import ConfigError
    from workbench.execution.cluster import probe_scheduler
    address, _, tmp = tls_cluster
    theirs = _pem_files(tmp, "theirs")   # valid, self-signed, but not the cluster's CA
    with dask.config.set(_settings(theirs)), pytest.raises(ConfigError) as e:
        probe_scheduler(address, timeout=5)
    assert str(e.value).startswith("scheduler: ") and "\n" not in str(e.value)


def test_a_client_certificate_without_its_key_is_one_line_naming_the_key(tls_cluster):
    """The CA and the certificate set, no key (and none in the certificate's file): ssl's
    'PEM lib' came out as a 25-line traceback."""
    import dask

    from workbench.config import ConfigError
    from workbench.execution.cluster import connect
    from workbench.execution.preflight import check_reachable
    address, pem, _ = tls_cluster
    settings = {**_settings(pem), "distributed.comm.tls.client.key": None}
    for attempt in (lambda: connect(address), lambda: check_reachable(address)):
        with dask.config.set(settings), pytest.raises(ConfigError) as e:
            attempt()
        text = str(e.value)
        assert text.startswith("scheduler: ") and "\n" not in text, text
        assert "distributed.comm.tls.client.key" in text and pem["cert"] in text, text


def test_tcp_to_a_tls_scheduler_says_to_use_tls(tls_cluster):
    """It said 'Connection reset by peer' and nothing about TLS."""
    from workbench.config import ConfigError
    from workbench.execution.cluster import probe_scheduler
    address, _, _ = tls_cluster
    plain = "tcp://" + address.split("://", 1)[1]
    with pytest.raises(ConfigError) as e:
        probe_scheduler(plain, timeout=5)
    text = str(e.value)
    assert "\n" not in text and f"for a TLS scheduler give {address}" in text, text
    assert "speaks TLS (a Dask scheduler with TLS, or another TLS server)" in text, text
