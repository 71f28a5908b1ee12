"""Run results: the record formats, the step store, evaluation collection, run directories
and `RunResult`, one module each (`records`, `store`, `collect`, `rundir`, `result`); this
package hands on their public names.

A run produces flat records with fixed keys (dask-ml style history entries); the client
gathers them into a `RunResult`. Step records are the bulk (one per worker per step,
thousands a second at teaching sizes): a worker keeps them in NumPy columns and hands
them over whole when its loop ends, and streams only a compact, binned summary while it
runs (in blocks of steps fixed by the plan, `LIVE_ROWS` of them over a run; sums of samples and seconds are kept, so live
totals and rates are exact). The client expands those batches into the same record
dicts for `on_record`. A run directory is the unit everyone shares:

    summary.json   status, config, workers, totals, final metrics, time breakdown, events
    steps.csv      one row per worker step        (STEP_COLUMNS)
    evals.csv      one row per evaluation          (EVAL_COLUMNS)
    tournaments.csv  LTFB only: one row per trainer per round (TOURNAMENT_COLUMNS)
    config.yaml    the RunConfig, loadable with RunConfig.from_yaml
    report.html    static figures (written by workbench.ui.report when plotly is present)

Files are written atomically (temp file + rename) and hold no pickles.
"""
from ..util.fileio import RunDirError
from .collect import Collector, EvalTable
from .records import (
    EVAL_COLUMNS,
    EVENT_COLUMNS,
    LIVE_ROWS,
    LOG_FIELDS,
    ROW_FIELDS,
    RUN_FILES,
    STATUSES,
    STEP_COLUMNS,
    TOURNAMENT_COLUMNS,
    OnRecord,
    Record,
    RecordBatch,
    RunTally,
    StepLog,
    batch_columns,
    bin_steps,
    eval_record,
    event_record,
    live_columns,
    live_width,
    pack_rows,
    step_record,
    step_records,
    unpack_rows,
)
from .result import RunResult, build_result, step_totals, versions, workers_by_kind
from .rundir import (
    CHECKPOINTS,
    CLAIM,
    UncommittedRunError,
    claim_run_dir,
    claim_stage,
    final_dir,
    free_run_dir,
    reclaim_run_dir,
    release_claim,
    replace_run_dir,
    uncommitted_message,
)
from .store import MERGE_ROWS, SPOOL, STEP_TABLE, WRITE_ROWS, WRITE_S, StepStore, csv_rows, read_step_rows

__all__ = [
    "RunDirError", "EVAL_COLUMNS", "EVENT_COLUMNS", "LIVE_ROWS", "LOG_FIELDS", "ROW_FIELDS", "RUN_FILES",
    "STATUSES", "STEP_COLUMNS", "TOURNAMENT_COLUMNS", "OnRecord", "Record", "RecordBatch", "RunTally",
    "StepLog", "batch_columns", "bin_steps", "eval_record", "event_record", "live_columns", "live_width",
    "pack_rows", "step_record", "step_records", "unpack_rows", "MERGE_ROWS", "SPOOL", "STEP_TABLE",
    "WRITE_ROWS", "WRITE_S", "StepStore", "csv_rows", "read_step_rows", "Collector", "EvalTable",
    "CHECKPOINTS", "CLAIM", "UncommittedRunError", "claim_run_dir", "claim_stage", "final_dir",
    "free_run_dir", "reclaim_run_dir", "release_claim", "replace_run_dir", "uncommitted_message",
    "RunResult", "build_result", "step_totals", "versions", "workers_by_kind",
]
