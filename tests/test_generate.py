"""Text from a trained language model (`wb.generate`, `maths.sampling`, the CLI's `generate`),
and a run directory that keeps its trained model (params.npy).

Oracles: a model whose next-token scores are a known bigram table, so the sampler's draws
must follow softmax(scores / temperature) and temperature 0 the most likely token; and the
generated language itself (`markov_text`, an order-2 chain whose allowed transitions are
known): a GPT trained on it writes text whose transitions the chain allows far more often
than characters drawn at random do (2.5 of 16 on average).
"""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.config import ConfigError
from workbench.data.text import LANGUAGE
from workbench.maths.sampling import next_token_probs, sample


class Bigram:
    """A stand-in language model: the scores of the next token are row `last token` of a table."""

    def __init__(self, table):
        self.table = np.log(np.asarray(table, dtype=np.float64))

    def logits(self, params, X):
        tok = np.asarray(X, dtype=np.int64)
        return self.table[tok]                     # (B, T, V)


TABLE = [[0.1, 0.6, 0.3], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6]]


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_the_draws_follow_the_models_distribution_at_its_temperature(temperature):
    ids = sample(Bigram(TABLE), np.zeros(1), np.array([0]), 30_000, context=4, temperature=temperature,
                 rng=np.random.default_rng(1))
    prev, nxt = np.concatenate([[0], ids[:-1]]), ids
    for a in range(3):
        want = next_token_probs(np.log(TABLE[a]), temperature)
        seen = nxt[prev == a]
        got = np.bincount(seen, minlength=3) / len(seen)
        sd = np.sqrt(want * (1 - want) / len(seen))
        assert np.all(np.abs(got - want) < 5 * sd), (a, got, want)


def test_temperature_zero_takes_the_most_likely_token_and_a_seed_repeats():
    ids = sample(Bigram(TABLE), np.zeros(1), np.array([0]), 6, context=4, temperature=0)
    assert ids.tolist() == [1, 0, 1, 0, 1, 0]                        # argmax of rows 0 and 1, alternating
    one = sample(Bigram(TABLE), np.zeros(1), np.array([2]), 50, context=4, rng=np.random.default_rng(7))
    two = sample(Bigram(TABLE), np.zeros(1), np.array([2]), 50, context=4, rng=np.random.default_rng(7))
    assert one.tolist() == two.tolist()
    with pytest.raises(ValueError, match="temperature"):
        sample(Bigram(TABLE), np.zeros(1), np.array([0]), 5, context=4, temperature=-1)


def _gpt(steps, out=None):
    return wb.run(wb.RunConfig(algorithm="sgd", model="gpt", dataset="markov_text", optimizer="adamw", lr=0.003,
                               batch_size=32, steps=steps, n_samples=2000, seed=0, out=out),
                  cluster="threads", progress=False)


def _allowed_share(text):
    ok, n = LANGUAGE.allowed(np.array([LANGUAGE.alphabet.index(c) for c in text]))
    return ok / n


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt") / "run"
    return _gpt(200, out=str(out)), out


def test_a_trained_gpt_writes_the_language_it_learned(trained):
    result, _ = trained
    text = wb.generate(result, length=300, seed=1)
    assert len(text) == 300 and set(text) <= set(LANGUAGE.alphabet)
    assert _allowed_share(text) > 0.6                                  # measured 0.77 (loss 0.92 nats)
    untrained = wb.generate(_gpt(1), length=300, seed=1)
    assert _allowed_share(untrained) < 0.35                            # measured 0.19; random: 0.16
    assert wb.generate(result, "the ", length=40, seed=3) == wb.generate(result, "the ", length=40, seed=3)


def test_temperature_zero_is_the_models_own_prediction(trained):
    result, _ = trained
    from workbench.problem import Problem
    model = Problem.from_config(wb.RunConfig.from_dict(result.summary["config"])).model
    text = wb.generate(result, "nt", length=20, temperature=0)
    ids = [LANGUAGE.alphabet.index(c) for c in "nt"]
    for _ in range(20):                                                 # the greedy loop, by predict
        ids.append(int(model.predict(result.params, np.array([ids[-64:]], np.float32))[0, -1]))
    assert text == "".join(LANGUAGE.alphabet[i] for i in ids[2:])


def test_the_run_directory_keeps_the_trained_model(trained):
    result, out = trained
    assert (out / "params.npy").is_file()
    loaded = wb.load(out)
    assert loaded.params.dtype == result.params.dtype and np.array_equal(loaded.params, result.params)
    assert wb.generate(loaded, "the ", length=60, seed=2) == wb.generate(result, "the ", length=60, seed=2)


def test_bad_asks_are_one_line_each(trained, tmp_path):
    result, _ = trained
    with pytest.raises(ConfigError, match=r"^prompt: characters of the training text \(' aeinorstlhducmp'; 'x' is "
                                          r"not one\), got 'xyz'"):
        wb.generate(result, "xyz")
    for kwargs, field in (({"length": 0}, "length"), ({"temperature": -0.5}, "temperature"), ({"prompt": ""}, "prompt"),
                          ({"length": 100_000_000}, "length"), ({"seed": -1}, "seed")):   # 60 s and no end; NumPy's words
        with pytest.raises(ConfigError, match=f"^{field}: "):
            wb.generate(result, **kwargs)
    digits = wb.run(wb.RunConfig(algorithm="sgd", epochs=1, seed=0), cluster="threads", progress=False)
    with pytest.raises(ConfigError, match=r"^result: a language model's run"):
        wb.generate(digits)


def test_a_text_file_run_keeps_its_vocabulary_and_refuses_a_changed_file(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("abcab cabca bcabc " * 40)
    result = wb.run(wb.RunConfig(algorithm="sgd", model="gpt", dataset=str(path), context=16, n_layers=1, d_model=16,
                                 n_heads=2, optimizer="adamw", lr=0.01, batch_size=8, steps=30, seed=0),
                    cluster="threads", progress=False)
    assert result.summary["data"]["vocab"] == " abc"
    assert set(wb.generate(result, "ab", length=30)) <= set(" abc")
    path.write_text("abcab cabca bcabc! " * 40)                         # a character more: other token ids
    with pytest.raises(ConfigError, match=r"^dataset: the text the run was trained on \(its characters have changed"):
        wb.generate(result, "ab")


def test_the_cli_writes_text_and_says_how_much_of_it_the_language_allows(trained, capsys):
    from workbench.apps.cli import main
    _, out = trained
    assert main(["generate", str(out), "--prompt", "the ", "--length", "80", "--seed", "4"]) == 0
    got = capsys.readouterr()
    assert got.out.startswith("the ") and len(got.out.strip("\n")) == 84
    assert "are ones the language allows" in got.err and "characters drawn at random: 0.16" in got.err
    assert main(["generate", str(out), "--prompt", "q"]) == 2
    assert "error: prompt: characters of the training text" in capsys.readouterr().err


def test_a_torch_module_is_asked_of_a_run_that_had_one(trained):
    result, _ = trained
    with pytest.raises(ConfigError, match=r"^result: a run that classifies rows \(a language model writes text"):
        wb.predict(result, np.zeros((2, 64), np.float32))
    with pytest.raises(ConfigError, match=r"^result: a run of a torch.nn.Module .*, got 'gpt'"):
        wb.torch_module(result)


def test_the_report_shows_what_the_model_writes(trained, tmp_path):
    pytest.importorskip("plotly")
    result, out = trained
    page = (out / "report.html").read_text()
    assert "<h2>what it writes</h2>" in page
    assert f"<pre>{wb.generate(result, length=200, seed=0)}</pre>" in page          # markov_text: letters, spaces
    assert "are ones the language allows" in page
    digits = wb.run(wb.RunConfig(algorithm="sgd", epochs=1, seed=0, out=str(tmp_path / "d")), cluster="threads",
                    progress=False)
    assert digits.status == "completed" and "what it writes" not in (tmp_path / "d" / "report.html").read_text()


class BigramLM:
    """A language model of the user's: the next token's scores are row `token` of a V x V
    table (the protocol, plus `logits`)."""

    def __init__(self, n_features, n_classes):
        self.V = n_classes

    def init(self, seed):
        return np.random.default_rng(seed).normal(0, 0.01, self.V * self.V).astype(np.float32)

    def logits(self, params, X):
        return params.reshape(self.V, self.V)[np.asarray(X, dtype=np.int64)]

    def loss_and_grad(self, params, X, y):
        tok, nxt = np.asarray(X, dtype=np.int64).ravel(), np.asarray(y).ravel()
        z = params.reshape(self.V, self.V)[tok].astype(np.float64)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.log(p[np.arange(len(nxt)), nxt]).mean()
        p[np.arange(len(nxt)), nxt] -= 1
        grad = np.zeros((self.V, self.V))
        np.add.at(grad, tok, p / len(nxt))
        return float(loss), grad.ravel().astype(params.dtype)

    def predict(self, params, X):
        return self.logits(params, X).argmax(axis=-1)


def test_a_language_model_of_yours_writes_too():
    result = wb.run(wb.RunConfig(algorithm="sgd", model=BigramLM, dataset="markov_text", n_samples=500, lr=1.0,
                                 batch_size=32, steps=150, seed=0), cluster="threads", progress=False)
    text = wb.generate(result, "th", length=300, seed=0)
    assert len(text) == 300 and set(text) <= set(LANGUAGE.alphabet)
    greedy = wb.generate(result, "th", length=5, temperature=0)
    table = result.params.reshape(16, 16)
    ids = [LANGUAGE.alphabet.index("h")]
    for _ in range(5):
        ids.append(int(table[ids[-1]].argmax()))
    assert greedy == "".join(LANGUAGE.alphabet[i] for i in ids[1:])


def test_a_broken_parameter_file_costs_the_parameters_not_the_run(trained, tmp_path):
    """A run directory's params.npy is mapped, not copied; one that cannot be read leaves the
    run's records loadable (compare, explain) with a warning, and asking for the model says why."""
    import shutil
    _, out = trained
    loaded = wb.load(out)
    assert isinstance(loaded.params, np.memmap) and not loaded.params.flags.writeable
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "params.npy").write_bytes((copy / "params.npy").read_bytes()[:200])       # truncated
    with pytest.warns(UserWarning, match=r"params.npy .*the run loads without its parameters"):
        broken = wb.load(copy)
    assert broken.params is None and broken.summary["steps"] == loaded.summary["steps"]
    with pytest.raises(ConfigError, match=r"^params: a run's final parameters"):
        wb.generate(broken)


class PaddedBigramLM(BigramLM):
    """A language model of yours scoring more tokens than the text has characters (as a
    vocabulary padded to a round size): it trains, since every label is in range."""

    def __init__(self, n_features, n_classes):
        self.V = n_classes + 4


def test_a_model_scoring_more_tokens_than_the_text_has_is_told_so_and_keeps_its_report(tmp_path):
    """Drawn from 20 scores, 4 of them no character of the 16, the text would hold tokens
    that are no character; asking is one line naming the model, and the run's report (which
    shows what a language model writes) is still written."""
    from workbench.api import write_run_report
    result = wb.run(wb.RunConfig(algorithm="sgd", model=PaddedBigramLM, dataset="markov_text", n_samples=200,
                                 lr=0.1, batch_size=8, steps=3, seed=0), cluster="threads", progress=False)
    assert result.summary["status"] == "completed"
    with pytest.raises(ConfigError, match=r"^model: a language model scoring one next token per character of the "
                                          r"text \(16, .*got .*scoring 20"):
        wb.generate(result, "th", length=200, seed=0)
    result.save(tmp_path / "run")
    report = write_run_report(result, tmp_path / "run")
    assert report is None or report.exists()
