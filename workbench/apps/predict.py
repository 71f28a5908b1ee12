"""A saved run's model used on new data, from the shell: `predict` answers each row of a CSV
(`wb.predict`), `generate` writes text with a language model (`wb.generate`).

`predict RUN_DIR ROWS.csv` reads the rows as a run's CSV is read (the separator found, a
written row index dropped). A run trained on a CSV takes its feature columns by name (in any
order, other columns ignored); a run trained on arrays takes every column but a label column.
The answer is the table with a `predicted` column added, written with the rows' own separator
(a `;`-separated file's answers are `;`-separated, so a spreadsheet opens them as it opened the
rows); where the rows carry the label column too, how often the two agree is said beside it. Rows as arrays (images, say): a `.npy`
of rows, or a `.npz` holding `X` (and `y`, compared as a label column is), answered as a table
of `row`, `predicted` (and `label`), with commas.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..api import load, predict


class Answers(NamedTuple):
    """What `predict_rows` answers: the table, the agreement with the rows' label column in
    words (None without one), and the separator to write the table with (the rows' own)."""
    table: Any
    agreement: str | None
    sep: str = ","


def predict_rows(run_dir: str | Path, rows_path: str | Path, params: str = "final") -> Answers:
    """The rows with a `predicted` column, the agreement with their label column and the
    rows' separator (`Answers`), by the run's final parameters or its best (`params`). The
    rows are read as `wb.predict` reads a path (`trained.feature_rows`)."""
    import pandas as pd

    from ..trained import feature_rows
    result = load(run_dir)
    rows = feature_rows(result, str(rows_path))
    said = predict(result, rows.matrix, params=params)
    if rows.frame is None:     # arrays: a table of row, predicted (and label)
        out = pd.DataFrame({"row": np.arange(len(said)), "predicted": said})
        if rows.labels is None:
            return Answers(out, None)
        classes = ((result.summary.get("data") or {}).get("table") or {}).get("classes")
        truth = np.asarray(rows.labels).reshape(-1)
        out["label"] = np.asarray(classes, dtype=object)[truth.astype(np.int64)] if classes else truth
        return Answers(out, _agreement(out["label"].to_numpy(), said, "its y"))
    out = rows.frame.copy()
    out["predicted"] = said
    if rows.label is None:
        return Answers(out, None, rows.sep)
    return Answers(out, _agreement(rows.labels, said, f"its {rows.label!r} column"), rows.sep)


def _agreement(truth: Any, said: Any, what: str) -> str:
    """How often the answers equal the rows' own labels, in words (compared as text: names
    or numbers alike), with the 95% interval of that share where the rows are few enough that
    it is wider than +-0.01 (`learning.accuracy_interval_text`, as the run's own line says it).

    >>> _agreement([1, 2, 3, 4], [1, 2, 3, 0], "its y")
    'the predictions agree with its y on 3 of 4 rows (0.75; 95%: 0.30-0.95 from 4 rows)'
    """
    from ..learning import accuracy_interval_text
    agree = int(np.sum(np.asarray(truth).astype(str) == np.asarray(said).astype(str)))
    sure = accuracy_interval_text(agree / len(said), len(said))
    return (f"the predictions agree with {what} on {agree} of {len(said)} rows ({agree / len(said):.2f}"
            + (f"; {sure})" if sure else ")"))


def allowed_text(result: Any, text: str) -> str | None:
    """For a run on `markov_text`, how many of a text's transitions the language allows
    (`data.text.allowed_note`); None for any other run."""
    if (result.summary.get("config") or {}).get("dataset") != "markov_text":
        return None
    from ..data.text import allowed_note
    return allowed_note(text)
