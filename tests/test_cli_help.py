"""`--help` teaches: every flag says what it means and what is allowed, from one source
(the RunConfig field descriptions), grouped as the dashboard groups them; the top level
names every command; `--version` and `schema`."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import workbench
from workbench.apps import cli
from workbench.config import FIELD_GROUPS, FIELDS, GROUP_TITLES, config_schema, field_help

ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "COLUMNS": "100"}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, env=ENV,
                          timeout=120)


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.fixture(scope="module")
def run_help():
    proc = run_cli("run", "--help")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_version_is_the_one_version():
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"parallel-workbench {workbench.__version__} (import package workbench)"


def test_top_level_help_names_every_command_including_reproduce():
    proc = run_cli("--help")
    assert proc.returncode == 0
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == set(cli.COMMANDS)            # the list is the parser's own
    for name, text in cli.COMMANDS.items():
        assert re.search(rf"^  {name}\s+{re.escape(text)}$", proc.stdout, re.M), name
    assert "reproduce" in proc.stdout and "examples:" in proc.stdout
    assert "python -m workbench compare" in proc.stdout


def test_every_field_is_a_flag_with_its_description_in_its_group(run_help):
    flat = _flat(run_help)
    for group, names in FIELD_GROUPS.items():
        start = run_help.index(f"\n{GROUP_TITLES[group]}:\n")
        end = min([run_help.index(f"\n{GROUP_TITLES[g]}:\n") for g in FIELD_GROUPS
                   if run_help.index(f"\n{GROUP_TITLES[g]}:\n") > start] + [run_help.index("\nexamples:")])
        section = _flat(run_help[start:end])
        for name in names:
            assert f"--{name.replace('_', '-')}" in section, (name, group)
            assert _flat(field_help(name)) in section, name   # the description, whole, '%' intact
    assert "20% are held out" in flat
    assert len(FIELDS) == sum(len(n) for n in FIELD_GROUPS.values())


def test_fixed_choices_show_in_the_flag(run_help):
    assert "--comm {auto,shm,dask,nccl}" in run_help
    assert "--lr-scaling {none,linear,sqrt}" in run_help
    assert "--gpus GPUS|auto" in run_help
    assert "Default: 0.1." in _flat(run_help)    # lr's default


def test_run_and_sweep_help_end_with_examples_and_exit_codes(run_help):
    assert "examples:" in run_help and "--warmup gradual" in run_help
    assert "exit codes: 0 completed" in _flat(run_help)
    proc = run_cli("sweep", "--help")
    assert proc.returncode == 0
    assert "examples:" in proc.stdout and "sweep.html" in _flat(proc.stdout)
    for name in FIELDS:
        assert f"--{name.replace('_', '-')}" in proc.stdout


def test_schema_command_prints_the_json_schema():
    proc = run_cli("schema")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(json.dumps(config_schema()))


def test_help_flags_still_validate_through_runconfig():
    # choices are shown, not enforced by argparse: a bad value gets the one-line error
    proc = run_cli("run", "--comm", "carrier-pigeon", "--steps", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: comm: one of 'auto', 'shm', 'dask' or 'nccl'")
