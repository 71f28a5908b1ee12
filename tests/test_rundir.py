"""The run directory: save -> load gives back every file, column, dtype and summary key,
and saving what was loaded writes the same bytes."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench.results import EVAL_COLUMNS, STEP_COLUMNS, TOURNAMENT_COLUMNS, RunResult

# The summary keys the design promises (summary.json "has at least"), and the workers' keys.
SUMMARY_KEYS = {"status", "config", "workers", "steps", "samples", "wall_time_s", "samples_per_s",
                "final_train_loss", "final_test_loss", "final_test_accuracy", "time_breakdown",
                "comm_fraction", "events", "versions", "git_commit", "git_dirty"}
DTYPES = {
    "steps": {"worker": "int64", "step": "int64", "epoch": "float64", "time": "float64", "loss": "float64",
              "lr": "float64", "samples": "int64", "compute_s": "float64", "comm_s": "float64",
              "wait_s": "float64", "staleness": "float64", "bytes_sent": "float64"},
    "evals": {"step": "int64", "epoch": "float64", "time": "float64", "train_loss": "float64",
              "test_loss": "float64", "test_accuracy": "float64"},
    "tournaments": {"round": "int64", "step": "int64", "time": "float64", "trainer": "int64",
                    "own_score": "float64", "partner_score": "float64", "adopted": "bool", "lr": "float64"},
}
FILES = ("summary.json", "steps.csv", "evals.csv", "tournaments.csv", "config.yaml", "params.npy")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """An LTFB run (it writes every file a run directory can hold), saved by wb.run."""
    out = tmp_path_factory.mktemp("rundir") / "run"
    cfg = wb.RunConfig(algorithm="ltfb", cpus=2, trainers=2, round_size=5, tournament_size=64, dataset="digits",
                       batch_size=32, steps=20, eval_every=10, seed=0, out=str(out))
    return wb.run(cfg, cluster="threads", progress=False), out


def _strict_json(text: str):
    def refuse(name):
        raise ValueError(f"summary.json holds {name}")
    return json.loads(text, parse_constant=refuse)


def test_every_file_is_written_and_nothing_else(saved):
    result, out = saved
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, "report.html"])   # no temp files left
    assert all((out / f).stat().st_size > 0 for f in FILES)


def test_wb_save_writes_the_report_and_result_save_does_not(saved, tmp_path):
    """docs/usage.md: `wb.save(result, DIR)` writes report.html, `result.save(DIR)` the records
    only (`wb.save` was not importable from `workbench` though the docs named it)."""
    result, _ = saved
    assert "save" in wb.__all__
    with_report, records = wb.save(result, tmp_path / "a"), result.save(tmp_path / "b")
    assert (with_report / "report.html").is_file() and not (records / "report.html").exists()


def test_tables_come_back_with_their_columns_dtypes_and_values(saved):
    result, out = saved
    loaded = wb.load(out)
    for name, columns in (("steps", STEP_COLUMNS), ("evals", EVAL_COLUMNS), ("tournaments", TOURNAMENT_COLUMNS)):
        mine, back = getattr(result, name), getattr(loaded, name)
        assert len(back) > 0, name
        assert list(back.columns) == list(columns[1:]), name
        assert {c: str(back[c].dtype) for c in DTYPES[name]} == DTYPES[name], name
        pd.testing.assert_frame_equal(back, mine, check_dtype=False, check_exact=True)   # floats exact through CSV
    assert loaded.evals["worker"].tolist() == result.evals["worker"].astype(str).tolist()     # "trainer-0", ...
    assert set(loaded.evals["worker"]) == {"trainer-0", "trainer-1"}
    assert loaded.tournaments["lineage"].str.startswith("t").all()


def test_the_summary_comes_back_whole_and_as_strict_json(saved):
    result, out = saved
    on_disk = _strict_json((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(on_disk)
    assert on_disk == json.loads(json.dumps(result.summary, default=str))
    assert wb.load(out).summary == on_disk
    assert set(on_disk["time_breakdown"]) == {"compute_s", "comm_s", "wait_s"}
    assert [w["kind"] for w in on_disk["workers"]] == ["cpu", "cpu"]
    assert on_disk["status"] == "completed" and on_disk["steps"] == 20
    assert on_disk["samples"] == result.steps["samples"].sum() == 20 * 32


def test_config_yaml_loads_back_into_the_same_config(saved):
    result, out = saved
    again = wb.RunConfig.from_yaml(out / "config.yaml")
    assert again == wb.RunConfig.from_dict(result.summary["config"])
    assert again.algorithm == "ltfb" and again.trainers == 2 and again.out == str(out)


def test_saving_what_was_loaded_writes_the_same_bytes(saved, tmp_path):
    _, out = saved
    copy = wb.load(out).save(tmp_path / "copy")
    for name in FILES:
        assert (copy / name).read_bytes() == (out / name).read_bytes(), name


def test_non_finite_numbers_are_saved_as_null_and_a_run_without_tournaments_writes_no_tournaments_file(tmp_path):
    steps = pd.DataFrame({c: [0] for c in STEP_COLUMNS[1:]}).astype(float)
    result = RunResult(summary={"status": "diverged", "config": {}, "workers": [], "final_train_loss": math.nan,
                                "samples_per_s": np.float32(np.inf), "per_worker": [{"share": np.float64(1.0)}]},
                       steps=steps, evals=pd.DataFrame(columns=list(EVAL_COLUMNS[1:])))
    path = result.save(tmp_path / "run")
    on_disk = _strict_json((path / "summary.json").read_text())
    assert on_disk["final_train_loss"] is None and on_disk["samples_per_s"] is None
    assert on_disk["per_worker"] == [{"share": 1.0}]
    assert not (path / "tournaments.csv").exists()
    assert len(RunResult.load(path).tournaments) == 0


# ------------------------------------------------------------------ one rule for run, sweep and grid --out
def test_sweep_and_grid_refuse_earlier_results_and_overwrite_keeps_no_stale_ones(tmp_path):
    from workbench.config import ConfigError
    sim = wb.RunConfig(algorithm="sync_sgd", dataset="digits", simulate=True, batch_size=32, steps=3, seed=0)
    sw = tmp_path / "sw"
    wb.sweep(sim, workers=[1, 2], simulate=True, out=sw, progress=False)
    with pytest.raises(ConfigError, match="does not hold a sweep already"):       # no silent replacing
        wb.sweep(sim, workers=[1, 4], simulate=True, out=sw, progress=False)
    assert sorted(p.name for p in sw.iterdir()) == ["sweep.csv", "w1", "w2"]
    wb.sweep(sim, workers=[1, 4], simulate=True, out=sw, progress=False, overwrite=True)
    assert sorted(p.name for p in sw.iterdir()) == ["sweep.csv", "w1", "w4"]     # no stale w2 beside w4
    assert list(pd.read_csv(sw / "sweep.csv")["workers"]) == [1, 4]
    with pytest.raises(ConfigError, match="holds a run's, summary.json"):         # a run's directory is no sweep's
        wb.sweep(sim, workers=[1, 2], simulate=True, out=sw / "w1", progress=False, overwrite=True)
    assert not (sw / "w1" / "sweep.csv").exists()

    sgd = wb.RunConfig(algorithm="sgd", dataset="digits", batch_size=32, steps=2, seed=0)
    g = tmp_path / "g"
    wb.grid(sgd, {"lr": [0.1, 0.2]}, cluster="threads", out=g, progress=False)
    with pytest.raises(ConfigError, match="does not hold a grid already"):
        wb.grid(sgd, {"lr": [0.1, 0.3]}, cluster="threads", out=g, progress=False)
    wb.grid(sgd, {"lr": [0.1, 0.3]}, cluster="threads", out=g, progress=False, overwrite=True)
    assert sorted(p.name for p in g.iterdir()) == ["grid.csv", "grid_runs.csv", "lr0.1-s0", "lr0.3-s0"]
    with pytest.raises(ConfigError, match="holds a sweep's, sweep.csv"):
        wb.grid(sgd, {"lr": [0.1]}, cluster="threads", out=sw, progress=False, overwrite=True)
    with pytest.raises(ConfigError, match="holds a grid's"):                      # run's --out: the same rule
        wb.run(sgd.replace(out=str(g)), cluster="threads", progress=False, overwrite=True)


def test_a_stopped_overwrite_keeps_the_runs_it_did_not_reach_and_a_folder_of_runs_needs_overwrite(tmp_path):
    """A sweep with --overwrite stopped during its first point deleted the earlier sweep's w2
    and w4, which it never reached; a sweep into a folder holding a run directory w2 (no
    sweep.csv) replaced it without --overwrite."""
    from workbench.config import ConfigError
    sim = wb.RunConfig(algorithm="sync_sgd", dataset="digits", simulate=True, batch_size=32, steps=3, seed=0)
    sw = tmp_path / "sw"
    wb.sweep(sim, workers=[1, 2, 4], simulate=True, out=sw, progress=False)
    asked = {"n": 0}

    def stop_soon():
        asked["n"] += 1
        return asked["n"] > 3
    wb.sweep(sim.replace(steps=400), workers=[1, 2, 4], simulate=True, out=sw, progress=False, overwrite=True,
             should_stop=stop_soon)
    assert {"w2", "w4"} <= {p.name for p in sw.iterdir()}

    sgd = wb.RunConfig(algorithm="sgd", dataset="digits", batch_size=32, steps=2, seed=0)
    g = tmp_path / "g"
    wb.grid(sgd, {"lr": [0.1, 0.2]}, cluster="threads", out=g, progress=False)
    wb.grid(sgd, {"lr": [0.1, 0.2]}, cluster="threads", out=g, progress=False, overwrite=True, should_stop=lambda: True)
    assert {"lr0.1-s0", "lr0.2-s0"} <= {p.name for p in g.iterdir()}

    mixed = tmp_path / "mixed"
    wb.run(sim.replace(cpus=2, out=str(mixed / "w2")), progress=False)
    with pytest.raises(ConfigError, match=r"a directory without runs in it \(it holds w2: pass --overwrite"):
        wb.sweep(sim, workers=[1, 2], simulate=True, out=mixed, progress=False)
