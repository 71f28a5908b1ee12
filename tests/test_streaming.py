"""The step log streams to the run directory while the run goes (issue 29 item 5):
steps.csv is the file the old path wrote at the end (same columns, order and digits),
the summary's numbers are the ones the whole table gives, and a stop mid-run leaves a
committed directory with every step the workers recorded."""
from __future__ import annotations

import gc
import os
import pickle
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import workbench as wb
import workbench.results as results
from workbench import measure
from workbench.config import RunConfig
from workbench.execution.engine import run_threads
from workbench.results import ROW_FIELDS, STEP_COLUMNS, STEP_TABLE, StepStore

QUICK = dict(dataset="digits", model="softmax", batch_size=32, seed=1, eval_every=20)


class _Spy:
    """Every chunk of rows the collector's store receives, as it receives them."""

    def __init__(self, monkeypatch):
        self.chunks: list[tuple[int, dict[str, np.ndarray]]] = []
        real = StepStore.add

        def add(store, worker, columns):
            self.chunks.append((int(worker), {k: np.array(columns[k], dtype=float) for k in ROW_FIELDS}))
            real(store, worker, columns)
        monkeypatch.setattr(StepStore, "add", add)

    def old_csv(self) -> str:
        """steps.csv as the old path wrote it: each worker's rows whole, one table sorted by
        (step, worker, time) with a stable sort, written at the end by pandas."""
        per: dict[int, list[dict]] = {}
        for worker, cols in self.chunks:
            per.setdefault(worker, []).append(cols)
        names = list(STEP_COLUMNS[1:])
        frames = []
        for worker, parts in sorted(per.items()):
            cols = {k: np.concatenate([p[k] for p in parts]) for k in ROW_FIELDS}
            n = len(cols["step"])
            frames.append(pd.DataFrame({"worker": np.full(n, worker, dtype=np.int64),
                                        **{c: cols[c] for c in names if c != "worker"}}, columns=names))
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=names)
        df = df.astype({"worker": "int64", "step": "int64", "samples": "int64"})
        df = df.sort_values(["step", "worker", "time"], kind="stable").reset_index(drop=True)
        return df.to_csv(index=False)


CASES = {
    "threads sync_sgd": (dict(algorithm="sync_sgd", cpus=2, steps=120), "threads"),
    "threads async_sgd": (dict(algorithm="async_sgd", cpus=2, steps=120), "threads"),
    "threads easgd": (dict(algorithm="easgd", cpus=3, steps=90), "threads"),
    "simulated sync_sgd": (dict(algorithm="sync_sgd", cpus=8, steps=60, simulate=True), None),
    "simulated async_sgd": (dict(algorithm="async_sgd", cpus=4, steps=80, simulate=True), None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_streamed_steps_csv_is_the_file_the_old_path_wrote(case, tmp_path, monkeypatch, no_dask):
    fields, cluster = CASES[case]
    spy = _Spy(monkeypatch)
    out = tmp_path / "run"
    result = wb.run(RunConfig(**QUICK, **fields, out=str(out)), cluster=cluster, progress=False)
    assert result.status == "completed"
    text = (out / "steps.csv").read_text()
    assert text.splitlines()[0] == ",".join(STEP_TABLE)
    assert text == spy.old_csv()                                 # byte for byte
    assert not (out / results.SPOOL).exists()                    # the spool is gone once the run is saved
    steps = wb.load(out).steps
    # The summary's numbers are the whole table's (sums taken in pieces: 1e-12 relative).
    whole = measure.steady(steps).to_dict()
    for key, value in result.summary["steady"].items():
        if isinstance(value, float):
            assert value == pytest.approx(whole[key], rel=1e-12, abs=1e-15), key
        else:
            assert value == whole[key], key
    assert result.summary["samples"] == int(steps["samples"].sum())
    assert result.summary["time_breakdown"]["compute_s"] == pytest.approx(steps["compute_s"].sum(), rel=1e-12)
    assert result.summary["steps"] == int(steps["step"].max()) + 1
    assert result.summary["train_time_s"] == pytest.approx(measure.train_time(steps), rel=1e-12)
    pd.testing.assert_frame_equal(result.steps, steps)       # read back from the spool: the same numbers


def test_a_simulated_run_streams_the_file_it_keeps_in_memory_without_a_directory(tmp_path, no_dask):
    cfg = RunConfig(**QUICK, algorithm="easgd", cpus=4, steps=60, simulate=True)
    in_memory = wb.run(cfg, progress=False)
    streamed = wb.run(cfg.replace(out=str(tmp_path / "run")), progress=False)
    assert (tmp_path / "run" / "steps.csv").read_text() == in_memory.steps.to_csv(index=False)
    assert streamed.summary["steady"] == in_memory.summary["steady"]


def test_a_stop_mid_run_leaves_a_committed_directory_with_every_recorded_step(tmp_path, monkeypatch):
    """Stopped on the first live records of a plan far longer than any reaction (event-driven)."""
    spy = _Spy(monkeypatch)
    out = tmp_path / "run"
    seen = []
    cfg = RunConfig(**{**QUICK, "eval_every": 10**9}, algorithm="sync_sgd", cpus=2, epochs=100_000, out=str(out))
    result = wb.run(cfg, cluster="threads", progress=False, on_record=seen.extend,
                    should_stop=lambda: any(r.get("kind") == "step" for r in seen))
    assert result.status == "stopped"
    loaded = wb.load(out)                                       # committed: summary.json is there
    assert loaded.summary["status"] == "stopped" and not (out / results.CLAIM).exists()
    recorded = sum(len(cols["step"]) for _, cols in spy.chunks)
    assert 0 < len(loaded.steps) == recorded < cfg.epochs      # every step a worker recorded, none twice
    for w in (0, 1):
        assert loaded.steps[loaded.steps.worker == w]["step"].tolist() == list(range(len(loaded.steps) // 2))
    assert (out / "steps.csv").read_text() == spy.old_csv()


def test_a_write_cut_short_by_a_signal_leaves_no_half_chunk(tmp_path, monkeypatch):
    """A KeyboardInterrupt (the CLI's SIGINT/SIGTERM) in the middle of appending a chunk:
    the files are rolled back to the chunk's start, and the chunk is written at close."""
    store = StepStore(tmp_path, size=1)
    cols = lambda lo, hi: {**{f: np.full(hi - lo, 0.5) for f in ROW_FIELDS},    # noqa: E731
                           "step": np.arange(lo, hi, dtype=float)}
    store.add(0, cols(0, 5))
    store.write(force=True)
    before = (tmp_path / "steps.csv").read_text()
    real = np.ascontiguousarray
    calls = []

    def interrupted(a):
        calls.append(1)
        if len(calls) == 3:      # after the CSV text and two spool columns
            raise KeyboardInterrupt("SIGTERM")
        return real(a)
    monkeypatch.setattr(np, "ascontiguousarray", interrupted)
    store.add(0, cols(5, 9))
    with pytest.raises(KeyboardInterrupt):
        store.write(force=True)
    monkeypatch.setattr(np, "ascontiguousarray", real)
    assert (tmp_path / "steps.csv").read_text() == before      # no half chunk on disk
    store.complete(0)
    store.close()
    steps = pd.read_csv(tmp_path / "steps.csv")
    assert steps["step"].tolist() == list(range(9))             # the interrupted chunk, once
    assert store.frame()["step"].tolist() == list(range(9))     # and the spool agrees


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_the_steady_state_in_pieces_is_the_whole_tables(chunk):
    """`measure.steady_chunks` against `measure.steady` on one table: asynchronous workers
    of different speeds (one lost early), and a run too short for a steady state."""
    rng = np.random.default_rng(4)
    frames = []
    for w, (n, dt) in enumerate([(300, 1e-3), (170, 1.7e-3), (9, 2e-3)]):
        compute = rng.uniform(0.5, 1.0, n) * dt
        wait = rng.uniform(0.0, 0.3, n) * dt
        frames.append(pd.DataFrame({"worker": w, "step": np.arange(n), "time": 0.2 + np.cumsum(compute + wait),
                                    "samples": rng.integers(8, 33, n), "compute_s": compute, "comm_s": 1e-5,
                                    "wait_s": wait}))
    df = pd.concat(frames).sort_values(["step", "worker"]).reset_index(drop=True)
    for table in (df, df[df.step < 6]):
        parts = lambda t=table: ({k: t[k].to_numpy(dtype=float)[i:i + chunk] for k in t}   # noqa: E731
                                 for i in range(0, len(t), chunk))
        got, want = measure.steady_chunks(parts).to_dict(), measure.steady(table).to_dict()
        assert got["reached"] == want["reached"] and got["steps"] == want["steps"]
        for key in ("start_s", "end_s", "samples", "samples_per_s", "compute_share", "comm_share", "wait_share"):
            assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), key


def test_threads_run_without_a_directory_spools_its_steps_privately(no_dask):
    result = run_threads(RunConfig(**QUICK, algorithm="sync_sgd", cpus=2, steps=30))
    store = result.store
    assert store is not None and not store.streaming and store.spool is not None
    assert store.rows_on_disk == 60 and not store.memory          # on disk, not held in memory
    assert result.steps["step"].tolist() == sorted(list(range(30)) * 2)


def _fill(store: StepStore, rng: np.random.Generator, lo: int, hi: int, lag: int = 0) -> None:
    """Steps lo..hi-1 of three workers as chunks of random size, random numbers; worker w
    stops `lag` * w steps short of hi (and starts as far short of lo)."""
    for w in range(3):
        k, end = lo - lag * w if lo else 0, hi - lag * w
        while k < end:
            n = min(int(rng.integers(1, 9)), end - k)
            cols = {f: rng.normal(size=n) for f in ROW_FIELDS}
            cols["step"] = np.arange(k, k + n, dtype=float)
            store.add(w, cols)
            k += n


def test_a_store_without_a_directory_holds_exactly_the_rows_a_run_directory_gets(tmp_path):
    """The private spool against a run directory's store fed the same chunks: the same
    frame mid-run (rows held for the merge in their place) and at the end, bit for bit."""
    import os
    import stat
    private, disk = StepStore(size=3), StepStore(tmp_path, size=3)
    for store in (private, disk):
        rng = np.random.default_rng(7)
        _fill(store, rng, 0, 40, lag=4)
        store.write(force=True)
    assert private.rows_on_disk > 0 and private.held > 0        # part written, part held
    pd.testing.assert_frame_equal(private.frame(), disk.frame(), check_exact=True)
    folder = private.spool
    assert folder.parent == Path(tempfile.gettempdir()) and stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for store in (private, disk):
        _fill(store, np.random.default_rng(8), 40, 90, lag=4)
        for w in range(3):
            store.complete(w)
        store.close()
    pd.testing.assert_frame_equal(private.frame(), disk.frame(), check_exact=True)
    pd.testing.assert_frame_equal(private.frame(), pd.read_csv(tmp_path / "steps.csv"), check_exact=False, rtol=1e-15)
    assert not (tmp_path / results.SPOOL).samefile(folder)
    copy = pickle.loads(pickle.dumps(private))                  # rows travel in memory, not as a path
    assert copy.spool is None and copy.rows_on_disk == 0
    pd.testing.assert_frame_equal(copy.frame(), disk.frame(), check_exact=True)
    del private
    gc.collect()
    assert not folder.exists()                                  # given back with the store
    assert copy.frame().shape == disk.frame().shape


def test_a_store_whose_spool_cannot_be_made_keeps_its_rows_in_memory(monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(results.store.tempfile, "mkdtemp", full)
    store, reference = StepStore(size=3), StepStore(size=3)
    _fill(store, np.random.default_rng(3), 0, 30)
    store.write(force=True)                                     # the first write: its spool fails
    monkeypatch.undo()
    _fill(reference, np.random.default_rng(3), 0, 30)
    for s in (store, reference):
        for w in range(3):
            s.complete(w)
        s.close()
    assert store.error is not None and store.rows_on_disk == 0 and store.spool is None
    pd.testing.assert_frame_equal(store.frame(), reference.frame(), check_exact=True)


FLAT_RUN = """
import json, os, sys
import workbench as wb
import workbench.results as results
from workbench.config import RunConfig

def rss_mb():   # Linux, where the suite runs
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

samples, tally = [], results.RunTally()
def watch(batch):
    tally.add(batch)
    samples.append((tally.steps_seen, rss_mb()))
steps = int(sys.argv[1])
config = RunConfig(**json.loads(sys.argv[2]), algorithm="sgd", steps=steps)
result = wb.run(config, cluster="threads", progress=False, on_record=watch)
print(json.dumps({"status": result.status, "on_disk": result.store.rows_on_disk, "samples": samples}))
"""


@pytest.mark.slow
def test_a_long_run_without_a_directory_keeps_its_memory_flat():
    """RSS over a long out=None run: the old in-memory store grew ~120 bytes a step
    (79.5 -> 114 MB over 286k steps); the private spool keeps the rows on disk. Measured
    as the growth between a quarter of the run and its end, against a budget of a third
    of what the old store needed for those steps, in a process of its own: the suite's
    worker process carries hundreds of MB of earlier tests' heap, whose allocator moved by
    4.3 MB over such a run once on a busy machine (alone, 0.8 MB)."""
    import json
    import subprocess
    import sys
    steps = 150_000
    config = {**QUICK, "eval_every": 10**9, "batch_size": 8}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", FLAT_RUN, str(steps), json.dumps(config)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["status"] == "completed" and got["on_disk"] == steps
    quarter = next(mb for k, mb in got["samples"] if k >= steps // 4)
    end = got["samples"][-1][1]
    old_growth = 120 * (steps - steps // 4) / 2**20             # ~13 MB for the last three quarters
    print(f"RSS {quarter:.1f} MB at a quarter, {end:.1f} MB at the end; the old store would add ~{old_growth:.0f} MB")
    assert end - quarter < old_growth / 3


def test_on_record_receives_column_batches_with_a_dict_view(no_dask):
    """Issue 23 item 2: the live stream stays columnar from the workers to the consumers;
    `.records()` (and iterating) gives the dicts, and every accumulator reads both alike."""
    from workbench.results import RecordBatch, RunTally
    from workbench.ui import figdata as FD

    batches = []
    wb.run(RunConfig(**QUICK, algorithm="sync_sgd", cpus=2, steps=40), cluster="threads", progress=False,
           on_record=batches.append)
    assert batches and all(isinstance(b, RecordBatch) for b in batches)
    with_steps = [b for b in batches if b.n_steps]
    assert with_steps and any(b.others for b in batches)               # evaluations and events ride along
    b = with_steps[0]
    assert list(b.steps) == list(STEP_COLUMNS[1:]) and all(isinstance(v, np.ndarray) for v in b.steps.values())
    recs = b.records()
    assert len(recs) == len(b) and list(recs[0]) == list(STEP_COLUMNS)
    assert [r["loss"] for r in recs if r["kind"] == "step"] == b.steps["loss"].tolist()
    assert list(b) == recs
    tallies = RunTally(), RunTally()
    states = FD.LiveState(label="run", color="#000"), FD.LiveState(label="run", color="#000")
    for batch in batches:
        tallies[0].add(batch)
        tallies[1].add(batch.records())
        by_columns, by_dicts = FD.live_series(batch, states[0]), FD.live_series(batch.records(), states[1])
        assert by_columns.keys() == by_dicts.keys()
        for key in by_columns:
            assert len(by_columns[key]) == len(by_dicts[key]), key
            for s1, s2 in zip(by_columns[key], by_dicts[key]):
                assert s1.name == s2.name
                np.testing.assert_array_equal(np.asarray(s1.x), np.asarray(s2.x))
                np.testing.assert_array_equal(np.asarray(s1.y), np.asarray(s2.y))
    fields = ("steps_seen", "epoch", "samples", "first_start", "last_time", "loss", "test_accuracy", "_newest")
    assert [getattr(tallies[0], f) for f in fields] == [getattr(tallies[1], f) for f in fields]
    assert tallies[0].rates() == tallies[1].rates()
    assert tallies[0].steps_seen == 40


@pytest.mark.slow
@pytest.mark.cluster
def test_a_dask_runs_streamed_steps_csv_is_the_file_the_old_path_wrote(client, tmp_path, monkeypatch):
    """Rows packed as bytes through Worker.log_event, merged on the client: the same file."""
    spy = _Spy(monkeypatch)
    out = tmp_path / "run"
    result = wb.run(RunConfig(**QUICK, algorithm="sync_sgd", cpus=2, steps=80, out=str(out)), cluster=client,
                    progress=False)
    assert result.status == "completed"
    assert (out / "steps.csv").read_text() == spy.old_csv()
    assert len(wb.load(out).steps) == 160


def test_a_streamed_result_pickles_and_reads_its_steps_back(tmp_path, no_dask):
    import pickle
    result = wb.run(RunConfig(**QUICK, algorithm="sync_sgd", cpus=2, steps=20, out=str(tmp_path / "run")),
                    cluster="threads", progress=False)
    result.forget_steps()
    copy = pickle.loads(pickle.dumps(result))
    # (both parse steps.csv; the tolerance covers a parser that rounds a last digit differently)
    pd.testing.assert_frame_equal(copy.steps, wb.load(tmp_path / "run").steps, check_exact=False, rtol=1e-14)


def test_csv_rows_writes_the_text_pandas_writes():
    """steps.csv's formatter against pandas' to_csv (the oracle it replaced): random floats and
    the values whose text differs between formatters (NaN as an empty field, infinities, -0.0,
    subnormals, the switch to exponent notation at 1e16 and 1e-4), the integer columns as
    integers, and an empty chunk."""
    rng = np.random.default_rng(3)
    edge = [0.0, -0.0, 1e-7, 1e-4, 9.999e-5, 1e15, 1e16, 9.999999999999999e15, 1e22, 123456789012.0,
            np.nan, np.inf, -np.inf, 5e-324, 0.1, 1 / 3, -2.5e-5]
    n = 4 * len(edge)
    rows = rng.normal(scale=1e3, size=(n, len(STEP_TABLE))) * 10.0 ** rng.integers(-12, 12, size=(n, 1))
    for j, name in enumerate(STEP_TABLE):
        if name in results.store._INT_COLUMNS:
            rows[:, j] = rng.integers(-5, 1 << 40, size=n)
        else:
            rows[: len(edge), j] = np.roll(edge, j)
    ref = results.store._frame(rows).to_csv(index=False, header=False)
    assert results.csv_rows(rows) == ref
    assert ",," in ref and "inf" in ref                  # the edge values were in the chunk
    assert results.csv_rows(rows[:0]) == ""
    assert results.csv_rows(rows[::-3]) == results.store._frame(rows[::-3]).to_csv(index=False, header=False)


def test_a_worker_puts_its_rows_in_its_ring_and_gives_the_ring_up_when_they_do_not_fit(no_dask):
    """One host's ring (`comm.rowring`): rows go into it and no batch leaves for them; rows
    that do not fit give it up for the rest of the run, and from then on go with the
    batches: the ring's rows, read first, and the batches' follow each other in step order."""
    import secrets

    from workbench.comm.rowring import RowRing
    from workbench.comm.shm import unlink_segment
    from workbench.execution.context import build_context
    from workbench.results.records import unpack_rows

    sent: list[dict] = []
    ctx = build_context(RunConfig(**QUICK, algorithm="sync_sgd", steps=20), 0, 1, "cpu", emit=sent.append)
    ring = RowRing.create(f"wbt{secrets.token_hex(5)}", capacity=4, fields=len(ROW_FIELDS))
    try:
        ctx.rows_out = RowRing(ring.name)
        ctx.start()
        sent.clear()

        def log(steps):
            for s in steps:
                ctx.steps.add(s, 0.01 * s, 1.0, 0.1, 32, 0.001, 0.0, 0.0, 0.0, 0.0)
        log(range(0, 3))
        ctx.flush()
        assert sent == [] and ring.room() == 1                       # into the ring; no batch
        log(range(3, 6))
        ctx.flush()                                                  # 3 rows, room for 1: the ring is given up
        assert ctx.rows_out is None and ring.room() == 1
        log(range(6, 8))
        ctx.flush()
        got = ring.take()
        order = list(got[:, 0]) + [s for b in sent for s in unpack_rows(b["rows"])["step"]]
        assert order == list(range(8))
        assert np.allclose(got[:, ROW_FIELDS.index("epoch")], ctx.plan.epoch(np.arange(3) + 1))
    finally:
        ring.close()
        unlink_segment(ring.name)


@pytest.mark.cluster
@pytest.mark.parametrize("capacity", [None, 4])
def test_a_dask_run_on_the_clients_host_sends_its_rows_through_rings(client, tmp_path, monkeypatch, capacity):
    """The client shares the workers' host: every step row comes through the rings (none in
    a live batch); with rings too small for one live batch's rows, every worker gives its
    ring up and the rows come with the batches: the same complete steps.csv either way."""
    import workbench.comm.rowring as rowring
    from workbench.execution.transports.dask import DaskTransport
    if capacity is not None:
        monkeypatch.setattr(rowring, "CAPACITY", capacity)
    through = {"ring": 0, "rings": 0}
    live_rows = DaskTransport.live_rows

    def counted(self):
        got = live_rows(self)
        through["rings"] = max(through["rings"], len(self.rings))
        through["ring"] += sum(int(r["n"]) for r in got.values())
        return got
    monkeypatch.setattr(DaskTransport, "live_rows", counted)
    out = tmp_path / "run"
    result = wb.run(RunConfig(**QUICK, algorithm="sync_sgd", cpus=2, steps=300, out=str(out)), cluster=client,
                    progress=False)
    assert result.status == "completed"
    steps = wb.load(out).steps
    assert len(steps) == 600 and through["rings"] == 2
    for _, rows in steps.groupby("worker"):
        assert rows["step"].tolist() == list(range(300))
    if capacity is None:
        assert through["ring"] == 600
    else:
        assert through["ring"] < 600
