"""Config checks of the seed papers' algorithms (EASGD, LTFB): bad combinations fail before
any worker starts, naming the field, what is allowed and the value."""
import pytest

from workbench.algorithms import REGISTRY
from workbench.config import ConfigError, RunConfig
from workbench.execution.engine import run_threads
from workbench.problem import Problem


@pytest.mark.parametrize("changes, field, fragment", [
    ({"algorithm": "ltfb", "cpus": 3, "trainers": 2}, "trainers", "a divisor of the number of workers (3)"),
    ({"algorithm": "ltfb", "cpus": 2, "trainers": 3}, "trainers", "at most the number of workers (2)"),
    ({"algorithm": "ltfb", "cpus": 2, "trainers": 2, "trainer_lrs": [0.1]}, "trainer_lrs", "one lr per trainer (2"),
    ({"algorithm": "ltfb", "cpus": 2, "lr_spread": 0.5}, "lr_spread", ">= 1"),
    ({"algorithm": "ltfb", "cpus": 2, "round_size": 0}, "round_size", ">= 1"),
    ({"algorithm": "sync_easgd", "tau": 0}, "tau", ">= 1"),
    ({"algorithm": "async_easgd", "alpha": 0.0}, "alpha", "0.9 / workers"),
])
def test_bad_combinations_name_the_field(changes, field, fragment):
    with pytest.raises(ConfigError) as err:
        RunConfig(**changes)
    assert err.value.field == field
    assert fragment in str(err.value)


def test_ltfb_tournament_set_too_big_fails_before_workers_start():
    cfg = RunConfig(algorithm="ltfb", dataset="digits", cpus=2, trainers=2, batch_size=64, steps=2, round_size=1)
    limit = Problem.from_config(cfg).data.n_train // 2 - 32            # each trainer's share minus one batch of 64 / 2
    with pytest.raises(ConfigError) as err:
        run_threads(cfg.replace(tournament_size=limit + 1))
    assert err.value.field == "tournament_size" and f"at most {limit}" in str(err.value)
    assert run_threads(cfg.replace(tournament_size=limit)).status == "completed"


def test_an_unset_tournament_size_takes_what_a_small_datasets_trainers_can_hold_out():
    """500 synthetic rows: 400 training ones, 200 a trainer, a batch of 32 / 2 = 16 kept to
    train on, so 184 at most in its tournament set (the refusal's own bound), not the default 256."""
    import workbench as wb
    from workbench.algorithms.ltfb import trainer_data
    small = dict(algorithm="ltfb", dataset="synthetic", n_samples=500, cpus=2, trainers=2, batch_size=32)
    cfg = RunConfig(**small, steps=3, round_size=1)
    assert cfg.data_shape.n_train == 400 and cfg.tournament_size == 200 - 16 == 184
    assert "tournament_size" not in cfg.model_fields_set              # still the user's to set
    assert [(len(tr), len(tour)) for tr, tour in trainer_data(400, 2, cfg.tournament_size, 0)] == [(16, 184)] * 2
    r = wb.run(cfg, cluster="threads", progress=False)
    said = ("tournament_size 256 (the default) is more than the 184 rows each trainer's 200 training examples can "
            "hold out beside a batch of 16: this run scores its tournaments on 184 and trains each trainer on the "
            "other 16 (set tournament_size to choose)")
    assert r.status == "completed" and said in r.summary["warnings"]
    assert any(e["event"] == "warning" and e["message"] == said for e in r.events)
    with pytest.raises(ConfigError) as err:                         # a value the user set is refused, as before
        RunConfig(**small, tournament_size=256)
    assert err.value.field == "tournament_size" and "at most 184" in str(err.value)
    assert RunConfig(**small, tournament_size=100).tournament_size == 100
    bigger = cfg.replace(n_samples=5000)                             # a copy takes its own data's default
    assert bigger.tournament_size == 256 and "tournament_size" not in bigger.model_fields_set
    assert cfg.replace(batch_size=64).tournament_size == 200 - 32
    assert RunConfig(algorithm="ltfb").tournament_size == 256         # digits: the default fits
    from workbench.execution.preflight import preflight
    assert not any("tournament_size" in w for w in preflight(RunConfig(algorithm="ltfb", cpus=2)))


def test_alpha_defaults_to_point_nine_over_workers():
    assert RunConfig(algorithm="sync_easgd", cpus=4).resolved_alpha(4) == pytest.approx(0.225)
    assert RunConfig(algorithm="sync_easgd", cpus=4, alpha=0.1).resolved_alpha(4) == 0.1


def test_the_papers_algorithms_are_registered():
    assert {"easgd", "async_easgd", "async_measgd", "hogwild_easgd", "sync_easgd", "ltfb"} <= set(REGISTRY)
    assert not REGISTRY["hogwild_easgd"].spans_hosts and REGISTRY["sync_easgd"].needs.collective
    assert REGISTRY["sync_easgd"].sync and not REGISTRY["async_easgd"].sync
