"""Your own data (`data.files`, `Dataset.from_arrays`): every way of handing arrays over
gives back exactly those arrays and trains; each bad file is one line naming the array,
the row and what is allowed, before any worker starts; large arrays are memory-mapped."""
from __future__ import annotations

import mmap
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench.config import ConfigError, RunConfig
from workbench.data import DataError, Dataset, clear_cache, files, load_dataset
from workbench.execution.engine import run_threads
from workbench.execution.preflight import preflight
from workbench.problem import Problem

DIGITS = load_dataset("digits")


def config(dataset, **kw) -> RunConfig:
    return RunConfig(**{"algorithm": "sync_sgd", "dataset": dataset, "cpus": 2, "batch_size": 64, "lr": 0.1,
                        "epochs": 3, **kw})


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "cache"))     # prepared copies and saved arrays go here
    yield tmp_path
    clear_cache()


def _mapped(a) -> bool:
    """Whether `a`'s memory is a file's mapping (np.load(mmap_mode=...) underneath)."""
    while a is not None:
        if isinstance(a, (np.memmap, mmap.mmap)):
            return True
        a = getattr(a, "base", None)
    return False


# ------------------------------------------------------------------ every way in gives the arrays back
def test_an_npz_with_its_own_split_is_read_exactly_and_trains(folder):
    path = folder / "d.npz"
    np.savez(path, X_train=DIGITS.X_train, y_train=DIGITS.y_train, X_test=DIGITS.X_test, y_test=DIGITS.y_test)
    d = load_dataset(str(path))
    assert np.array_equal(d.X_train, DIGITS.X_train) and np.array_equal(d.y_test, DIGITS.y_test)
    assert (d.n_classes, d.image_shape, d.X_train.flags.writeable) == (10, None, False)
    own = run_threads(config(str(path)))
    builtin = run_threads(config("digits"))
    assert np.array_equal(own.params, builtin.params)               # the same arrays: the same run, bitwise
    assert own.summary["data"]["files"][0]["bytes"] == path.stat().st_size
    import hashlib
    assert own.summary["data"]["files"][0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert "data" not in builtin.summary


def test_x_y_are_split_by_test_fraction_with_a_fixed_shuffle(folder):
    X, y = DIGITS.X_train, DIGITS.y_train
    np.savez(folder / "xy.npz", X=X, y=y)
    np.save(folder / "f.npy", X)
    np.save(folder / "l.npy", y)
    by_npz = load_dataset(str(folder / "xy.npz"), test_fraction=0.25)
    by_pair = load_dataset(f"{folder / 'f.npy'},{folder / 'l.npy'}", test_fraction=0.25)
    assert by_npz.n_test == round(0.25 * len(X)) and by_npz.n_train + by_npz.n_test == len(X)
    assert np.array_equal(by_npz.X_test, by_pair.X_test) and np.array_equal(by_npz.y_train, by_pair.y_train)
    rows = {tuple(r) for r in np.concatenate([by_npz.X_train, by_npz.X_test])}
    assert len(rows) == len({tuple(r) for r in X})                  # every row once, on one side
    for seed in (0, 7):                                             # the split is the file's, not the run's
        p = Problem.from_config(config(str(folder / "xy.npz"), seed=seed, test_fraction=0.25))
        assert np.array_equal(p.data.X_test, by_npz.X_test)


def test_a_folder_of_npy_files_and_a_csv_with_a_label_column(folder):
    (folder / "dir").mkdir()
    for name in ("X_train", "y_train", "X_test", "y_test"):
        np.save(folder / "dir" / f"{name}.npy", getattr(DIGITS, name))
    d = load_dataset(str(folder / "dir"))
    assert np.array_equal(d.X_test, DIGITS.X_test)
    frame = pd.DataFrame(DIGITS.X_train[:300], columns=[f"p{i}" for i in range(64)])
    frame.insert(5, "Label", DIGITS.y_train[:300])                   # named label: wherever it stands
    frame.to_csv(folder / "t.csv", index=False)
    c = load_dataset(str(folder / "t.csv"))
    assert c.n_features == 64 and c.n_train + c.n_test == 300
    assert np.allclose(np.concatenate([c.X_train, c.X_test]).sum(), DIGITS.X_train[:300].sum(), rtol=1e-5)
    unnamed = frame.rename(columns={"Label": "digit"})
    unnamed = unnamed[[c for c in unnamed.columns if c != "digit"] + ["digit"]]   # unnamed: the last column
    unnamed.to_csv(folder / "u.csv", index=False)
    assert load_dataset(str(folder / "u.csv")).n_features == 64
    assert run_threads(config(str(folder / "t.csv"), epochs=5)).summary["final_test_accuracy"] > 0.8


def test_a_spreadsheets_csv_class_names_its_separator_and_a_written_index(folder):
    """The CSV a researcher has: class names for labels (iris's species), written by
    `DataFrame.to_csv` with its row index, or by a spreadsheet with semicolons or tabs. The
    names become 0..K-1 in sorted order, the run records them, a written row index is not
    a feature, and the run's default directory is named by the file, not its path."""
    rng = np.random.default_rng(0)
    names = np.array(["virginica", "setosa", "versicolor"])
    k = rng.integers(0, 3, 240)
    X = rng.normal(size=(240, 4)) + 3.0 * np.eye(3, 4)[k]          # three well-separated classes
    frame = pd.DataFrame(X, columns=["sepal_l", "sepal_w", "petal_l", "petal_w"]).assign(species=names[k])
    frame.to_csv(folder / "iris.csv")                             # the index too: pandas' default
    frame.to_csv(folder / "semi.csv", sep=";", index=False)
    frame.to_csv(folder / "tabs.csv", sep="\t", index=False)
    codes = np.searchsorted(sorted(names), names[k])               # setosa 0, versicolor 1, virginica 2
    for name, sep in (("iris", ","), ("semi", ";"), ("tabs", "\t")):
        path = str(folder / f"{name}.csv")
        d = load_dataset(path)
        assert (d.n_features, d.n_classes, d.n_train + d.n_test) == (4, 3, 240), name
        got = np.concatenate([d.X_train, d.X_test])
        order = np.argsort(got[:, 0])                              # rows back in the file's order, by a feature
        want = np.argsort(X[:, 0])
        assert np.allclose(got[order], X[want], atol=1e-6)
        assert np.array_equal(np.concatenate([d.y_train, d.y_test])[order], codes[want])
        table = files.data_record(path)["table"]
        assert table["classes"] == ["setosa", "versicolor", "virginica"] and table["sep"] == sep
        assert table["label"] == "species" and table["features"] == ["sepal_l", "sepal_w", "petal_l", "petal_w"]
        assert table.get("dropped") == ("Unnamed: 0" if name == "iris" else None)
    result = run_threads(config(str(folder / "iris.csv"), batch_size=32, epochs=5))
    assert result.summary["data"]["table"]["classes"] == ["setosa", "versicolor", "virginica"]
    assert result.summary["final_test_accuracy"] > 0.9
    from workbench.apps.cli import _default_out
    out = _default_out(config(str(folder / "iris.csv")))
    assert out.startswith("runs/sync_sgd-iris-") and out.count("/") == 1


def test_a_missing_value_is_named_by_the_files_own_row(folder):
    (folder / "gap.csv").write_text("a,b,label\n" + "".join(f"{i},{'' if i == 5 else i},{i % 2}\n" for i in range(40)))
    with pytest.raises(DataError, match=r"^X: a number in every cell, got an empty or NaN cell at row 5 \(line 7, column 'b'\)"):
        load_dataset(str(folder / "gap.csv"))
    (folder / "nolabel.csv").write_text("a,label\n" + "".join(f"{i},{'' if i == 7 else 'x'}\n" for i in range(40)))
    with pytest.raises(DataError, match=r"^y: a label in every row, got an empty cell at row 7 \(line 9, column 'label'\)"):
        load_dataset(str(folder / "nolabel.csv"))
    X = np.arange(200.0).reshape(50, 4)
    X[17, 3] = np.nan                                              # a split reorders rows: the file's row is named
    np.savez(folder / "xy.npz", X=X, y=np.arange(50) % 3)
    with pytest.raises(DataError, match=r"^X: finite numbers \(float32\), got nan at row 17, column 3 of"):
        load_dataset(str(folder / "xy.npz"))
    (folder / "mixed.csv").write_text("a,label\n" + "".join(f"{i},{'x' if i == 9 else i % 2}\n" for i in range(40)))
    with pytest.raises(DataError, match=r"^y: integer class labels or class names in column 'label', not both: "
                                        r"got 'x' at row 9 \(line 11\)"):   # a typo among numbers is not a class
        load_dataset(str(folder / "mixed.csv"))
    with pytest.raises(DataError, match=r"names, y = np.unique\(y, return_inverse=True\)"):
        Dataset.from_arrays(X[:, :2], np.array(["a", "b"] * 25))


def test_standardize_scales_by_the_training_sets_statistics_and_says_so(folder, monkeypatch):
    """`standardize`: every feature to mean 0 and deviation 1 by the training rows (the test
    rows by the same numbers, not their own), recorded in the summary; a run of raw features
    is warned about before it starts; text cannot be standardized; a memory-mapped file's
    features are written once, standardized, and stay mapped."""
    rng = np.random.default_rng(1)
    k = rng.integers(0, 3, 300)
    X = (rng.normal(size=(300, 4)) + 3.0 * np.eye(3, 4)[k]) * [0.3, 2.0, 50.0, 1.0] + [5.0, -3.0, 200.0, 0.0]
    X[:, 3] = 7.0                                                  # a constant column: centred, not divided by 0
    np.savez(folder / "raw.npz", X=X, y=k)
    raw = config(str(folder / "raw.npz"), batch_size=32, epochs=5)
    assert any("not standardized" in w and "--standardize" in w for w in preflight(raw))
    std_cfg = config(str(folder / "raw.npz"), batch_size=32, epochs=5, standardize=True)
    assert not any("not standardized" in w for w in preflight(std_cfg))
    assert not any("not standardized" in w for w in preflight(config("digits")))   # a built-in: scaled already
    p = Problem.from_config(std_cfg)
    plain = load_dataset(str(folder / "raw.npz"))
    mu = plain.X_train.astype(np.float64).mean(axis=0)
    sd = plain.X_train.astype(np.float64).std(axis=0)
    sd[3] = 1.0
    assert np.allclose(p.data.X_train, (plain.X_train - mu) / sd, atol=1e-5)
    assert np.allclose(p.data.X_test, (plain.X_test - mu) / sd, atol=1e-5)      # the training set's numbers
    assert np.allclose(p.data.X_train.mean(axis=0), 0, atol=1e-5)
    assert np.allclose(p.data.X_train.std(axis=0), [1, 1, 1, 0], atol=1e-4)
    assert not np.allclose(p.data.X_test.mean(axis=0)[:3], 0, atol=1e-3)      # (its own mean is not removed)
    result = run_threads(std_cfg)
    rec = result.summary["data"]["standardized"]
    assert np.allclose(rec["mean"], mu) and np.allclose(rec["std"], sd)
    assert result.summary["final_test_accuracy"] > 0.9
    with pytest.raises(ConfigError, match=r"^standardize: false for the text dataset markov_text"):
        RunConfig(dataset="markov_text", model="gpt", standardize=True)
    monkeypatch.setattr(files, "MMAP_BYTES", 1024)                  # mapped: a standardized copy, mapped too
    clear_cache()
    Problem.clear_cache()
    mapped = Problem.from_config(std_cfg).data
    assert _mapped(mapped.X_train) and _mapped(mapped.X_test)
    assert len(list((folder / "cache").glob("standardized/*/X_train.npy"))) == 1
    assert np.allclose(mapped.X_train, p.data.X_train, atol=1e-6) and np.allclose(mapped.X_test, p.data.X_test, atol=1e-6)


def test_a_run_on_your_data_that_learned_nothing_says_so_and_why(folder):
    """Chance is known for a file of yours too (its labels' classes; it was unknown, so a run
    below chance said nothing), and raw features are named as the first thing to change."""
    from workbench.learning import chance_accuracy, note
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 2)) * [0.3, 1.5] + [5.0, 4.0]                # centimetres, not unit scale
    pd.DataFrame(X, columns=["a", "b"]).assign(kind=np.array(["x", "y", "z"])[np.arange(90) % 3]).to_csv(
        folder / "t.csv", index=False)
    cfg = {"dataset": str(folder / "t.csv"), "algorithm": "sync_sgd", "optimizer": "sgd", "lr": 0.1}
    counts = np.bincount(load_dataset(cfg["dataset"]).y_train)           # 72 training rows of 3 classes
    assert chance_accuracy(cfg) == pytest.approx(counts.max() / counts.sum()) and 1 / 3 <= chance_accuracy(cfg) < 0.4
    assert note(cfg, 0.22, 1.8, 1.0, 600) == ("did not learn: test accuracy 0.22, chance 0.38; its features are not "
                                              "standardized (means up to 5, deviations 0.3-1.5): try standardize "
                                              "(--standardize)")
    said = note({**cfg, "standardize": True}, 0.22, 1.8, 1.0, 600)
    assert said == ("did not learn: test accuracy 0.22, chance 0.38; lr 0.1: no range that learns t.csv is "   # no claim
                    "measured (digits' with sgd is 0.03-0.3): compare a few with grid --vary "  # of
                    "lr=0.01,0.1,1")                                                                  # digits' range
    assert "learns digits" in note({**cfg, "dataset": "digits", "standardize": True}, 0.1, 1.8, 1.0, 600)
    assert note(cfg, 0.9, 1.8, 0.2, 600) is None
    # four in five rows of one class: answering it always scores 0.8, so 0.81 learned nothing
    pd.DataFrame(rng.normal(size=(100, 2)), columns=["a", "b"]).assign(
        kind=np.where(np.arange(100) % 5 == 0, "rare", "common")).to_csv(folder / "skew.csv", index=False)
    skew = {**cfg, "dataset": str(folder / "skew.csv")}
    assert chance_accuracy(skew) == pytest.approx(0.8, abs=0.03)
    assert note(skew, 0.81, 0.7, 0.5, 600).startswith("did not learn: test accuracy 0.81, chance 0.8")


def test_a_run_predicts_raw_rows_in_its_own_terms(folder):
    """`wb.predict(result, rows)` scales raw rows as the run scaled its features and answers in the
    table's class names: over the file's own test rows, raw, it agrees with the run's final
    evaluation (the evaluator saw them standardized), which is the oracle."""
    rng = np.random.default_rng(2)
    k = rng.integers(0, 3, 400)
    X = (rng.normal(size=(400, 3)) + 1.2 * np.eye(3)[k]) * [0.5, 3.0, 20.0] + [4.0, -10.0, 100.0]   # overlapping
    names = np.array(["low", "mid", "high"])
    pd.DataFrame(X, columns=["a", "b", "c"]).assign(grade=names[k]).to_csv(folder / "g.csv", index=False)
    result = run_threads(config(str(folder / "g.csv"), batch_size=32, epochs=4, standardize=True))
    raw = load_dataset(str(folder / "g.csv"))                          # the same split, not standardized
    said = wb.predict(result, raw.X_test)
    classes = np.array(["high", "low", "mid"])                        # sorted: the labels' numbering
    accuracy = float(np.mean(said == classes[raw.y_test]))
    assert set(said) <= set(classes) and 0.5 < accuracy < 1.0          # (overlapping classes: a real test)
    assert accuracy == pytest.approx(result.summary["final_test_accuracy"], abs=1e-9)
    with pytest.raises(ConfigError, match=r"^rows: rows of the run's 3 features, got '2 columns'"):
        wb.predict(result, raw.X_test[:, :2])
    assert wb.predict(result, raw.X_test[7]).tolist() == [said[7]]        # a 1-D array of the run's width: one row
    with pytest.raises(ConfigError, match=r"^rows: rows of the run's 3 features \(a 1-D array is one row: 3 values\), "
                                          r"got 'a 1-D array of 2 values'"):
        wb.predict(result, raw.X_test[7, :2])
    # the same accuracy class by class, in the summary (a file's classes need not be balanced)
    per_class = result.summary["per_class"]
    assert [c["class"] for c in per_class] == list(classes)
    assert [c["rows"] for c in per_class] == np.bincount(raw.y_test, minlength=3).tolist()
    for c in per_class:
        mine = raw.y_test == list(classes).index(c["class"])
        assert c["accuracy"] == pytest.approx(float(np.mean(said[mine] == c["class"])), abs=1e-12)
    assert sum(c["accuracy"] * c["rows"] for c in per_class) / len(raw.y_test) == pytest.approx(accuracy, abs=1e-12)
    from workbench.learning import per_class_text
    assert per_class_text(per_class).startswith("per class (test rows): high ")


def test_the_cli_and_the_report_say_the_accuracy_class_by_class(folder, capsys):
    from workbench.apps import cli
    rng = np.random.default_rng(3)
    k = rng.integers(0, 2, 120)
    pd.DataFrame(rng.normal(size=(120, 2)) + 2.0 * np.eye(2)[k], columns=["a", "b"]).assign(
        kind=np.array(["no", "yes"])[k]).to_csv(folder / "k.csv", index=False)
    out = folder / "run"
    assert cli.main(["run", "--algorithm", "sgd", "--dataset", str(folder / "k.csv"), "--steps", "40",
                     "--batch-size", "16", "--out", str(out)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "per class" in x)
    assert line.startswith("  per class (test rows): no ") and ", yes " in line
    assert line.strip() in (out / "report.html").read_text()


def test_image_arrays_keep_their_shape_and_train_the_cnn(folder):
    X = np.concatenate([DIGITS.X_train, DIGITS.X_test]).reshape(-1, 1, 8, 8)
    np.savez(folder / "img.npz", X=X, y=np.concatenate([DIGITS.y_train, DIGITS.y_test]))
    cfg = config(str(folder / "img.npz"), model="cnn", hidden=[4])
    assert cfg.data_shape.image_shape == (1, 8, 8)
    assert run_threads(cfg).status == "completed"
    np.savez(folder / "flat.npz", X=X.reshape(len(X), -1), y=np.zeros(len(X), int) + np.arange(len(X)) % 2)
    with pytest.raises(ConfigError, match="model: cnn only with an image dataset"):
        config(str(folder / "flat.npz"), model="cnn")


def test_arrays_from_python_are_checked_and_saved_once_by_their_hash(folder):
    ds = Dataset.from_arrays(DIGITS.X_train, DIGITS.y_train, DIGITS.X_test, DIGITS.y_test)
    a, b = RunConfig(dataset=ds), RunConfig(dataset=Dataset.from_arrays(DIGITS.X_train, DIGITS.y_train,
                                                                         DIGITS.X_test, DIGITS.y_test))
    assert a.dataset == b.dataset and a.dataset.startswith(str(folder / "cache" / "arrays"))
    assert np.array_equal(load_dataset(a.dataset).X_train, DIGITS.X_train)
    run = run_threads(config(ds))
    assert run.status == "completed" and run.summary["config"]["dataset"] == a.dataset
    split = Dataset.from_arrays(np.arange(40.0).reshape(20, 2), np.arange(20) % 4, test_fraction=0.25)
    assert (split.n_train, split.n_test, split.n_classes) == (15, 5, 4)
    assert Dataset.from_arrays(np.zeros((4, 2)), [0, 1, 0, 1], n_classes=5).n_classes == 5


# ------------------------------------------------------------------ bad data: one line, before any worker
def _save(folder, **arrays) -> str:
    path = folder / "bad.npz"
    np.savez(path, **arrays)
    return str(path)


X4, Y4 = np.zeros((40, 3), np.float32), np.arange(40) % 2


@pytest.mark.parametrize("arrays, says", [
    ({"X": X4, "labels": Y4}, r"^dataset: an \.npz holding X_train, y_train, X_test, y_test \(or X, y\), got arrays "
                               r"\['X', 'labels'\]"),
    ({"X": X4, "y": Y4[:-1]}, r"^y: one label per row of X \(40 rows\), got 39 labels in"),
    ({"X": X4, "y": np.stack([Y4, Y4], 1)}, r"^y: one label per row \(a 1-D array\), got shape \(40, 2\)"),
    ({"X_train": X4, "y_train": Y4, "X_test": X4[:, :2], "y_test": Y4},
     r"^X_test: rows shaped as X_train's \(3,\), got \(2,\)"),
    ({"X": X4.astype(str), "y": Y4}, r"^X: numbers \(float, int or bool\), got dtype <U"),
    ({"X": np.where(np.arange(120).reshape(40, 3) == 31, np.nan, X4), "y": Y4},
     r"^X: finite numbers \(float32\), got nan at row 10, column 1 of"),   # the file's row (31 = 3 * 10 + 1), not the split's
    ({"X": X4, "y": np.where(np.arange(40) == 6, 0.5, Y4)}, r"^y: integer class labels, got 0\.5 at row 6 of"),
    ({"X": X4, "y": np.linspace(0.25, 9.0, 40)},      # a regression target: said to be one, and not trainable
     r"^y: integer class labels, got 0\.25 at row 0 of .*: a regression target\? runs train classifiers only"),
    ({"X": X4, "y": np.where(np.arange(40) == 9, -1, Y4)}, r"^y: labels >= 0, got -1 at row 9 of"),
    ({"X": X4, "y": np.where(np.arange(40) == 12, 3, Y4), "n_classes": np.int64(3)},
     r"^y: labels in \[0, 3\) \(n_classes\), got 3 at row 12 of"),
    ({"X": X4, "y": np.zeros(40, int)}, r"^y: at least 2 classes, got only label 0"),
    ({"X": X4, "y": np.ones(40, int)}, r"^y: at least 2 classes, got only label 1 in"),   # one class, not 0 and 1
    ({"X": X4, "y": 1000 + np.arange(40)}, r"^y: class labels 0\.\.n_classes-1 with fewer classes than rows, got "
                                          r"1,040 classes \(largest label 1,039 \+ 1; 40 distinct labels\) for 40 rows"),
])
def test_a_bad_data_file_is_one_line_naming_the_array_and_row(folder, arrays, says):
    path = _save(folder, **arrays)
    with pytest.raises((ConfigError, DataError), match=says) as err:
        preflight(config(path, batch_size=4, steps=2))
    assert "\n" not in str(err.value) and path in str(err.value) or "got arrays" in str(err.value)


def test_more_bad_inputs_and_the_cli_exit_code(folder):
    np.save(folder / "one.npy", X4)
    with pytest.raises(ValueError, match=r"^dataset: features and labels, as a pair features.npy,labels.npy"):
        preflight(config(str(folder / "one.npy")))
    with pytest.raises(DataError, match=r"^dataset: a readable data file .*No such file"):
        preflight(config(str(folder / "missing.npz")))
    with pytest.raises(ConfigError, match=r"^dataset: one of \[.*\], or a path/to/text.txt, or a data file"):
        RunConfig(dataset="digitz")
    (folder / "t.csv").write_text("a,b,label\n1,2,0\n3,x,1\n4,5,0\n")
    with pytest.raises(ValueError, match=r"^X: numbers in every feature column, got 'x' at row 1 \(line 3, column 'b'\)"):
        preflight(config(str(folder / "t.csv")))
    path = _save(folder, X=X4, y=Y4)                        # 32 training rows: a batch of 64 does not fit
    with pytest.raises(ValueError, match=r"^batch_size: at most the training set size \(32\)"):
        preflight(config(path, batch_size=64))
    proc = subprocess.run([sys.executable, "-m", "workbench", "run", "--dataset", path, "--batch-size", "64",
                           "--steps", "2"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: batch_size: at most the training set size (32), got 64"]


# ------------------------------------------------------------------ large arrays are mapped, not copied
def test_large_arrays_are_memory_mapped_from_the_file_or_a_prepared_copy(folder, monkeypatch):
    monkeypatch.setattr(files, "MMAP_BYTES", 1024)
    (folder / "dir").mkdir()
    for name in ("X_train", "y_train", "X_test", "y_test"):                # float32 / int64 .npy: mapped as they are
        np.save(folder / "dir" / f"{name}.npy", getattr(DIGITS, name))
    d = load_dataset(str(folder / "dir"))
    assert _mapped(d.X_train) and _mapped(d.y_test) and np.array_equal(d.X_train, DIGITS.X_train)
    assert not list((folder / "cache").glob("userdata/*"))                # nothing copied
    np.savez(folder / "xy.npz", X=DIGITS.X_train.astype(np.float64), y=DIGITS.y_train.astype(np.int32))
    small = files.load_file(str(folder / "xy.npz"))                        # read in memory (threshold restored below)
    e = load_dataset(str(folder / "xy.npz"))                               # an .npz member, float64, a split: prepared
    assert _mapped(e.X_train) and len(list((folder / "cache").glob("userdata/*/X_train.npy"))) == 1
    assert e.X_train.dtype == np.float32 and np.array_equal(e.X_test, small.X_test)
    clear_cache()
    again = load_dataset(str(folder / "xy.npz"))                           # the prepared copy is reused
    assert len(list((folder / "cache").glob("userdata/*"))) == 1 and np.array_equal(again.X_train, e.X_train)


@pytest.mark.slow
def test_dask_workers_map_a_large_file_instead_of_copying_it(folder, client, monkeypatch):
    monkeypatch.setattr(files, "MMAP_BYTES", 1024)
    (folder / "dir").mkdir()
    for name in ("X_train", "y_train", "X_test", "y_test"):
        np.save(folder / "dir" / f"{name}.npy", getattr(DIGITS, name))
    cfg = config(str(folder / "dir"), steps=20)

    def threshold(n: int) -> None:          # a worker's: the digits file is "large" there too
        from workbench.data import clear_cache, files
        files.MMAP_BYTES = n
        clear_cache()

    def mapped_in_the_run(c: RunConfig) -> bool:
        from workbench.problem import Problem
        return _mapped(Problem.from_config(c).data.X_train)     # the data the worker's run trained on
    default = 64 << 20
    client.run(threshold, 1024)
    try:
        r = wb.run(cfg, cluster=client, progress=False)
        assert r.status == "completed"
        assert list(client.run(mapped_in_the_run, cfg).values()) == [True, True]
    finally:
        client.run(threshold, default)


def test_an_edited_file_is_read_again_by_the_next_run_of_the_session(folder):
    """A process keeps what it built for a config (`Problem`); a data file edited between two
    runs of one session (a label fixed, rows added) must be trained on as it is now, and the
    summary must record the file as it is now (before: the first version, both)."""
    rng = np.random.default_rng(5)
    table = pd.DataFrame(rng.normal(size=(60, 3)), columns=["a", "b", "c"]).assign(label=rng.integers(0, 2, 60))
    path = folder / "edited.csv"
    table.to_csv(path, index=False)
    first = run_threads(config(str(path), batch_size=8, epochs=1))
    pd.concat([table, table]).to_csv(path, index=False)                 # twice the rows
    second = run_threads(config(str(path), batch_size=8, epochs=1))
    assert second.summary["steps"] == 2 * first.summary["steps"]         # 48 training rows, then 96
    assert second.summary["data"]["files"][0]["bytes"] == path.stat().st_size != first.summary["data"]["files"][0]["bytes"]


def test_a_saved_run_answers_a_csv_of_new_rows_from_the_shell(folder, capsys):
    """`predict RUN_DIR ROWS.csv`: the saved model (params.npy) answers each row, its feature
    columns taken by name in any order from a file as a spreadsheet writes it; the answers are
    `wb.predict`'s on the same rows in the run's own session (the oracle), and a label column
    in the rows is compared with them."""
    from workbench.apps.cli import main
    rng = np.random.default_rng(4)
    k = rng.integers(0, 3, 300)
    X = (rng.normal(size=(300, 3)) + 1.5 * np.eye(3)[k]) * [0.5, 3.0, 20.0] + [4.0, -10.0, 100.0]
    names = np.array(["low", "mid", "high"])
    table = pd.DataFrame(X, columns=["a", "b", "c"]).assign(grade=names[k])
    table.to_csv(folder / "g.csv", index=False)
    out = folder / "run"
    result = wb.run(config(str(folder / "g.csv"), batch_size=32, epochs=4, standardize=True, out=str(out)),
                    cluster="threads", progress=False)
    new = table.sample(40, random_state=0)[["c", "grade", "a", "b"]]           # columns reordered
    new.to_csv(folder / "new.csv", sep=";", index=False)
    assert main(["predict", str(out), str(folder / "new.csv"), "--out", str(folder / "p.csv")]) == 0
    assert (folder / "p.csv").read_text().splitlines()[0] == "c;grade;a;b;predicted"   # the rows' own separator
    said = pd.read_csv(folder / "p.csv", sep=";")
    assert list(said.columns) == ["c", "grade", "a", "b", "predicted"]
    in_session = wb.predict(result, new[["a", "b", "c"]])
    assert said["predicted"].tolist() == list(in_session)
    # in Python too, a table's columns are taken by name (reordered, the label beside them), and a
    # path is read as the shell reads it: the answers of the rows in the trained order
    assert list(wb.predict(result, new)) == list(in_session)
    assert list(wb.predict(result, folder / "new.csv")) == list(in_session)
    with pytest.raises(ConfigError, match=r"rows: the feature columns the run was trained on \(a, b, c\)"):
        wb.predict(result, new.drop(columns="b"))
    agree = int((said["predicted"] == said["grade"]).sum())
    assert f"agree with its 'grade' column on {agree} of 40 rows" in capsys.readouterr().out and agree > 20
    assert main(["predict", str(out), str(folder / "new.csv"), "--best"]) == 0     # at its lowest test loss
    best = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out), sep=";")
    assert best["predicted"].tolist() == list(wb.predict(result, new[["a", "b", "c"]], params="best"))
    new.drop(columns="a").to_csv(folder / "short.csv", index=False)
    assert main(["predict", str(out), str(folder / "short.csv")]) == 2
    assert "error: rows: the feature columns the run was trained on (a, b, c), got" in capsys.readouterr().err
    # a run trained on arrays takes every column but a label column, in order
    np.savez(folder / "arr.npz", X=X.astype(np.float32), y=k)
    wb.run(config(str(folder / "arr.npz"), batch_size=32, epochs=2, standardize=True, out=str(folder / "arun")),
           cluster="threads", progress=False)
    pd.DataFrame(X[:5], columns=["x0", "x1", "x2"]).to_csv(folder / "five.csv", index=False)
    assert main(["predict", str(folder / "arun"), str(folder / "five.csv")]) == 0
    printed = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert printed["predicted"].tolist() == list(wb.predict(wb.load(folder / "arun"), X[:5]))
    # ... and two label-like columns (x, y, class: is y a coordinate?) are refused, not ranked
    with pytest.raises(ConfigError, match=r"^rows: a table with at most one label column .* got 'rows with y, class'"):
        wb.predict(wb.load(folder / "arun"), pd.DataFrame(X[:5, :2], columns=["x", "y"]).assign(**{"class": k[:5]}))


def test_a_saved_run_answers_arrays_of_rows_from_the_shell(tmp_path, capsys):
    """`predict RUN_DIR rows.npz|rows.npy`: images and other arrays, answered row by row as
    `wb.predict` answers them, a .npz's y compared."""
    from workbench.apps.cli import main
    out = tmp_path / "run"
    result = wb.run(RunConfig(algorithm="sgd", epochs=2, seed=0, out=str(out)), cluster="threads", progress=False)
    np.savez(tmp_path / "rows.npz", X=DIGITS.X_test[:30], y=DIGITS.y_test[:30])
    assert main(["predict", str(out), str(tmp_path / "rows.npz"), "--out", str(tmp_path / "p.csv")]) == 0
    said = pd.read_csv(tmp_path / "p.csv")
    assert said["predicted"].tolist() == list(wb.predict(result, DIGITS.X_test[:30]))
    agree = int((said["predicted"] == said["label"]).sum())
    assert f"agree with its y on {agree} of 30 rows" in capsys.readouterr().out
    np.save(tmp_path / "rows.npy", DIGITS.X_test[:4].reshape(4, 8, 8))      # shaped rows: flattened as trained
    assert main(["predict", str(out), str(tmp_path / "rows.npy")]) == 0
    printed = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert printed.columns.tolist() == ["row", "predicted"] and printed["predicted"].tolist() == said["predicted"][:4].tolist()
    assert main(["predict", str(out), str(tmp_path / "rows.npz"), "--out", str(tmp_path)]) == 2
    assert "error: out: a file to write the answers to (this is a directory)" in capsys.readouterr().err
    np.savez(tmp_path / "two.npz", a=DIGITS.X_test[:2], b=DIGITS.X_test[:2])
    assert main(["predict", str(out), str(tmp_path / "two.npz")]) == 2
    assert "error: rows: a .npz holding X (and y), or one array" in capsys.readouterr().err


def test_new_rows_that_are_not_finite_numbers_are_refused_in_one_line_by_every_route(tmp_path, capsys):
    """NaN, inf, text and no rows at all: `trained.feature_rows` refuses each, naming the row
    and column, for `wb.predict` and `predict` alike (a NaN row was answered as class 0)."""
    from workbench.apps.cli import main
    out = tmp_path / "run"
    result = wb.run(RunConfig(algorithm="sgd", steps=3, seed=0, out=str(out)), cluster="threads", progress=False)
    nan, inf = DIGITS.X_test[:3].copy(), DIGITS.X_test[:3].copy()
    nan[1, 5], inf[2, 7] = np.nan, -np.inf
    for rows, says in ((nan, "a finite number in every cell, got 'nan at row 1, column 5'"),
                       (inf, "a finite number in every cell, got '-inf at row 2, column 7'"),
                       ([[0.0] * 63 + ["a"]], "a number in every cell, got \"'a' at row 0, column 63\""),
                       (np.zeros((0, 64)), "at least one row of features, got 'no rows'"),
                       (pd.DataFrame(inf), "a finite number in every cell, got '-inf at row 2, column 7'")):
        with pytest.raises(ConfigError) as err:
            wb.predict(result, rows)
        assert str(err.value) == f"rows: {says}"
    pd.DataFrame(columns=[f"f{i}" for i in range(64)]).to_csv(tmp_path / "header.csv", index=False)
    assert main(["predict", str(out), str(tmp_path / "header.csv")]) == 2
    assert capsys.readouterr().err.strip() == f"error: rows: at least one row of features in {tmp_path / 'header.csv'}, got 'no rows'"
    pd.DataFrame(inf).to_csv(tmp_path / "inf.csv", index=False)
    assert main(["predict", str(out), str(tmp_path / "inf.csv")]) == 2
    assert f"error: rows: a finite number in every cell of {tmp_path / 'inf.csv'}, got \"-inf at line 4, column '7'\"" in capsys.readouterr().err


@pytest.mark.parametrize("fault, array_says, csv_says", [
    ("text", "a number in every cell, got \"'a' at row 1, column 5\"",
     "a number in every cell of {path}, got \"'a' at line 3, column 'f5'\""),
    ("nan", "a finite number in every cell, got 'nan at row 1, column 5'",
     "a finite number in every cell of {path}, got \"an empty or NaN cell at line 3, column 'f5'\""),
    ("inf", "a finite number in every cell, got '-inf at row 1, column 5'",
     "a finite number in every cell of {path}, got \"-inf at line 3, column 'f5'\""),
])
def test_a_bad_cell_is_refused_in_the_same_words_from_a_csv_and_from_arrays(tmp_path, capsys, fault, array_says, csv_says):
    """The same fault in the same cell, one wording (`trained.checked_matrix`): `rows:`, what is
    allowed, the value, and where it is in the user's own terms: an array's row and column
    index, a CSV's line and column name (a CSV's text or blank cell said `X: numbers in every
    feature column ... at row 1 (line 3, column 'f5')`, an array's `rows: ... at row 1, column 5`)."""
    from workbench.apps.cli import main
    out = tmp_path / "run"
    result = wb.run(RunConfig(algorithm="sgd", steps=3, seed=0, out=str(out)), cluster="threads", progress=False)
    rows = DIGITS.X_test[:3].astype(object)
    rows[1, 5] = {"text": "a", "nan": np.nan, "inf": -np.inf}[fault]
    path = tmp_path / "rows.csv"
    pd.DataFrame(rows, columns=[f"f{i}" for i in range(64)]).to_csv(path, sep=";", index=False)
    with pytest.raises(ConfigError) as err:
        wb.predict(result, rows if fault == "text" else rows.astype(np.float64))
    assert str(err.value) == f"rows: {array_says}"
    with pytest.raises(ConfigError) as err:
        wb.predict(result, path)
    assert str(err.value) == "rows: " + csv_says.format(path=path)
    assert main(["predict", str(out), str(path)]) == 2
    assert capsys.readouterr().err.strip() == "error: rows: " + csv_says.format(path=path)
    deep = tmp_path / ("a-researcher's-folder-" * 6) / "rows.csv"     # a path past the value's 120-character cut
    deep.parent.mkdir()
    deep.write_bytes(path.read_bytes())
    with pytest.raises(ConfigError) as err:
        wb.predict(result, deep)
    assert str(err.value) == "rows: " + csv_says.format(path=deep)   # named whole, not cut in its middle


# ------------------------------------------------------------------ a table read as its author meant it
def test_two_columns_named_as_labels_are_refused_until_label_column_chooses(folder):
    """`x, y, class`: y is a coordinate here, and the old name order took it as the label (a
    99-class problem with `class` a feature). Two label-named columns are refused in one line
    naming them and the field that chooses; `label_column` chooses, through the run, its
    summary and predict; a name that is no column is refused naming the columns."""
    rng = np.random.default_rng(1)
    xy = rng.integers(0, 100, (60, 2))
    table = pd.DataFrame({"x": xy[:, 0], "y": xy[:, 1], "class": (xy[:, 0] > 50).astype(int)})
    path = str(folder / "xy.csv")
    table.to_csv(path, index=False)
    with pytest.raises((ConfigError, DataError), match=r"^label_column: the one label column of '.*xy\.csv', chosen "
                                          r"\(label_column, --label-column\) when several columns are named as labels, "
                                          r"got none chosen among 'y', 'class'$"):
        preflight(config(path, algorithm="sgd", cpus=1, batch_size=8, steps=2))
    with pytest.raises(DataError, match=r"^label_column: .* got none chosen among 'y', 'class'"):
        load_dataset(path)
    shape = RunConfig(dataset=path, label_column="class").data_shape
    assert (shape.n_features, shape.n_classes) == (2, 2)
    assert RunConfig(dataset=path, label_column=" CLASS").data_shape == shape      # case and spaces ignored
    d = load_dataset(path, label_column="class")
    assert sorted(np.concatenate([d.y_train, d.y_test]).tolist()) == sorted(table["class"].tolist())
    with pytest.raises(ConfigError, match=r"^label_column: a column of '.*xy\.csv' \('x', 'y', 'class'\), got 'klass'$"):
        RunConfig(dataset=path, label_column="klass").data_shape    # noqa: B018 - reads the file
    with pytest.raises(ConfigError, match=r"^label_column: unset unless the dataset is a \.csv file .*got 'class'$"):
        RunConfig(dataset="digits", label_column="class")
    with pytest.raises(ConfigError, match=r"^label_column: the name of a column .*, got ''$"):
        RunConfig(dataset=path, label_column="")
    result = run_threads(config(path, algorithm="sgd", cpus=1, batch_size=8, steps=3, label_column="class"))
    assert result.summary["data"]["table"]["label"] == "class" and result.summary["data"]["table"]["features"] == ["x", "y"]
    assert result.summary["config"]["label_column"] == "class"
    assert len(wb.predict(result, table)) == 60                         # its features by name, the label ignored


@pytest.mark.parametrize("order", ["filtered", "sorted"])
def test_a_written_row_index_in_any_order_is_dropped_by_the_run_and_by_predict(folder, order):
    """`DataFrame.to_csv` writes the index: after a filter it has gaps, after a sort by class
    it is shuffled (and, kept as a feature, gives the label away). An unnamed first column of
    distinct whole numbers >= 0 is that index, dropped in training and in reading new rows."""
    rng = np.random.default_rng(3)
    full = pd.DataFrame(rng.normal(size=(80, 3)), columns=["a", "b", "c"])
    full["label"] = (full["a"] > 0).astype(int)
    frame = full[full.b > -1.0] if order == "filtered" else full.sort_values("label")
    path = folder / f"{order}.csv"
    frame.to_csv(path)                                                  # the index too: pandas' default
    table = files.data_record(str(path))["table"]
    assert table["features"] == ["a", "b", "c"] and table["dropped"] == "Unnamed: 0"
    assert list(files.read_rows(str(path)).columns) == ["a", "b", "c", "label"]     # predict's reading agrees
    result = wb.run(config(str(path), algorithm="sgd", cpus=1, batch_size=8, steps=3, out=str(folder / order)),
                    cluster="threads", progress=False)
    assert len(wb.predict(result, pd.DataFrame({"a": [0.1], "b": [0.2], "c": [0.3]}))) == 1   # no index asked for
    # the CLI's answers keep the rows' own index, so they can be matched back to them
    from workbench.apps.cli import main
    assert main(["predict", str(folder / order), str(path), "--out", str(folder / f"{order}-said.csv")]) == 0
    said = pd.read_csv(folder / f"{order}-said.csv", index_col=0)
    assert said.index.tolist() == frame.index.tolist() and list(said.columns) == ["a", "b", "c", "label", "predicted"]
    assert said["predicted"].tolist() == list(wb.predict(result, frame[["a", "b", "c"]]))
    frame.reset_index(drop=True).assign(**{"Unnamed: 0": 1})[["Unnamed: 0", "a", "b", "c", "label"]].to_csv(
        folder / "same.csv", index=False)                               # not distinct: not an index, a feature
    assert files.data_record(str(folder / "same.csv"))["table"]["features"] == ["Unnamed: 0", "a", "b", "c"]


def test_an_integer_regression_target_is_refused_not_trained_as_classes(folder):
    """Prices up to 249,000 as labels made 249,001 classes (2.2M parameters, a 19 MB summary).
    More classes (largest label + 1) than rows is refused in one line saying what it looks
    like; a stated n_classes is the user's word and is kept."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    price = 200000 + 1000 * rng.integers(0, 50, 60)
    pd.DataFrame(X, columns=["a", "b", "c"]).assign(price=price).to_csv(folder / "prices.csv", index=False)
    path = str(folder / "prices.csv")
    says = (r"^y: class labels 0\.\.n_classes-1 with fewer classes than rows, got 249,001 classes \(largest label "
            r"249,000 \+ 1; \d+ distinct labels\) for 60 rows in '.*': this looks like a regression target or ids")
    with pytest.raises((ConfigError, DataError), match=says):
        preflight(config(path, algorithm="sgd", cpus=1, batch_size=8, steps=2))
    with pytest.raises(DataError, match=says.replace("'.*'", "'arrays'")):
        Dataset.from_arrays(X, price)
    assert Dataset.from_arrays(X[:4], [0, 1, 0, 1], n_classes=5).n_classes == 5   # stated: kept


def test_unused_integer_labels_are_said_before_the_run_and_the_class_line_is_bounded(folder):
    """Labels 10, 20, 30 are kept as the user's own (predict answers in them), so 31 classes:
    preflight says in one line how many have no row and how to number them; the per-class
    line names the classes with test rows only."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = 10 * (1 + rng.integers(0, 3, 60))
    pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=y).to_csv(folder / "tens.csv", index=False)
    cfg = config(str(folder / "tens.csv"), algorithm="sgd", cpus=1, batch_size=8, steps=3)
    warnings = [w for w in preflight(cfg) if "without a single row" in w]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "leave 28 of its 31 classes (largest label + 1) without a single row (3 used: 10, 20, 30)" in warnings[0]
    result = run_threads(cfg)
    assert set(wb.predict(result, X)) <= set(range(31))
    from workbench.learning import per_class_text
    line = per_class_text(result.summary["per_class"])
    assert line.endswith("; 28 classes without test rows") and line.count(" of ") == 3
    many = [{"class": str(k), "rows": 1, "accuracy": 1.0} for k in range(500)]
    assert len(per_class_text(many)) < 400 and per_class_text(many).endswith("480 more classes (summary['per_class'])")


def test_a_feature_beyond_float32_and_a_nan_are_named_by_the_users_own_row(folder):
    """Features train as float32: 1e39 is finite in float64 but inf there, and was blamed on the
    model (with numpy's overflow warning). It is refused as the data's, by the file's row; and
    an array given in Python names its NaN by the row of X as given, not of the split."""
    import warnings
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(60, 3)), columns=["a", "b", "c"]).assign(label=np.arange(60) % 2)
    frame.loc[3, "a"] = 1e39
    path = str(folder / "big.csv")
    frame.to_csv(path, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                  # no overflow warning on the way
        with pytest.raises((ConfigError, DataError), match=r"^X: finite numbers \(float32\), got 1e\+39 at row 3, column 0 of "
                                              r"'.*big\.csv'$"):
            preflight(config(path, batch_size=8, steps=2))
        X = rng.normal(size=(50, 4))
        X[4, 2] = -1e300
        with pytest.raises(DataError, match=r"^X: finite numbers \(float32\), got -1e\+300 at row 4, column 2 of 'arrays'$"):
            Dataset.from_arrays(X, np.arange(50) % 3)
    X = rng.normal(size=(50, 4))
    X[19, 1] = np.nan                                                   # row 19 of X, wherever the split puts it
    with pytest.raises(DataError, match=r"^X: finite numbers \(float32\), got nan at row 19, column 1 of 'arrays'$"):
        Dataset.from_arrays(X, np.arange(50) % 3)
    with pytest.raises(DataError, match=r"^X_test: finite numbers \(float32\), got nan at row 0, column 1"):
        Dataset.from_arrays(X[20:], np.arange(30) % 3, X[19:21], np.array([0, 1]))   # a test set given: its own rows


def test_a_label_column_with_every_row_its_own_class_is_refused_names_or_numbers(tmp_path):
    """200 distinct class names in 200 rows trained silently to accuracy 0 (integer labels past
    the rows were refused as ids, names never): each row its own class is ids, not classes."""
    import numpy as np
    import pandas as pd

    from workbench.data import load_dataset
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.standard_normal((200, 3)), columns=["a", "b", "c"])
    for labels in ([f"id-{i}" for i in range(200)], list(range(200))):
        frame["label"] = labels
        path = tmp_path / f"uniq-{type(labels[0]).__name__}.csv"
        frame.to_csv(path, index=False)
        with pytest.raises(DataError, match=r"^y: class labels that several rows share, got 200 distinct labels "
                                            r"for 200 rows"):
            load_dataset(str(path))
    frame["label"] = [f"c{i % 3}" for i in range(200)]
    frame.to_csv(tmp_path / "fine.csv", index=False)
    assert load_dataset(str(tmp_path / "fine.csv")).n_classes == 3


def test_a_csv_not_in_utf8_is_told_so(tmp_path):
    """A spreadsheet's Latin-1 export read as "a CSV file with a header row (UnicodeDecodeError...)"."""
    from workbench.data import load_dataset
    path = tmp_path / "latin1.csv"
    path.write_bytes(("café,label\n" + "".join(f"{i},{i % 2}\n" for i in range(20))).encode("latin-1"))
    with pytest.raises(DataError, match=r"^dataset: a CSV file in UTF-8 \(its byte 3 is not: "):
        load_dataset(str(path))


def test_predicts_agreement_says_how_sure_it_is():
    """`predict` on rows with labels said "agree with its y on 45 of 50 rows (0.90)" and nothing of
    how little 50 rows tell; it now gives the share's 95% Wilson interval, as the run's line does.
    Oracle: the closed form (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)."""
    import math

    from workbench.apps.predict import _agreement
    truth = np.arange(50) % 10
    said = truth.copy()
    said[:5] = (said[:5] + 1) % 10          # 45 of 50 agree
    z, p, n = 1.959963984540054, 0.9, 50
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert _agreement(truth, said, "its y") == (f"the predictions agree with its y on 45 of 50 rows (0.90; 95%: "
                                                f"{mid - half:.2f}-{mid + half:.2f} from 50 rows)")
    many = np.zeros(100_000, dtype=int)     # an interval narrower than +-0.01: the share alone
    assert _agreement(many, many, "its y") == "the predictions agree with its y on 100000 of 100000 rows (1.00)"
