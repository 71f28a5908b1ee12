"""Reading a config file: small, hand-written YAML, refused before parsing when it is
anything else (too big, too deep, anchors and aliases, a key given twice)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from .values import ConfigError

# Config files are small, hand-written mappings: anything else is refused before parsing.
YAML_MAX_BYTES = 1 << 20
YAML_MAX_DEPTH = 32   # a config is two levels deep (a mapping of lists); composing 10^5 levels took minutes
_OPENERS = re.compile(r"[\[{](?:\s*[\[{]){" + str(YAML_MAX_DEPTH) + "}")   # more brackets opened in a row than that


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int):
        self.key, self.line = key, line


def _unique_key_loader() -> Any:
    """A yaml.SafeLoader that refuses a mapping giving one key twice (PyYAML keeps the
    last silently: `lr: 0.1` then `lr: 10` would run with 10)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    if key in seen:
                        raise _DuplicateKey(key, key_node.start_mark.line + 1)
                    seen.add(key)
                except TypeError:   # an unhashable key: construct_mapping itself says so
                    pass
            return super().construct_mapping(node, deep=deep)
    return UniqueKeyLoader


def read_yaml(path: str | Path, field: str = "config", max_bytes: int = YAML_MAX_BYTES) -> Any:
    """Parse a small YAML file safely; every failure is one ConfigError naming `field`.

    Refused: anything but a regular file (a FIFO would block, /dev/zero never ends), more
    than `max_bytes`, text that is not UTF-8, anchors and aliases (a 1 KB alias bomb
    expands to billions of nodes), and invalid YAML.
    """
    import stat
    text_path = os.fspath(path) if isinstance(path, (str, Path)) else path
    if not isinstance(text_path, str) or "\x00" in text_path:
        raise ConfigError(field, "a path to a YAML file", text_path)
    try:
        st = os.stat(text_path)
    except OSError as exc:
        raise ConfigError(field, f"a readable YAML file ({exc.strerror or exc.__class__.__name__})", text_path) from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(field, "a regular YAML file (not a device, FIFO or directory)", text_path)
    if st.st_size > max_bytes:
        raise ConfigError(field, f"a YAML file of at most {max_bytes // 1024} KiB ({st.st_size:,} bytes)", text_path)
    try:
        with open(text_path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(field, f"a readable YAML file ({exc.strerror or exc.__class__.__name__})", text_path) from None
    if len(raw) > max_bytes:
        raise ConfigError(field, f"a YAML file of at most {max_bytes // 1024} KiB", text_path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, f"UTF-8 text (byte {exc.start} is not)", text_path) from None
    deep = f"YAML nested at most {YAML_MAX_DEPTH} levels deep"
    if _OPENERS.search(text):   # `[[[[...`: refused before PyYAML's scanner looks ahead through it
        raise ConfigError(field, deep, text_path)
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ConfigError(field, "YAML without anchors or aliases (& and *)", text_path)
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > YAML_MAX_DEPTH:   # refused as the parser meets it, before the composer recurses
                    raise ConfigError(field, deep, text_path)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        return yaml.load(text, Loader=_unique_key_loader())   # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        raise ConfigError(field, f"YAML with each key once ({dup.key!r} is given twice, line {dup.line})",
                          text_path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(field, f"valid YAML ({exc.__class__.__name__}{where})", text_path) from None
    except RecursionError:
        raise ConfigError(field, "YAML nested less deeply", text_path) from None
