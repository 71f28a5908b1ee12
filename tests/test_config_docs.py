"""RunConfig's field descriptions and groups: the one source for --help, the dashboard
and the JSON schema."""
from __future__ import annotations

import json
import typing

import pytest

from workbench.config import (
    FIELD_GROUPS,
    FIELDS,
    GROUP_TITLES,
    ConfigError,
    RunConfig,
    config_schema,
    field_group,
    field_help,
)


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_is_described(name):
    text = field_help(name)
    assert len(text) >= 30, f"{name}: description too short to teach anything: {text!r}"
    assert text.endswith("."), name


@pytest.mark.parametrize("name", FIELDS)
def test_literal_fields_name_every_allowed_value(name):
    annotation = RunConfig.model_fields[name].annotation
    literals = [a for a in (typing.get_args(annotation) or (annotation,)) if typing.get_origin(a) is typing.Literal]
    for lit in literals:
        for value in typing.get_args(lit):
            assert value in field_help(name), f"{name}: description does not mention {value!r}"


def test_groups_cover_every_field_once_in_declaration_order():
    grouped = [n for names in FIELD_GROUPS.values() for n in names]
    assert grouped == list(FIELDS)   # the groups follow the class's own order
    assert set(FIELD_GROUPS) == set(GROUP_TITLES)
    assert field_group("tau") == "algorithm" and field_group("cpus") == "where"


def test_unknown_field_names_what_is_known():
    with pytest.raises(ConfigError, match="not_a_field"):
        field_group("not_a_field")
    with pytest.raises(ConfigError, match="batch_size"):
        field_help("not_a_field")


def test_schema_carries_descriptions_groups_and_defaults():
    schema = json.loads(json.dumps(config_schema()))   # JSON-safe
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(FIELDS)
    for name, prop in schema["properties"].items():
        assert prop["description"] == field_help(name)
        assert prop["group"] == field_group(name)
        assert prop["default"] == RunConfig().to_dict()[name]
    assert schema["groups"]["where"]["title"] == GROUP_TITLES["where"]


def test_defaults_unchanged_by_descriptions():
    # The descriptions must not have changed any default (the public contract).
    assert RunConfig().to_dict() == {
        "algorithm": "sgd", "dataset": "digits", "model": "mlp", "model_args": None, "hidden": None, "n_samples": 10000, "test_fraction": 0.2, "val_fraction": 0.0, "label_column": None,
        "n_features": 64, "n_classes": 10, "n_layers": 2, "d_model": 64, "n_heads": 4, "context": 64,
        "standardize": False, "data_dir": None, "download": False, "cpus": 2, "gpus": 0,
        "scheduler": None, "comm": "auto", "latency_ms": 0.0, "bandwidth_gbps": 0.0, "blas_threads": 1, "elastic": False, "min_workers": None,
        "simulate": False,
        "device": None,
        "cpu_device": "core", "partitions": None, "calibration": None, "network": None, "timing_model": None, "jitter": 0.0, "fail_worker": None,
        "join_worker": None, "batch_size": 32, "accumulate": 1,
        "lr": 0.1, "lr_scaling": "none", "base_batch": 32, "warmup": "none", "warmup_epochs": 0.0,
        "decay": "none", "momentum": 0.9, "nesterov": False, "weight_decay": 0.0, "optimizer": "sgd",
            "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "trust_coefficient": 0.001, "grad_clip": 0.0, "tau": 1, "alpha": None, "elastic_sync": "ring",
        "trainers": 2, "round_size": 50, "tournament_size": 256, "trainer_lrs": None, "lr_spread": 1.0,
        "exchange_state": False, "chunk_layers": "auto", "weight_return": "chunks", "split": "equal",
        "post_local_epoch": 1.0, "outer_lr": 0.7, "outer_momentum": 0.9, "compression": "none",
        "compression_ratio": 0.01, "compression_rank": 4, "compression_levels": 16, "topology": "ring",
        "error_feedback": True,
        "epochs": 5.0, "steps": None,
        "eval_every": None, "early_stop": None, "seed": 0, "out": None, "checkpoint_every": "60s", "checkpoint_keep": 2,
        "out_private": True}
