"""Progress on long work: wb.run and wb.sweep draw a bar by default and none with
progress=False; the bar follows the records; bars never appear in child processes."""
from __future__ import annotations

import multiprocessing

import pytest

import workbench as wb
from workbench.execution.progress import RunProgress, bars_allowed, tee

QUICK = dict(algorithm="sgd", dataset="digits", eval_every=5)


def _child_allowed(q):
    q.put(bars_allowed())


def test_bars_only_in_the_top_level_process():
    assert bars_allowed()
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child_allowed, args=(q,))
    p.start()
    allowed = q.get(timeout=60)
    p.join(60)
    assert allowed is False


def _records(step, epoch, loss, acc=None):
    out = [{"kind": "step", "worker": 0, "step": step, "epoch": epoch, "loss": loss}]
    if acc is not None:
        out.append({"kind": "eval", "worker": "0", "step": step, "epoch": epoch, "test_accuracy": acc})
    return out


def test_bar_counts_epochs_and_shows_loss_and_accuracy():
    bar = RunProgress(wb.RunConfig(epochs=2.0))
    bar(_records(0, 0.25, 2.0))
    assert bar.bar.n == pytest.approx(0.25) and bar.bar.total == 2.0
    bar(_records(3, 1.0, 1.5, acc=0.5) + _records(2, 0.75, 1.6))   # out of order: the furthest counts
    assert bar.bar.n == pytest.approx(1.0)
    assert bar.postfix == {"loss": "1.6000", "acc": "0.500"}
    bar(_records(9, 2.5, 1.0))                                      # never past the total
    assert bar.bar.n == pytest.approx(2.0)
    bar.close("stopped")
    assert bar.postfix["status"] == "stopped"


def test_a_failed_runs_bar_ends_with_why(tiny, monkeypatch):
    """A notebook's `r = wb.run(...)` shows only the bar: a failed run said `status=failed` and
    nothing of why (the error was in `r.summary["errors"]`)."""
    from workbench.maths.models import MLP

    def broken(self, *args, **kwargs):
        raise RuntimeError("the model broke")
    closed = {}
    real = RunProgress.close

    def close(self, *args, **kwargs):
        real(self, *args, **kwargs)
        closed.update(self.postfix)
    monkeypatch.setattr(RunProgress, "close", close)
    monkeypatch.setattr("workbench.execution.progress.bars_allowed", lambda: True)
    monkeypatch.setattr("workbench.execution.preflight.check_model", lambda *a, **k: None)   # fail in the loop
    monkeypatch.setattr(MLP, "loss_and_grad", broken)
    r = wb.run(tiny(algorithm="sync_sgd", cpus=2, steps=20), cluster="threads")
    assert r.status == "failed"
    assert r.why.startswith("worker ") and r.why.endswith(": RuntimeError: the model broke (its traceback: "
                                                          "result.events)"), r.why
    assert closed["status"] == f"failed ({r.why})"
    assert repr(r).endswith(f"steps=0, why={r.why!r})")


def test_bar_counts_steps_when_the_config_sets_them():
    bar = RunProgress(wb.RunConfig(steps=40))
    bar(_records(9, 0.1, 1.0))
    assert (bar.bar.n, bar.bar.total, bar.bar.unit) == (10, 40, "step")
    bar.close()


def test_tee_calls_each_callback():
    seen = []
    fn = tee(seen.append, None, lambda r: seen.append(len(r)))
    fn([1, 2])
    assert seen == [[1, 2], 2]
    assert tee(None) is None


def test_run_draws_a_bar_by_default_and_none_when_asked(capfd):
    wb.run(wb.RunConfig(steps=20, **QUICK))
    err = capfd.readouterr().err
    assert "sgd:" in err and "20/20 steps" in err and "loss=" in err
    wb.run(wb.RunConfig(steps=20, **QUICK), progress=False)
    assert capfd.readouterr().err == ""


def test_run_bar_keeps_the_callers_callback():
    seen = []
    result = wb.run(wb.RunConfig(steps=10, **QUICK), on_record=seen.extend)
    assert len([r for r in seen if r["kind"] == "step"]) == len(result.steps) == 10


def test_sweep_draws_one_bar_over_the_runs(capfd):
    table = wb.sweep(wb.RunConfig(steps=10, **QUICK), workers=[1, 2], mode="weak")
    err = capfd.readouterr().err
    assert len(table) == 2
    runs = int(table.rounds.sum())      # 2 points x 3 interleaved rounds, more where a rate is not yet known to +-5%
    assert runs >= 6 and "weak sweep of sgd" in err and f"{runs}/{runs}" in err
    wb.sweep(wb.RunConfig(steps=10, **QUICK), workers=[1, 2], mode="weak", progress=False)
    assert capfd.readouterr().err == ""


@pytest.mark.slow
def test_an_executed_notebook_keeps_one_finished_bar_not_a_frozen_zero(tmp_path):
    """Under a kernel tqdm.auto draws a widget, which an executed notebook (papermill,
    nbclient: no widget frontend) saved as its text at creation, "0%| 0/3 steps", above a
    printed finished line. The bar's own output is now updated in place (its display id):
    the saved notebook holds one bar, finished, and no frozen 0%."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import workbench as wb\n"
                                          "r = wb.run(wb.RunConfig(algorithm='sgd', steps=3, dataset='digits'))")]
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    assert not [o for o in outputs if o.output_type == "error"], outputs
    texts = [o.get("data", {}).get("text/plain", "") or o.get("text", "") for o in outputs]
    bars = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(bars) == 1, outputs
    assert "100%" in bars[0]["data"]["text/plain"] and "3/3 steps" in bars[0]["data"]["text/plain"], bars
    assert not any(" 0%|" in t for t in texts), texts


def test_a_runs_bar_ends_on_the_summarys_samples_per_s(capfd, monkeypatch):
    # The live estimate is recomputed at most once a second, so on a short run it can be
    # the rate of the first batches; the bar's last word must be the number the summary,
    # the CLI line and the report give (one definition). A live estimate that is never the
    # summary's makes the difference visible.
    from workbench.measure import LiveSteady
    monkeypatch.setattr(LiveSteady, "rate", lambda self: 1.0)
    result = wb.run(wb.RunConfig(steps=30, **QUICK))
    last = capfd.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert f"samples/s={result.summary['samples_per_s']:,.0f}" in last, last
