"""A field's value: the one-line `ConfigError`, strict parsing of numbers, flags and
text (pydantic's lax mode would turn true into 1), the shared ranges, and the parsers of
the fields written as text (names, RANK@SECONDS lists, intervals, model arguments)."""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError


def match_name(field: str, value: Any, names: tuple[str, ...]) -> str:
    """The entry of `names` that `value` spells, ignoring case, spaces, dashes and
    underscores; else ConfigError naming `field` and listing `names`.

    >>> from workbench.config import SIM_DEVICES, SIM_NETWORKS, SIM_TIMING_MODELS
    >>> match_name("network", "infiniband-hdr", SIM_NETWORKS), match_name("timing_model", "ResNet50", SIM_TIMING_MODELS)
    ('InfiniBand HDR', 'resnet50')
    >>> match_name("device", "tpu", SIM_DEVICES)
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: device: one of k80, p100, v100, a100, h100, h200, core, knl, power8, xeon, got 'tpu'
    """
    def key(s: str) -> str:
        return re.sub(r"[\s_-]+", "", s).lower()
    if isinstance(value, str) and len(value) <= 100:
        for name in names:
            if key(name) == key(value):
                return name
    raise ConfigError(field, "one of " + ", ".join(names), value)


_FAILURE = re.compile(r"\s*([0-9]+)\s*@\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*")


def parse_failures(text: str, field: str = "fail_worker") -> dict[int, float]:
    """`fail_worker` (or `join_worker`) text, RANK@SECONDS[,RANK@SECONDS...], as {rank: virtual seconds}.

    >>> parse_failures("3@12.5, 0@40")
    {3: 12.5, 0: 40.0}
    >>> parse_failures("3@soon")
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: fail_worker: RANK@SECONDS, separated by commas (e.g. 3@12.5,7@40), got '3@soon'
    """
    allowed = "RANK@SECONDS, separated by commas (e.g. 3@12.5,7@40)"
    if not isinstance(text, str) or len(text) > 100_000:
        raise ConfigError(field, allowed, text)
    out: dict[int, float] = {}
    for part in text.split(","):
        m = _FAILURE.fullmatch(part)
        if m is None or len(m.group(1)) > 16 or not math.isfinite(float(m.group(2))):
            raise ConfigError(field, allowed, text)
        rank = int(m.group(1))
        if rank in out:
            raise ConfigError(field, f"each rank at most once (rank {rank} is listed twice)", text)
        out[rank] = float(m.group(2))
    return out


_INTERVAL = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(s|m|h|min)\s*")
CHECKPOINT_ALLOWED = ("a whole number of steps >= 1, a wall-clock interval such as 30s, 5m or 1h (at least 1s), "
                      "or none")


def parse_interval(value: Any) -> int | float | None:
    """`checkpoint_every` as steps (an int), seconds of wall clock (a float) or None (off).

    >>> parse_interval(500), parse_interval("500"), parse_interval("90s"), parse_interval("5m"), parse_interval("none")
    (500, 500, 90.0, 300.0, None)
    >>> parse_interval("0.1s")
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: checkpoint_every: a whole number of steps >= 1, a wall-clock interval such as 30s, 5m or 1h (at least 1s), or none, got '0.1s'
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "off")):
        return None
    if isinstance(value, str) and _INT_TEXT.fullmatch(value) and len(value.strip()) <= 16:
        value = int(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if not 1 <= int(value) <= MAX_WHOLE:
            raise ConfigError("checkpoint_every", CHECKPOINT_ALLOWED, value)
        return int(value)
    m = _INTERVAL.fullmatch(value) if isinstance(value, str) and len(value) <= 40 else None
    if m is None:
        raise ConfigError("checkpoint_every", CHECKPOINT_ALLOWED, value)
    seconds = float(m.group(1)) * {"s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    if not 1 <= seconds <= 1e9:
        raise ConfigError("checkpoint_every", CHECKPOINT_ALLOWED, value)
    return seconds




class ConfigError(ValueError):
    """A bad value for one config field; `str()` is `<field>: <allowed>, got <value>`."""

    def __init__(self, field: str, allowed: str, value: Any):
        self.field, self.allowed, self.value = field, allowed, value
        super().__init__(f"{field}: {allowed}, got {short_repr(value)}")


class ConfigTypeError(ConfigError, TypeError):
    """A value of the wrong type where a config was expected (`wb.run(None)`): both a
    `ConfigError` and a `TypeError`, with the same one-line message."""


# Named as callers import it (tracebacks and doctests say workbench.config.ConfigError).
ConfigError.__module__ = ConfigTypeError.__module__ = "workbench.config"


def short_repr(value: Any, limit: int = 120) -> str:
    """`repr(value)` cut to about `limit` characters, never walking more of `value` than
    it shows (a YAML alias bomb expands to billions of elements: a full repr never ends).

    >>> short_repr([[1, 2, 3]] * 1000, limit=30)
    '[[1, 2, 3], [1, 2, 3], [1, 2, ... (cut)'
    >>> short_repr("x" * 5)
    "'xxxxx'"
    """
    import reprlib
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 8, 8, 6, 6
    r.maxstring, r.maxother, r.maxlong = limit, limit, limit
    text = r.repr(value)
    return text if len(text) <= limit else text[:limit] + "... (cut)"


_ARG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _KeyTwice(Exception):
    """A key a JSON object gives twice (its name in args[0]): `_each_key_once`."""


def _each_key_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a key given twice (at any depth)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _KeyTwice(key)
        out[key] = value
    return out


def parse_model_args(v: Any) -> dict[str, Any] | None:
    """`model_args` as a dict of keyword arguments: a mapping (YAML, Python), JSON text, or
    `key=value` pairs separated by commas (each value read as YAML: numbers, true/false,
    lists in brackets); None or blank for none. Values must be plain data (saved with the run).

    >>> parse_model_args("width=64, act=tanh, sizes=[3, 4]")
    {'width': 64, 'act': 'tanh', 'sizes': [3, 4]}
    >>> parse_model_args('{"width": 64}')
    {'width': 64}
    >>> parse_model_args("k=1,k=2")
    Traceback (most recent call last):
    ...
    ValueError: keyword arguments: a mapping, JSON {"width": 64} or width=64,act=tanh, each key once (k is given twice)
    >>> parse_model_args('{"k": 1, "k": 2}')
    Traceback (most recent call last):
    ...
    ValueError: keyword arguments: a mapping, JSON {"width": 64} or width=64,act=tanh, each key once (k is given twice)
    >>> parse_model_args("64")
    Traceback (most recent call last):
    ...
    ValueError: keyword arguments: a mapping, JSON {"width": 64} or width=64,act=tanh
    """
    allowed = 'keyword arguments: a mapping, JSON {"width": 64} or width=64,act=tanh'
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    if isinstance(v, str):
        text = v.strip()
        if len(text) > 10_000:
            raise ValueError(allowed)
        if text.startswith("{"):
            import json
            try:
                v = json.loads(text, object_pairs_hook=_each_key_once)
            except _KeyTwice as exc:   # JSON's own reading took the last of {"k": 1, "k": 2} without a word
                raise ValueError(f"{allowed}, each key once ({exc.args[0]} is given twice)") from None
            except ValueError:
                raise ValueError(allowed) from None
        else:
            out: dict[str, Any] = {}
            for part in re.split(r",(?![^\[]*\])", text):      # commas inside [...] belong to a list
                key, eq, value = part.partition("=")
                if not eq or not _ARG_KEY.fullmatch(key.strip()):
                    raise ValueError(allowed)
                if not value.strip():   # `k=` is a slip, not an empty text (write k="" for that)
                    raise ValueError(f"{allowed}, each with a value ({key.strip()}= has none; k=\"\" for empty text)")
                if key.strip() in out:   # `k=1,k=2` took the last without a word
                    raise ValueError(f"{allowed}, each key once ({key.strip()} is given twice)")
                try:
                    out[key.strip()] = yaml.safe_load(value.strip())
                except yaml.YAMLError:
                    raise ValueError(allowed) from None
            v = out
    if not isinstance(v, dict) or not all(isinstance(k, str) and _ARG_KEY.fullmatch(k) for k in v):
        raise ValueError(allowed)
    import json
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        raise ValueError(allowed + " (plain values: numbers, text, true/false, lists, mappings)") from None
    return dict(v)


# The models' default widths, in one place: RunConfig.model_hidden and maths.models read it.
DEFAULT_HIDDEN: dict[str, tuple[int, ...]] = {"mlp": (128,), "cnn": (16, 32)}
# The GPT's default shape, in one place (RunConfig's fields and maths.gpt read it): a 2-layer
# character-level decoder a 2-core laptop trains in minutes (~0.1 M parameters, 64-token context).
DEFAULT_GPT: dict[str, int] = {"n_layers": 2, "d_model": 64, "n_heads": 4, "context": 64}
_INT_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")


# The largest whole number any count, size or seed may be: a step number travels as a
# float64 in the step records (exact to 2**53), and nothing a run counts comes near it.
# A larger one (`--steps 99999999999999999999999`, a 400-digit YAML integer) is refused
# here with the field's one line, not met later as an OverflowError.
MAX_WHOLE = 10**15


class TooLarge(ValueError):
    """A whole number beyond `MAX_WHOLE` (`to_config_error` names the field's range)."""


TooLarge.__module__ = "workbench.config"


def strict_int(v: Any, allowed: str = "a whole number") -> Any:
    """`v` as an int when it is one (or its decimal text); never from a bool or a float,
    and never beyond +-`MAX_WHOLE` (`TooLarge`).

    >>> strict_int("12"), strict_int(None)
    (12, None)
    >>> strict_int(True)
    Traceback (most recent call last):
    ...
    ValueError: a whole number: an integer such as 32 (not true/false, not a decimal like 2.5)
    >>> strict_int("9" * 400)
    Traceback (most recent call last):
    ...
    workbench.config.TooLarge: a whole number: at most 10^15
    """
    if v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool)):
        if v is not None and abs(int(v)) > MAX_WHOLE:
            raise TooLarge(f"{allowed}: at most 10^15")
        return v if v is None else int(v)
    if isinstance(v, str) and _INT_TEXT.fullmatch(v):
        if len(v.strip().lstrip("+-").lstrip("0")) > 16 or abs(int(v)) > MAX_WHOLE:   # never int() of 10^6 digits
            raise TooLarge(f"{allowed}: at most 10^15")
        return int(v)
    raise ValueError(f"{allowed}: an integer such as 32 (not true/false, not a decimal like 2.5)")


def strict_float(v: Any, allowed: str = "a number") -> Any:
    """`v` as a float when it is a real number (or its text); never from a bool."""
    if v is None or (isinstance(v, numbers.Real) and not isinstance(v, bool)):
        return v if v is None else float(v)
    if isinstance(v, str) and len(v) <= 60:
        try:
            return float(v)
        except ValueError:
            pass
    raise ValueError(f"{allowed} (not true/false)")


def strict_bool(v: Any) -> bool:
    """`v` when it is a bool, or true/false text (any case); never from 1, 0 or other text."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ValueError("true or false")


def _wrong_type(parse: Any) -> Any:
    """A before-validator running `parse`, its refusal raised as a `wrong_type` error (its
    own text; a field whose `Allowed` says `says_type` puts its allowed text first)."""
    def check(v: Any) -> Any:
        try:
            return parse(v)
        except TooLarge as exc:
            raise PydanticCustomError("too_large", str(exc)) from None
        except ValueError as exc:
            raise PydanticCustomError("wrong_type", str(exc)) from None
    return BeforeValidator(check)


@dataclass(frozen=True)
class Allowed:
    """A field's allowed values in words: the `<what is allowed>` of its one-line error
    when a value breaks the bounds its `Field(ge=..., lt=...)` states (or a check beside
    them). `says_type`: a value of the wrong type says this text too, "<text> (not true/false)"
    (the communication-efficient knobs' wording; the others say "a number" or "a whole number")."""

    text: str
    says_type: bool = False




# Strict parsing. Pydantic's lax mode turns true into 1 and 2.7 into 2 (or 3.0 into 3)
# without a word; a config that says `batch_size: true` is a mistake to report. Text stays
# accepted: CLI flags and widgets hand values over as strings. (Written after a field's
# Field(...) bounds so that the JSON schema states them as minimum / maximum.)
WHOLE = _wrong_type(strict_int)
NUMBER = _wrong_type(strict_float)
Flag = Annotated[bool, _wrong_type(strict_bool)]
# The ranges several fields share (each field's own are written at the field).
WholeFrom0 = Annotated[int, Field(ge=0), WHOLE, Allowed("a whole number >= 0")]
WholeFrom1 = Annotated[int, Field(ge=1), WHOLE, Allowed("a whole number >= 1")]
WholeFrom1OrUnset = Annotated[int | None, Field(ge=1), WHOLE, Allowed("a whole number >= 1, or unset")]
FinitePositive = Annotated[float, Field(gt=0, allow_inf_nan=False), NUMBER, Allowed("a finite number > 0")]
FiniteFrom0 = Annotated[float, Field(ge=0, allow_inf_nan=False), NUMBER, Allowed("a finite number >= 0")]
FractionBelow1 = Annotated[float, Field(ge=0, lt=1), NUMBER, Allowed("a number in [0, 1)")]


SCHEDULER_SCHEMES = ("tcp", "tls")   # tls: with the user's Dask TLS settings (execution.cluster.scheduler_security)


def check_scheduler_address(address: Any) -> str:
    """Raise ConfigError("scheduler", ...) unless `address` looks like tcp://HOST:PORT (or tls://).

    >>> check_scheduler_address("tcp://127.0.0.1:8786")
    'tcp://127.0.0.1:8786'
    >>> check_scheduler_address("tcp://h:99999")
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: scheduler: an address like tcp://HOST:PORT with a port in 1-65535, got 'tcp://h:99999'
    >>> check_scheduler_address("tcp://127.0.0.1:8786/")
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: scheduler: an address like tcp://HOST:PORT, with nothing after the port (Dask takes no trailing /: tcp://127.0.0.1:8786), got 'tcp://127.0.0.1:8786/'
    """
    from urllib.parse import urlsplit
    if not isinstance(address, str) or len(address) > 300 or any(c.isspace() or ord(c) < 32 for c in address):
        raise ConfigError("scheduler", "an address like tcp://HOST:PORT", address)
    url = urlsplit(address)
    if url.scheme not in SCHEDULER_SCHEMES:
        raise ConfigError("scheduler", f"an address like tcp://HOST:PORT (scheme {' or '.join(SCHEDULER_SCHEMES)}; "
                          f"{url.scheme or 'none'}:// is not supported)", address)
    try:
        port = url.port
    except ValueError:
        port = -1
    if url.path == "/" and not url.query and not url.fragment and url.hostname and port and 1 <= port <= 65535:
        raise ConfigError("scheduler", f"an address like tcp://HOST:PORT, with nothing after the port (Dask takes no "
                          f"trailing /: {address[:-1]})", address)
    if not url.hostname or port is None or not 1 <= port <= 65535 or url.path or url.query or url.fragment:
        raise ConfigError("scheduler", "an address like tcp://HOST:PORT with a port in 1-65535", address)
    return address


# pydantic's error types for a value outside a field's bounds: reported with its `Allowed`
_OUT_OF_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number",
                  "outside_allowed")


def _field_allowed(fields: dict[str, FieldInfo], field: str) -> Allowed | None:
    """The `Allowed` marker on `field` of `fields`, None when it has none."""
    info = fields.get(field)
    return next((m for m in (info.metadata if info else ()) if isinstance(m, Allowed)), None)


def _allowed(message: str) -> str:
    # Pydantic prefixes messages of validator errors with "Value error, ".
    return message.removeprefix("Value error, ")


def to_config_error(exc: ValidationError, data: dict[str, Any], fields: dict[str, FieldInfo]) -> ConfigError:
    """Turn pydantic's first error into our `<field>: <allowed>, got <value>` form (`fields`:
    the model's, whose `Allowed` markers word the bounds)."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
    if err["type"] == "extra_forbidden":
        field = loc[0] if loc else "config"
        return ConfigError(field, f"not a RunConfig field (known: {', '.join(fields)})", data.get(field))
    ctx_err = err.get("ctx", {}).get("error")
    if isinstance(ctx_err, ConfigError):
        return ctx_err
    field = loc[0] if loc else "config"
    value = data.get(field, err.get("input"))
    marker = _field_allowed(fields, field)
    if err["type"] == "literal_error":
        allowed = "one of " + err["ctx"]["expected"]
    elif marker is not None and err["type"] in _OUT_OF_BOUNDS:
        allowed = marker.text
    elif err["type"] == "too_large":
        allowed = f"{marker.text if marker is not None else 'a whole number'} (at most 10^15)"
    elif marker is not None and marker.says_type and err["type"] == "wrong_type":
        allowed = f"{marker.text} (not true/false)"
    else:
        allowed = _allowed(err["msg"])
    return ConfigError(field, allowed, value)
