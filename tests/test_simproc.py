"""A simulated dashboard run in a child process (`workbench.ui.simproc`): the same run as
in-process, its batches streamed back in order, Stop passed on, errors raised here."""
from __future__ import annotations

import pytest

import workbench as wb
from workbench.config import RunConfig
from workbench.results import RunTally
from workbench.ui import simproc

SMALL = RunConfig(algorithm="sync_sgd", dataset="digits", model="softmax", simulate=True, cpus=8, batch_size=64,
                  cpu_device="power8", steps=30, seed=0)


@pytest.mark.slow
def test_a_run_in_a_child_is_the_in_process_run_with_its_batches_streamed_back():
    batches = []
    child = simproc.run_in_process(SMALL, on_record=batches.append)
    here = wb.run(SMALL, progress=False)
    assert child.summary["status"] == here.summary["status"] == "completed"
    assert child.steps.equals(here.steps) and child.evals.equals(here.evals)   # the simulation is deterministic
    assert child.params.tobytes() == here.params.tobytes()
    assert child.summary["sim_wall_s"] > 0
    tally = RunTally()
    for batch in batches:               # what a live view drew: every step the run ran, before it ended
        tally.add(batch)
    assert batches and tally.steps_seen == child.summary["steps"] == 30


def test_stop_reaches_the_child_and_the_run_ends_stopped_with_its_steps(tmp_path):
    cfg = SMALL.replace(steps=None, epochs=1e5, out=str(tmp_path / "run"))   # millions of steps: only Stop ends it
    seen: list = []
    result = simproc.run_in_process(cfg, on_record=seen.append, should_stop=lambda: bool(seen))
    assert result.summary["status"] == "stopped"
    steps = result.summary["steps"]
    assert 0 < steps < result.summary["total_steps_planned"]
    assert len(result.steps) == steps * 8                     # every worker's every step came back
    saved = wb.load(tmp_path / "run")                         # ... and the child's run directory holds them
    assert saved.summary["status"] == "stopped" and len(saved.steps) == len(result.steps)


def test_an_error_in_the_child_is_raised_here(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not a run directory")
    with pytest.raises(Exception, match="taken"):
        simproc.run_in_process(SMALL.replace(out=str(taken)))


def test_a_real_run_is_refused():
    with pytest.raises(ValueError, match="simulate"):
        simproc.run_in_process(RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, steps=3))


def test_every_preloaded_module_exists():
    # the fork server skips a preload that fails to import, silently: a moved module would
    # leave every dashboard simulation starting cold
    import importlib.util

    for name in simproc.PRELOAD:
        assert importlib.util.find_spec(name) is not None, name
