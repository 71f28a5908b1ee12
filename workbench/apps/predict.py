"""A saved run's model used on new data, from the shell: `predict` answers each row of a CSV
(`wb.predict`), `generate` writes text with a language model (`wb.generate`).

`predict RUN_DIR ROWS.csv` reads the rows as a run's CSV is read (the separator found, a
written row index dropped). A run trained on a CSV takes its feature columns by name (in any
order, other columns ignored); a run trained on arrays takes every column but a label column.
The answer is the table with a `predicted` column added; where the rows carry the label
column too, how often the two agree is said beside it. Rows as arrays (images, say): a `.npy`
of rows, or a `.npz` holding `X` (and `y`, compared as a label column is), answered as a table
of `row`, `predicted` (and `label`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..api import load, predict
from ..config import ConfigError


def predict_rows(run_dir: str | Path, rows_path: str | Path, params: str = "final") -> tuple[Any, str | None]:
    """(the rows with a `predicted` column, the agreement with their label column in words
    or None without one), by the run's final parameters or its best (`params`)."""
    from ..data.files import LABEL_COLUMNS, feature_matrix, read_rows
    result = load(run_dir)
    path = str(rows_path)
    if not Path(path).is_file():
        raise ConfigError("rows", "a file of rows to answer (.csv, or arrays: .npy, .npz)", path)
    if path.lower().endswith((".npy", ".npz")):
        return _predict_arrays(result, path, params)
    frame = read_rows(path)
    table = (result.summary.get("data") or {}).get("table")
    lower = {str(c).strip().lower(): c for c in frame.columns}
    if table is not None:   # the run's own columns, by name
        label = lower.get(str(table["label"]).strip().lower())
        missing = [c for c in table["features"] if c not in frame.columns]
        if missing:
            raise ConfigError("rows", f"the feature columns the run was trained on ({', '.join(table['features'])})",
                              f"{path} without {', '.join(missing)}")
        columns = list(table["features"])
    else:
        label = next((lower[n] for n in LABEL_COLUMNS if n in lower), None)
        columns = [c for c in frame.columns if c != label]
    said = predict(result, feature_matrix(frame[columns], path), params=params)
    out = frame.copy()
    out["predicted"] = said
    if label is None:
        return out, None
    return out, _agreement(frame[label].astype(str).str.strip().to_numpy(), said, f"its {label!r} column")


def _predict_arrays(result: Any, path: str, params: str) -> tuple[Any, str | None]:
    """`predict_rows` of a .npy of rows or a .npz with `X` (and `y`)."""
    import pandas as pd
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ConfigError("rows", f"a .npy or .npz NumPy wrote ({type(exc).__name__})", path) from None
    if isinstance(loaded, np.ndarray):
        X, y = loaded, None
    else:
        with loaded:
            names = list(loaded.files)
            if "X" not in names and len(names) != 1:
                raise ConfigError("rows", "a .npz holding X (and y), or one array", f"{path} with {', '.join(names)}")
            X = loaded["X" if "X" in names else names[0]]
            y = loaded["y"] if "y" in names else None
    said = predict(result, X, params=params)
    out = pd.DataFrame({"row": np.arange(len(said)), "predicted": said})
    if y is None:
        return out, None
    classes = ((result.summary.get("data") or {}).get("table") or {}).get("classes")
    truth = np.asarray(y).reshape(-1)
    out["label"] = np.asarray(classes, dtype=object)[truth.astype(np.int64)] if classes else truth
    return out, _agreement(out["label"].to_numpy(), said, "its y")


def _agreement(truth: Any, said: Any, what: str) -> str:
    """How often the answers equal the rows' own labels, in words (compared as text: names
    or numbers alike)."""
    agree = int(np.sum(np.asarray(truth).astype(str) == np.asarray(said).astype(str)))
    return f"the predictions agree with {what} on {agree} of {len(said)} rows ({agree / len(said):.2f})"


def allowed_text(result: Any, text: str) -> str | None:
    """For a run on `markov_text`, how many of a text's transitions the language allows
    (`data.text.allowed_note`); None for any other run."""
    if (result.summary.get("config") or {}).get("dataset") != "markov_text":
        return None
    from ..data.text import allowed_note
    return allowed_note(text)
