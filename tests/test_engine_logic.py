"""CPU-side tests of the engine's GPU logic: worker choice, comm choice, host staging."""
import numpy as np
import pytest

from workbench.algorithms.base import WorkerContext
from workbench.config import ConfigError, RunConfig
from workbench.execution.engine import choose_comm, choose_workers


def w(name, kind, host="h1"):
    return {"name": name, "kind": kind, "host": host, "address": f"tcp://{host}:{name}"}


def test_gpu_workers_come_first_then_cpus():
    avail = [w("c0", "cpu"), w("g0", "gpu"), w("c1", "cpu"), w("g1", "gpu")]
    got = choose_workers(avail, RunConfig(algorithm="cgdp", gpus=2, cpus=1))
    assert [x["name"] for x in got] == ["g0", "g1", "c0"]
    assert len(choose_workers(avail, RunConfig(algorithm="cgdp", gpus="auto", cpus=0))) == 2


def test_asking_more_gpus_than_the_cluster_has_is_a_config_error():
    with pytest.raises(ConfigError, match="gpus: at most the 0 GPU worker"):
        choose_workers([w("c0", "cpu")], RunConfig(algorithm="sync_sgd", gpus=1, cpus=0))


def test_comm_choice():
    cfg = RunConfig(algorithm="sync_sgd", cpus=2)
    assert choose_comm(cfg, [w("a", "cpu"), w("b", "cpu")]) == "shm"
    assert choose_comm(cfg, [w("a", "cpu", "h1"), w("b", "cpu", "h2")]) == "dask"
    with pytest.raises(ConfigError, match="comm: shm only when every worker is on one host"):
        choose_comm(cfg.replace(comm="shm"), [w("a", "cpu", "h1"), w("b", "cpu", "h2")])


class FakeDeviceArray:
    """Stands in for a CuPy array: host copies only through .get()."""

    def __init__(self, a):
        self.a = np.asarray(a)

    def get(self):
        return self.a.copy()


class FakeXP:
    @staticmethod
    def asarray(a):
        return FakeDeviceArray(a)


class RecordingComm:
    def __init__(self):
        self.seen = []

    def allreduce(self, buf):
        self.seen.append(type(buf))
        return buf * 2


def test_device_buffers_are_staged_through_the_host_for_host_comms():
    comm = RecordingComm()
    ctx = WorkerContext(rank=0, size=1, kind="gpu", xp=FakeXP(), config=RunConfig(), plan=None, model=None,
                        X=None, y=None, comm=comm)
    out = ctx.allreduce(FakeDeviceArray([1.0, 2.0]))
    assert comm.seen == [np.ndarray]                 # the comm saw a host array
    assert isinstance(out, FakeDeviceArray)          # the caller gets a device array back
    np.testing.assert_array_equal(out.get(), [2.0, 4.0])


def test_device_comms_get_device_buffers_directly():
    class DeviceComm(RecordingComm):
        device = True

        def allreduce(self, buf):
            self.seen.append(type(buf))
            return buf
    comm = DeviceComm()
    ctx = WorkerContext(rank=0, size=1, kind="gpu", xp=FakeXP(), config=RunConfig(), plan=None, model=None,
                        X=None, y=None, comm=comm)
    ctx.allreduce(FakeDeviceArray([1.0]))
    assert comm.seen == [FakeDeviceArray]
