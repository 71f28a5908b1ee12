"""Using a trained run: its parameters (`trained_params`: final or at its best test loss),
its answers for new rows (`predict`), the text a language model writes (`generate`), and a
PyTorch model's trained network (`torch_module`). `wb.predict` and the others are these;
they sit below `api` (the report, which `api` writes, shows what a language model writes).
"""
from __future__ import annotations

from typing import Any, NamedTuple

from .config import ConfigError, ConfigTypeError, RunConfig, is_text_dataset
from .results.result import RunResult


def trained_params(result: RunResult, which: str = "final") -> Any:
    """A run's trained parameters: "final" (its params.npy) or "best" (at its lowest test
    loss: params_best.npy, `summary["params_best"]` says when); a ConfigError naming what is
    missing otherwise."""
    if which not in ("final", "best"):
        raise ConfigError("params", '"final" (the parameters the run ended with) or "best" (at its lowest validation loss, or test loss without a validation set)',
                          which)
    chosen = result.params if which == "final" else result.best_params
    if chosen is None:
        raise ConfigError("params", f"a run's {which} parameters (a run that failed before its first evaluation "
                                    "has none, nor a run that never evaluated a test loss its best, nor a run "
                                    "directory written before they were kept in params.npy)", None)
    return chosen


def predict(result: RunResult, X: Any, params: str = "final") -> Any:
    """The trained model's answer for each row of `X`, in the run's own terms: the rows
    scaled as the run scaled its features (`standardize`: the mean and deviation in
    `summary["data"]["standardized"]`), and a CSV's class names where its labels were names
    (else the integer labels). For a run of this session or one loaded from its directory
    (`wb.load`: its params.npy, the final parameters; `params="best"`: those at its lowest
    test loss, params_best.npy).

    `X`: rows as an array (a 1-D array of the run's width is one row; with one feature, a
    1-D array is a column of rows); a pandas DataFrame (a CSV-trained run takes its feature columns
    by name, in any order, other columns such as the label ignored; a run trained on arrays
    every column but a label column: `feature_rows`); or the path of a file of rows, read
    as `python -m workbench predict` reads it (a CSV as the run's was read, a `.npy` of rows,
    a `.npz` with `X`).

    Raises:
        ConfigError: no such parameters (a run that failed before its first evaluation, or a
            directory written before run directories kept them), a language model's run (`generate` writes with it),
            rows of another width than the run's features, or a table without the run's
            feature columns.
    """
    import numpy as np

    from .problem import Problem
    if not isinstance(result, RunResult):
        raise ConfigTypeError("result", "a RunResult (what wb.run returns)", result)
    trained = trained_params(result, params)
    config = RunConfig.from_dict(result.summary["config"])
    if is_text_dataset(config.dataset):
        raise ConfigError("result", "a run that classifies rows (a language model writes text: wb.generate, "
                                    "python -m workbench generate)", config.dataset)
    problem = Problem.from_config(config)
    rows = np.asarray(feature_rows(result, X).matrix, dtype=np.float32)
    width = problem.shape.n_features
    if rows.ndim == 1 and width > 1:   # one row's features (X[3]); with one feature, a column of rows
        if len(rows) != width:
            raise ConfigError("rows", f"rows of the run's {width} features (a 1-D array is one row: {width} values)",
                              f"a 1-D array of {len(rows)} values")
        rows = rows[None]
    rows = rows.reshape(len(rows), -1)
    if rows.shape[1] != width:
        raise ConfigError("rows", f"rows of the run's {width} features", f"{rows.shape[1]} columns")
    data = result.summary.get("data") or {}
    if data.get("standardized"):
        from .data.files import standardize_rows
        rows = standardize_rows(rows, data["standardized"])
    labels = np.asarray(problem.model.predict(np.asarray(trained), rows))
    classes = (data.get("table") or {}).get("classes")
    return np.asarray(classes, dtype=object)[labels] if classes else labels


class Rows(NamedTuple):
    """Rows to answer as `feature_rows` read them: the feature matrix, the table they came
    from (None for arrays), its label column's name and the labels (None without them)."""
    matrix: Any
    frame: Any = None
    label: str | None = None
    labels: Any = None
    name: str = "rows"   # the file they were read from, for messages
    sep: str = ","       # a CSV file's separator (`data.files.read_rows_and_sep`), for writing answers back


def feature_rows(result: RunResult, X: Any) -> Rows:
    """The rows of `X` a run's model answers, and their labels where they carry them: the
    one reading of new rows that `wb.predict` and `python -m workbench predict` share.

    A path: a CSV read as the run's own was (`data.files.read_rows`: the separator found, a
    written row index dropped), a `.npy` of rows, or a `.npz` holding `X` (and `y`), or one
    array. A table (a CSV's, or a DataFrame): a run trained on a CSV takes its feature
    columns by name, in any order, other columns ignored (a ConfigError names the missing
    ones); a run trained on arrays takes every column but a label column (`LABEL_COLUMNS`).
    Anything else is taken as the rows themselves. Every route refuses, in one line naming
    the row and column, a table or array with no rows, a cell that is not a number, or a
    NaN or inf (`checked_matrix`), in the same words for a CSV and for arrays."""
    rows = _feature_rows(result, X)
    lines = rows.frame is not None and rows.name != "rows"    # a CSV file's rows: named by their line
    return rows._replace(matrix=checked_matrix(rows.matrix, rows.name, lines=lines))


def checked_matrix(X: Any, name: str = "rows", lines: bool = False) -> Any:
    """`X` as a float64 array of at least one row, every value a finite number, or a
    one-line ConfigError naming the first row and column that is not (a NaN or inf row
    would be answered as if it were data: a class from nothing). The one wording of these
    refusals for every kind of rows, each cell named in the rows' own terms (`_cell`): an
    array's row and column index, a table's (a DataFrame's) column by name, and with `lines`
    (a CSV file's rows) the row by its line in the file.

    >>> checked_matrix([[1, 2], [3, float("nan")]])
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: rows: a finite number in every cell, got 'nan at row 1, column 1'
    """
    import numpy as np
    columns = list(X.columns) if hasattr(X, "columns") and hasattr(X, "to_numpy") else None   # a table's names
    if columns is not None:
        X = X.to_numpy()
    arr = np.asarray(X, dtype=object) if not hasattr(X, "dtype") else np.asarray(X)
    if arr.ndim == 0 or arr.shape[0] == 0 or arr.size == 0:
        raise ConfigError("rows", f"at least one row of features{_of(name, 'in')}", "no rows")
    if arr.dtype.kind not in "biuf":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            for at, value in np.ndenumerate(arr):
                try:
                    float(value)
                except (TypeError, ValueError):
                    raise ConfigError("rows", f"a number in every cell{_of(name)}",
                                      f"{value!r} at {_cell(at, columns, lines)}") from None
            raise
    arr = np.asarray(arr, dtype=np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        at = np.unravel_index(int(bad.argmax()), arr.shape)
        value = "an empty or NaN cell" if columns is not None and np.isnan(arr[at]) else arr[at]   # a table's blank reads as NaN
        raise ConfigError("rows", f"a finite number in every cell{_of(name)}", f"{value} at {_cell(at, columns, lines)}")
    return arr


def _of(name: str, word: str = "of") -> str:
    """" of FILE" for rows read from a file (in the refusal's allowed part, which is never cut:
    the value's repr is cut at 120 characters, and a long path cut in its middle names no file)."""
    return "" if name == "rows" else f" {word} {name}"


def _cell(at: tuple[int, ...], columns: list[Any] | None = None, lines: bool = False) -> str:
    """Where a cell is, in the rows' own words: "row 3, column 1" of an array (a 1-D array:
    "value 3"); a table's column by its name ("column 'width'"); a CSV file's row by its line
    ("line 5": the header is line 1, `data.files._line`).

    >>> _cell((3, 1))
    'row 3, column 1'
    >>> _cell((3, 1), ["height", "width"], lines=True)
    "line 5, column 'width'"
    """
    if len(at) == 2:
        from .data.files import _line
        row = _line(int(at[0])).rstrip(", ") if lines else f"row {at[0]}"
        column = at[1] if columns is None else columns[at[1]]
        where = f"{row}, column {column!r}" if isinstance(column, str) else f"{row}, column {column}"
    else:
        where = f"value {at[0]}" if len(at) == 1 else f"index {at}"
    return where


def _feature_rows(result: RunResult, X: Any) -> Rows:
    from pathlib import Path

    import numpy as np

    from .data.files import LABEL_COLUMNS, read_rows_and_sep
    name, sep = "rows", ","
    if isinstance(X, (str, Path)):
        name = str(X)
        if not Path(name).is_file():
            raise ConfigError("rows", "a file of rows to answer (.csv, or arrays: .npy, .npz)", name)
        if not name.lower().endswith((".npy", ".npz")):
            X, sep = read_rows_and_sep(name)
        else:
            try:
                loaded = np.load(name, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise ConfigError("rows", f"a .npy or .npz NumPy wrote ({type(exc).__name__})", name) from None
            if isinstance(loaded, np.ndarray):
                return Rows(loaded, name=name)
            with loaded:
                names = list(loaded.files)
                if "X" not in names and len(names) != 1:
                    raise ConfigError("rows", "a .npz holding X (and y), or one array", f"{name} with {', '.join(names)}")
                return Rows(loaded["X" if "X" in names else names[0]], labels=loaded["y"] if "y" in names else None,
                            name=name)
    if not hasattr(X, "columns") or not hasattr(X, "iloc"):   # an array, a list of rows
        return Rows(X, name=name)
    frame = X
    if len(frame) == 0:   # a header alone: its columns read as text, not as numbers missing
        checked_matrix(np.empty((0, 0)), name)
    table = (result.summary.get("data") or {}).get("table")
    if table is not None:   # the run's own columns, by name
        lower = {str(c).strip().lower(): c for c in frame.columns}
        label = lower.get(str(table["label"]).strip().lower())
        missing = [c for c in table["features"] if c not in frame.columns]
        if missing:
            raise ConfigError("rows", f"the feature columns the run was trained on ({', '.join(table['features'])})",
                              f"{name} without {', '.join(missing)}")
        columns = list(table["features"])
    else:   # a run trained on arrays: no names to go by, so one label-like column at most
        named = [c for c in frame.columns if str(c).strip().lower() in LABEL_COLUMNS]
        if len(named) > 1:    # x, y, class: a coordinate y, or the label? (as a CSV's label is refused)
            raise ConfigError("rows", "a table with at most one label column (label, y, target or class) beside "
                              "the features of a run trained on arrays", f"{name} with {', '.join(map(str, named))}")
        label = named[0] if named else None
        columns = [c for c in frame.columns if c != label]
    return Rows(frame[columns], frame, label,     # its cells checked as an array's are (`checked_matrix`)
                frame[label].astype(str).str.strip().to_numpy() if label is not None else None, name, sep)


GENERATE_MAX = 100_000   # characters `generate` writes at most: each one is a pass of the model over its context


def generate(result: RunResult, prompt: str | None = None, length: int = 200, temperature: float = 1.0,
             seed: int = 0, params: str = "final") -> str:
    """Text written by a trained language model (a run of `model: gpt` on a text, or of a
    model of yours with a `logits` method): `length` characters after `prompt`, each drawn
    from the model's next-character distribution over the last `context` characters
    (`maths.sampling.sample`; temperature 0: the most likely each time). `prompt` None: one
    character drawn by `seed` from the training text's. For a run of this session or one
    loaded from its directory (its params.npy; `params="best"`: params_best.npy).

    Raises:
        ConfigError: not a language model's run, no final parameters, a prompt character the
            text never had (naming it and the vocabulary), or a bad length (1 to `GENERATE_MAX`),
            temperature or seed.
    """
    import numpy as np

    from .maths.sampling import sample
    from .problem import Problem
    if not isinstance(result, RunResult):
        raise ConfigTypeError("result", "a RunResult (what wb.run or wb.load returns)", result)
    config = RunConfig.from_dict(result.summary["config"])
    problem = Problem.from_config(config)
    model = problem.model
    model = model if callable(getattr(model, "logits", None)) else getattr(model, "obj", model)   # yours, adapted
    if getattr(problem.data, "vocab", None) is None or not callable(getattr(model, "logits", None)):
        raise ConfigError("result", "a language model's run (a text dataset and a model with logits(params, X): "
                                    "gpt, or yours)", f"{config.dataset} with {config.model}")
    trained = trained_params(result, params)
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= GENERATE_MAX:
        raise ConfigError("length", f"a whole number of characters from 1 to {GENERATE_MAX:,} (each one a pass "
                                    "of the model)", length)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError("seed", "a whole number >= 0 (the same seed, the same text)", seed)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ConfigError("temperature", "0 (the most likely character each time) or more", temperature)
    vocab = problem.data.vocab
    recorded = (result.summary.get("data") or {}).get("vocab")
    if recorded is not None and recorded != vocab:
        raise ConfigError("dataset", f"the text the run was trained on (its characters have changed since: "
                                     f"{len(recorded)} then, {len(vocab)} now)", config.dataset)
    rng = np.random.default_rng(seed)
    if prompt is None:
        train = np.asarray(problem.data.X_train[:, 0], dtype=np.int64)   # each training window's first character
        prompt = vocab[int(train[rng.integers(len(train))])]
    if not isinstance(prompt, str) or not prompt:
        raise ConfigError("prompt", "text of at least one character", prompt)
    index = {c: i for i, c in enumerate(vocab)}
    unknown = next((c for c in prompt if c not in index), None)
    if unknown is not None:
        raise ConfigError("prompt", f"characters of the training text ({vocab!r}; {unknown!r} is not one)", prompt)
    # A model of yours may score more tokens than the text has characters (it trains: the
    # labels are in range); a draw of one of the others would be no character at all.
    width = int(np.shape(model.logits(trained, np.zeros((1, 1), dtype=np.float32)))[-1])
    if width != len(vocab):
        raise ConfigError("model", f"a language model scoring one next token per character of the text "
                                   f"({len(vocab)}, {vocab!r}) to write it", f"{config.model} scoring {width}")
    ids = sample(model, trained, np.array([index[c] for c in prompt]), length, config.context, float(temperature), rng)
    return "".join(vocab[int(i)] for i in ids)


def torch_module(result: RunResult, params: str = "final") -> Any:
    """The trained network of a run whose model is a `torch.nn.Module` (a factory or class
    returning one): a fresh copy of the module, in eval mode on the CPU, holding the run's
    final parameters (`params="best"`: those at its lowest validation loss, or test loss). Save it with
    `torch.save(module.state_dict(), path)`.

    Raises:
        ConfigError: the run's model is not a torch module, or it has no such parameters.
    """
    from .problem import Problem
    if not isinstance(result, RunResult):
        raise ConfigTypeError("result", "a RunResult (what wb.run or wb.load returns)", result)
    config = RunConfig.from_dict(result.summary["config"])
    trained = trained_params(result, params)
    model = getattr(Problem.from_config(config).new_model(), "obj", None)   # the protocol's adapter holds it
    if not callable(getattr(model, "trained_module", None)):
        raise ConfigError("result", "a run of a torch.nn.Module (model: a factory or class returning one)",
                          result.summary["config"].get("model"))
    return model.trained_module(trained)
