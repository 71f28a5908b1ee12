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


def test_alpha_defaults_to_point_nine_over_workers():
    assert RunConfig(algorithm="sync_easgd", cpus=4).resolved_alpha(4) == pytest.approx(0.225)
    assert RunConfig(algorithm="sync_easgd", cpus=4, alpha=0.1).resolved_alpha(4) == 0.1


def test_the_papers_algorithms_are_registered():
    assert {"easgd", "async_easgd", "async_measgd", "hogwild_easgd", "sync_easgd", "ltfb"} <= set(REGISTRY)
    assert not REGISTRY["hogwild_easgd"].spans_hosts and REGISTRY["sync_easgd"].needs.collective
    assert REGISTRY["sync_easgd"].sync and not REGISTRY["async_easgd"].sync
