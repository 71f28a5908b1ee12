"""`make demo` (python -m workbench.apps.demo): 1 worker then 2, the speed-up, the run directories."""
import json

import pytest

from workbench.apps.demo import demo_config, main


def test_demo_config_is_a_valid_parallel_run():
    cfg = demo_config(cpus=2)
    assert cfg.algorithm == "sync_sgd" and cfg.batch_size % 2 == 0


def test_the_demos_warm_up_run_is_labelled_and_draws_no_bar(monkeypatch, capsys):
    """An unlabelled bar "sync_sgd 2/2 steps" (the warm-up run) printed before "round 1"."""
    from workbench import api
    from workbench.apps import demo
    from workbench.execution import cluster
    calls = []

    class Measured(Exception):
        pass

    def measure(*args, **kwargs):
        raise Measured

    monkeypatch.setattr(cluster, "make_cluster", lambda **kw: "a client")
    monkeypatch.setattr(cluster, "close_client", lambda client: None)
    monkeypatch.setattr(api, "run", lambda config, **kw: calls.append((config, kw)))
    monkeypatch.setattr(demo, "compare_workers", measure)
    with pytest.raises(Measured):
        main(["--out", "unused"])
    (config, kw), = calls
    assert config.steps == 2 and kw["progress"] is False and kw["cluster"] == "a client"
    assert "warming both workers up (a 2-step run, not measured)" in capsys.readouterr().out


@pytest.mark.parametrize("cores", [1, 2])
def test_on_one_core_the_speedup_line_says_the_workers_shared_it(monkeypatch, capsys, tmp_path, cores):
    """Binder's one CPU: the 2 workers take turns on it, so the speed-up cannot pass 1x. Each
    run's notes said so, the headline (0.84x, "parallel efficiency 42%" on 1 core,
    2026-12-07) did not; on 2 cores nothing is added."""
    import pandas as pd

    from workbench import api
    from workbench.apps import demo
    from workbench.execution import cluster
    from workbench.util import machine
    row = {"samples_per_s": 8000.0, "samples_per_s_lo": 7600.0, "samples_per_s_hi": 9300.0, "rounds": 3,
           "spread": 0.1, "resolution_note": None, "speedup": 1.0}
    table = pd.DataFrame([{**row, "speedup_lo": float("nan"), "speedup_hi": float("nan")},
                          {**row, "samples_per_s": 6800.0, "speedup": 0.85, "speedup_lo": 0.73, "speedup_hi": 1.05}])
    monkeypatch.setattr(cluster, "make_cluster", lambda **kw: "a client")
    monkeypatch.setattr(cluster, "close_client", lambda client: None)
    monkeypatch.setattr(api, "run", lambda config, **kw: None)
    monkeypatch.setattr(demo, "compare_workers", lambda *a, **kw: (table, ["completed", "completed"]))
    monkeypatch.setattr(machine, "usable_cores", lambda: cores)
    assert main(["--out", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    headline = out[out.index("speed-up, 2 workers over 1: 0.85x"):]
    said = "note: this speed-up is the machine's, not sync_sgd's: 2 CPU workers on 1 core of this host"
    assert (said in headline) == (cores == 1), headline


@pytest.mark.slow
@pytest.mark.cluster
def test_demo_writes_both_runs_and_prints_the_speedup(tmp_path, capsys):
    import statistics
    # --max-rounds 3: no repeats beyond the 3 rounds (how many a point needs depends on the machine)
    assert main(["--out", str(tmp_path / "demo"), "--epochs", "0.3", "--rounds", "3", "--max-rounds", "3"]) == 0
    out = capsys.readouterr().out
    assert "speed-up, 2 workers over 1:" in out and "medians of interleaved rounds: 1 worker" in out
    assert out.count(" over 3 (") == 2
    two = json.loads((tmp_path / "demo" / "summary.json").read_text())
    one = json.loads((tmp_path / "demo" / "one-worker" / "summary.json").read_text())
    assert [w["rank"] for w in two["workers"]] == [0, 1] and len(one["workers"]) == 1
    assert (tmp_path / "demo" / "report.html").exists()
    dirs = [tmp_path / "demo"] + [tmp_path / "demo" / f"round-{k}" for k in (2, 3)]
    rate = {w: statistics.median_low(json.loads(((d / "one-worker") if w == 1 else d).joinpath("summary.json")
                                                .read_text())["samples_per_s"] for d in dirs) for w in (1, 2)}
    assert f"{rate[2] / rate[1]:.2f}x (" in out and "between the rounds' extremes" in out
    import pandas as pd
    table = pd.read_csv(tmp_path / "demo" / "speedup.csv")     # what the headline is of, kept beside the report
    assert table["workers"].tolist() == [1, 2] and table["rounds"].tolist() == [3, 3]
    assert f"{table['speedup'].iloc[1]:.2f}x" in out and "round 1's 2-worker run" in out
