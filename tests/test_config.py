"""RunConfig: defaults, validation messages, YAML round trip."""
import math

import pytest

from workbench.config import ALGORITHMS, FIELDS, ConfigError, RunConfig


def test_defaults_are_valid_and_documented():
    cfg = RunConfig()
    assert cfg.algorithm == "sgd" and cfg.dataset == "digits" and cfg.model == "mlp"
    assert cfg.model_hidden == (128,)
    assert RunConfig(model="cnn").model_hidden == (16, 32)


@pytest.mark.parametrize("changes, field, fragment", [
    ({"algorithm": "sgdd"}, "algorithm", "one of"),
    ({"dataset": "imagenet"}, "dataset", "one of"),
    ({"model": "resnet"}, "model", "one of"),
    ({"lr": -0.1}, "lr", "a finite number > 0"),
    ({"lr": math.nan}, "lr", "a finite number > 0"),
    ({"lr": 0}, "lr", "a finite number > 0"),
    ({"tau": 0}, "tau", ">= 1"),
    ({"batch_size": 0}, "batch_size", ">= 1"),
    ({"algorithm": "sync_sgd", "cpus": 4, "batch_size": 3}, "batch_size", "number of workers (4)"),
    ({"warmup": "gradual", "warmup_epochs": 6, "epochs": 5}, "warmup_epochs", "at most epochs"),
    ({"warmup": "gradual", "warmup_epochs": 0}, "warmup_epochs", "> 0"),
    ({"lr_scaling": "cubic"}, "lr_scaling", "'linear'"),
    ({"momentum": 1.0}, "momentum", "[0, 1)"),
    ({"alpha": 1.5}, "alpha", "(0, 1)"),
    ({"gpus": -1}, "gpus", '"auto"'),
    ({"gpus": "many"}, "gpus", '"auto"'),
    ({"hidden": "12,x"}, "hidden", "positive integers"),
    ({"hidden": [0]}, "hidden", "positive integers"),
    ({"model": "cnn", "dataset": "synthetic"}, "model", "image dataset"),
    ({"scheduler": "localhost:8786"}, "scheduler", "tcp://"),
    ({"batch_size": "abc"}, "batch_size", "integer"),
    ({"n_classes": 1}, "n_classes", ">= 2"),
    ({"bogus": 1}, "bogus", "not a RunConfig field"),
])
def test_invalid_values_name_field_allowed_and_value(changes, field, fragment):
    with pytest.raises(ConfigError) as info:
        RunConfig(**changes)
    err = info.value
    assert err.field == field
    assert str(err).startswith(f"{field}: ")
    assert fragment in str(err)
    assert ", got " in str(err)


def test_assignment_is_validated_too():
    cfg = RunConfig()
    cfg.lr = 0.5
    assert cfg.lr == 0.5
    with pytest.raises(ConfigError, match=r"^lr: "):
        cfg.lr = -1.0
    assert cfg.lr == 0.5


def test_yaml_round_trip(tmp_path):
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, hidden="64,32", lr=0.2, warmup="gradual", warmup_epochs=1)
    path = tmp_path / "c.yaml"
    cfg.to_yaml(path)
    assert RunConfig.from_yaml(path) == cfg


def test_dict_keys_may_use_dashes():
    assert RunConfig.from_dict({"batch-size": 64}).batch_size == 64


def test_replace_returns_copy_and_leaves_original():
    cfg = RunConfig()
    new = cfg.replace(lr=0.3)
    assert new.lr == 0.3 and cfg.lr == 0.1


def test_every_algorithm_has_a_description():
    assert "sgd" in ALGORITHMS and all(ALGORITHMS.values())
    assert "algorithm" in FIELDS and "tau" in FIELDS


def test_a_knob_only_its_algorithms_declare_is_refused_with_any_other():
    # the owners come from the declarations (AlgorithmSpec.knobs), not from a list in config
    from workbench.config.registry import with_knob
    from workbench.config.rules import OWNED_KNOBS
    values = {"compression": "topk", "weight_return": "whole", "elastic_sync": "tree_host"}
    assert set(values) == set(OWNED_KNOBS)
    for knob, value in values.items():
        owners = with_knob(knob)
        assert owners and all(getattr(RunConfig(algorithm=a, **{knob: value}), knob) == value for a in owners)
        with pytest.raises(ConfigError, match=rf"^{knob}: \S+ unless algorithm is {' or '.join(owners)} \(.*; "
                                              r"async_sgd has none\), got "):
            RunConfig(algorithm="async_sgd", **{knob: value})


def test_every_algorithm_knobs_description_names_exactly_the_algorithms_that_read_it(capsys):
    # the audit: tau's description left out dpsgd, which reads it (its registry entry declares it);
    # the list is now the registry's (`read_by`), and `run --help` and `schema` show it as it is
    import json
    import re

    from workbench.apps.cli import main
    from workbench.config.registry import specs, with_knob
    knobs = sorted({k for s in specs().values() for k in s.knobs})
    assert "tau" in knobs and "dpsgd" in with_knob("tau")
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)["properties"]
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    for knob in knobs:
        desc = RunConfig.model_fields[knob].description
        lead = desc.split(": ", 1)[0]
        named = re.split(r", | and ", lead)
        assert named == list(with_knob(knob)), (knob, lead)
        assert schema[knob]["description"] == desc
        assert " ".join(desc.split()) in helptext, knob   # argparse's wrapping undone


def test_an_algorithm_registered_after_import_is_named_in_its_knobs_help(capsys):
    """The knobs' lists of algorithms were built when RunConfig was defined: a plug-in that
    registers an algorithm later was missing from them. They are read from the registry when
    shown: `field_help`, `run --help`, `schema`, and the error of a knob its algorithm lacks."""
    import json

    from workbench.apps.cli import main
    from workbench.config import field_help
    from workbench.config.registry import AlgorithmSpec, register, specs, unregister
    toy = AlgorithmSpec(name="toy_plugin", summary="a test's own algorithm", impl="sync:SyncSGD", sync=True,
                        knobs=("tau", "compression"))
    before = {k: field_help(k) for k in ("tau", "compression", "round_size")}
    register(toy)
    try:
        assert "toy_plugin" in specs()
        for knob in ("tau", "compression"):
            assert field_help(knob).split(": ", 1)[0].endswith(" and toy_plugin"), field_help(knob)
            assert field_help(knob).split(": ", 1)[1] == before[knob].split(": ", 1)[1]   # the text itself as it was
        assert field_help("round_size") == before["round_size"]    # a knob it does not read: unchanged
        assert main(["schema"]) == 0
        schema = json.loads(capsys.readouterr().out)["properties"]
        assert schema["tau"]["description"] == field_help("tau")
        with pytest.raises(SystemExit):
            main(["run", "--help"])
        helptext = " ".join(capsys.readouterr().out.split())
        assert " ".join(field_help("tau").split()) in helptext
        assert RunConfig(algorithm="toy_plugin", compression="topk").compression == "topk"
        with pytest.raises(ConfigError, match=r"^compression: none unless algorithm is .* or toy_plugin \("):
            RunConfig(algorithm="async_sgd", compression="topk")
    finally:
        unregister("toy_plugin")
    assert "toy_plugin" not in specs()
    assert {k: field_help(k) for k in before} == before
