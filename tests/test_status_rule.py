"""One status rule that tells the truth: a run whose every worker was lost failed; an
asynchronous run that lost some says how much of the plan ran; a lost worker's event
carries when it was lost; waits on turns and partners end on a stop and on a lost peer."""
import re
import threading
from collections.abc import Callable

import pytest

from workbench.comm.roles import ParameterServer
from workbench.execution.engine import run_threads


@pytest.mark.parametrize("algorithm", ["async_sgd", "hogwild_sgd", "easgd", "sync_sgd"])
def test_a_run_that_lost_every_worker_failed(algorithm, tiny):
    result = run_threads(tiny(algorithm=algorithm, cpus=2, steps=200), fail={0: 20, 1: 25})
    assert result.status == "failed", result.events
    if algorithm != "sync_sgd":   # (a synchronous run aborts when the first goes: the other is not lost)
        assert set(result.summary["lost_workers"]) == {"0", "1"}
    assert result.summary["plan_steps_run"].endswith("of 200")


def test_an_async_run_that_lost_some_says_how_much_of_the_plan_ran(tiny):
    result = run_threads(tiny(algorithm="async_sgd", cpus=2, steps=200), fail={1: 30})
    assert result.status == "completed"
    assert result.summary["plan_steps_run"] == f"{result.summary['steps']:,} of 200"
    note = [e for e in result.events if e["event"] == "incomplete"]
    # the survivor reaches the plan's last step; the samples say what the lost worker's share cost
    s = result.summary
    assert s["steps"] == 200 and 0 < s["samples"] < 200 * 64
    assert len(note) == 1 and note[0]["message"] == (f"1 of 2 workers lost; 200 of the plan's 200 steps ran, on "
                                                     f"{s['samples']:,} of its 12,800 samples "
                                                     f"({s['samples'] / 12800:.0%})")


def test_a_lost_workers_event_carries_when_it_was_lost(tiny):
    result = run_threads(tiny(algorithm="async_sgd", cpus=2, steps=400), fail={1: 200})
    lost = [e for e in result.events if e["event"] == "worker_lost"]
    assert len(lost) == 1
    value, unit = re.search(r"lost at ([0-9.]+) (s|ms|us)$", lost[0]["message"]).groups()   # measure.duration_text
    said = float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]
    assert lost[0]["time"] > 0 and said == pytest.approx(lost[0]["time"], rel=0.01)   # 3 significant digits
    assert lost[0]["time"] <= result.summary["wall_time_s"]


@pytest.mark.slow
def test_a_simulated_async_run_that_lost_every_worker_failed(tiny):
    from workbench.sim.run import run_simulated
    cfg = tiny(algorithm="async_easgd", cpus=2, steps=200, simulate=True, fail_worker="0@0.001,1@0.002")
    result = run_simulated(cfg)
    assert result.status == "failed"
    lost = [e for e in result.events if e["event"] == "worker_lost"]
    assert sorted(e["time"] for e in lost) == pytest.approx([0.001, 0.002])   # virtual seconds: when it was lost


def _never_my_turn(monkeypatch, rank):
    real = ParameterServer.my_turn

    def my_turn(self, r):
        return False if r == rank else real(self, r)
    monkeypatch.setattr(ParameterServer, "my_turn", my_turn)


def test_a_stop_ends_a_wait_for_a_turn_that_never_comes(monkeypatch, tiny):
    # easgd's round-robin: worker 1 waits for a turn that never comes (the hang of a lost
    # worker 0 whose turns nobody gave up); the stop request must still end the run.
    _never_my_turn(monkeypatch, 1)
    asked = threading.Event()

    def should_stop():
        return asked.is_set()
    timer = threading.Timer(1.0, asked.set)
    timer.start()
    result = run_threads(tiny(algorithm="easgd", cpus=2, epochs=400, tau=2), should_stop=should_stop)
    timer.cancel()
    assert result.status == "stopped", result.summary.get("errors")
    assert not result.summary.get("errors")            # ended as stopped, not as a failure


def test_an_abort_ends_the_chunk_masters_fetch(monkeypatch, tiny):
    # cgdp (synchronous): a lost worker aborts the run; the others' fetch must notice.
    result = run_threads(tiny(algorithm="cgdp", cpus=3, epochs=200), fail={2: 10})
    assert result.status == "failed"
    assert "worker_lost" in {e["event"] for e in result.events}


def _stop_once_every_loop_ran_out(monkeypatch) -> Callable[[], bool]:
    """A should_stop that says yes once every loop has returned its result, whose results are
    held back until it has (so the client asks the stop after the plan ran out, every time:
    asking on the last step's record raced the loops' results on a busy machine)."""
    from workbench.execution.transports.threads import ThreadTransport
    lock, returned, finished, asked = threading.Lock(), [], threading.Event(), threading.Event()
    start = ThreadTransport.start

    def held_start(self, setup, sink, main):
        def held(*args, **kwargs):
            result = main(*args, **kwargs)
            with lock:
                returned.append(result.get("status"))
                if len(returned) == setup.size:
                    finished.set()
            asked.wait(60)
            return result
        return start(self, setup, sink, held)
    monkeypatch.setattr(ThreadTransport, "start", held_start)

    def should_stop() -> bool:
        if finished.is_set():
            asked.set()
            return True
        return False
    return should_stop


@pytest.mark.parametrize("algorithm", ["sgd", "sync_sgd"])
def test_a_stop_asked_after_the_last_step_leaves_the_run_completed(algorithm, tiny, tmp_path, monkeypatch):
    # a stop asked once every loop has run its plan out: the run completed (it read stopped:
    # the CLI's exit 1)
    import workbench as wb
    from workbench import checkpoint as ckpt
    out = tmp_path / "run"
    got = wb.run(tiny(algorithm=algorithm, cpus=2, steps=120, checkpoint_every=50, out=str(out)),
                 cluster="threads", progress=False, should_stop=_stop_once_every_loop_ran_out(monkeypatch))
    assert any(e["event"] == "stop_requested" for e in got.summary["events"])
    assert got.status == "completed" and got.summary["steps"] == 120
    assert [ckpt.read(f).step for f in ckpt.listed(out)] == [50, 100]
