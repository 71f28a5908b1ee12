"""The fields' groups and help: the groups the `# ---` comments in `RunConfig` mark (each
field names its own), its descriptions and its JSON schema, which the CLI's help and the
dashboard's control panel read."""
from __future__ import annotations

from typing import Any

from . import FIELDS, KNOB_TEXTS, RunConfig, knob_help
from .values import ConfigError

# The groups the `# ---` comments in RunConfig mark; each field states its own
# (`json_schema_extra={"group": ...}`) and FIELD_GROUPS is read from the fields. The CLI's
# help and the dashboard's control panel both lay the knobs out this way (keys match the
# dashboard's).
GROUP_TITLES: dict[str, str] = {
    "what": "what to train",
    "where": "where to train",
    "simulation": "simulated cluster",
    "optimisation": "optimisation",
    "algorithm": "algorithm knobs",
    "length": "how long, how often, reproducibility",
}


def _groups_of_fields() -> dict[str, tuple[str, ...]]:
    """{group: its fields in declaration order}, read from each field's `json_schema_extra`."""
    groups: dict[str, list[str]] = {g: [] for g in GROUP_TITLES}
    for name, info in RunConfig.model_fields.items():
        group = (info.json_schema_extra or {}).get("group") if isinstance(info.json_schema_extra, dict) else None
        if group not in groups:
            raise RuntimeError(f"RunConfig.{name}: json_schema_extra must name its group, one of "
                               f"{', '.join(GROUP_TITLES)} (got {group!r})")
        groups[group].append(name)
    return {g: tuple(names) for g, names in groups.items()}


FIELD_GROUPS: dict[str, tuple[str, ...]] = _groups_of_fields()


def field_group(name: str) -> str:
    """The group key (a key of `GROUP_TITLES`) of a RunConfig field.

    >>> field_group("tau"), GROUP_TITLES[field_group("lr")]
    ('algorithm', 'optimisation')
    """
    for group, names in FIELD_GROUPS.items():
        if name in names:
            return group
    raise ConfigError("field", f"a RunConfig field (known: {', '.join(FIELDS)})", name)


def field_help(name: str) -> str:
    """The description of a RunConfig field: what it means, its unit and allowed values. An
    algorithm knob's (`config.read_by`) names the algorithms the registry says read it now,
    one registered after the import (a plug-in) included.

    >>> field_help("batch_size").split(" (")[0]
    'GLOBAL minibatch size in examples, summed over all workers'
    """
    if name not in RunConfig.model_fields:
        raise ConfigError("field", f"a RunConfig field (known: {', '.join(FIELDS)})", name)
    if name in KNOB_TEXTS:
        return knob_help(name)
    return RunConfig.model_fields[name].description or ""


def config_schema() -> dict[str, Any]:
    """RunConfig's JSON schema, each property also carrying its `group` (a GROUP_TITLES key).

    The descriptions are `field_help`'s, so the schema, `--help` and the dashboard's
    tooltips say the same thing.
    """
    schema = RunConfig.model_json_schema()   # each property carries its group (json_schema_extra)
    for name in KNOB_TEXTS:   # the algorithms that read each knob, as registered now
        schema["properties"][name]["description"] = field_help(name)
    schema["groups"] = {g: {"title": GROUP_TITLES[g], "fields": list(names)} for g, names in FIELD_GROUPS.items()}
    return schema
