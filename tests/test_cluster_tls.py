"""The clusters the workbench starts are authenticated (issue 29, deliverable 1): mutual TLS
with credentials made for the cluster and held only in memory (`cluster.local_security`),
so another user of the host, who can reach 127.0.0.1 as well as we can, cannot connect to
the scheduler or a worker and run code there.

Refused here: a Dask client without credentials (over tls:// and over plain tcp://), one
with valid credentials of its own (another self-signed pair: not ours), and, where the
tests run as root with a system python3, a TLS handshake made as uid 65534 without a
certificate. Accepted: our own client, which runs a task.
"""
from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

OTHER_PYTHON = "/usr/bin/python3"   # one a second user can run (the venv may sit under /root)


@pytest.fixture(scope="module")
def client():
    from workbench.execution.cluster import make_cluster
    c = make_cluster(gpus=0, cpus=1, quiet=True)
    yield c
    c.cluster.close()
    c.close()


def _try(address: str, **connection_args) -> str:
    """'connected' or the kind of refusal of a Dask connection to `address` (5 s bound)."""
    from distributed.comm import connect

    async def attempt():
        comm = await connect(address, timeout=5, **connection_args)
        await comm.write({"op": "identity"})
        await asyncio.wait_for(comm.read(), 5)
        await comm.close()
    try:
        asyncio.run(attempt())
        return "connected"
    except Exception as exc:   # noqa: BLE001  (any refusal will do: what matters is that none connects)
        return type(exc).__name__


def test_every_address_of_our_cluster_is_tls(client):
    info = client.scheduler_info()
    assert client.scheduler.address.startswith("tls://127.0.0.1:")
    assert info["workers"] and all(a.startswith("tls://") for a in info["workers"])
    assert client.submit(lambda x: x + 1, 41, pure=False).result() == 42   # our credentials work


def test_a_client_without_our_credentials_is_refused(client):
    from distributed import Security
    addresses = [client.scheduler.address, *client.scheduler_info()["workers"]]
    ours = client.security.get_connection_args("client")
    assert _try(addresses[0], **ours) == "connected"     # the probe itself can connect
    theirs = Security.temporary().get_connection_args("client")
    for address in addresses:
        assert _try(address) != "connected"                              # no credentials at all
        assert _try(address.replace("tls://", "tcp://")) != "connected"  # plain TCP to a TLS port
        assert _try(address, **theirs) != "connected"                    # valid TLS, someone else's pair


PROBE = """
import socket, ssl, sys
host, port = sys.argv[1], int(sys.argv[2])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
try:
    with socket.create_connection((host, port), timeout=5) as raw, ctx.wrap_socket(raw) as s:
        s.sendall(b"x" * 64)
        print("connected" if s.recv(1) else "closed")
except ssl.SSLEOFError:
    print("HANDSHAKE_CUT")   # the server dropped the handshake without an alert (seen under load)
except ssl.SSLError as exc:
    print(exc.reason or exc)   # CERTIFICATE_REQUIRED (TLS 1.3's alert) or HANDSHAKE_FAILURE; WRONG_VERSION_NUMBER: no TLS
except OSError as exc:
    print(type(exc).__name__)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(OTHER_PYTHON, os.X_OK),
                    reason="needs root and a system python3 to act as a second local user (uid 65534)")
def test_another_local_user_cannot_get_past_the_handshake(client):
    """Uid 65534 reaches the port (loopback does not separate users) but, without a
    certificate signed by the cluster's own key, the server ends the handshake."""
    host, port = client.scheduler.address.removeprefix("tls://").rsplit(":", 1)
    out = subprocess.run([OTHER_PYTHON, "-c", PROBE, host, port], capture_output=True, text=True, user=65534,
                         group=65534, extra_groups=[], timeout=60, cwd="/")
    said = out.stdout.strip()
    # refused: an alert, or the handshake cut off by the server (never "connected"/"closed",
    # which would mean the handshake completed)
    refused = ("TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_HANDSHAKE_FAILURE", "HANDSHAKE_CUT",
               "ConnectionResetError")
    assert said in refused, (said, out.stderr)
    assert client.submit(lambda: 1, pure=False).result() == 1   # and the cluster still serves us
