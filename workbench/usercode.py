"""Code the user brings: naming a model (`"package.module:Name"`), the Python objects a
session hands over, and shipping them to the processes that train.

A run names its model by a string, so a config stays plain data (YAML, CLI flags, the
run's `config.yaml`). A built-in model is a short name ("mlp"); any other is
`"package.module:Name"`, imported where it is needed. An object given in Python (a class,
a factory function, an instance: `RunConfig(model=TanhNet)`) is kept in this process under
the name `spec_of` gives it (`module:qualname`; an instance gets `@<hash>` after it, since
importing its name would not give it back), and travels with the run:

- code in an installed package (site-packages, the standard library, the workbench itself)
  is imported by name where it runs, as NumPy is: the workers must have it installed;
- any other code (your module, a notebook cell, a test file) is shipped by value
  (cloudpickle) to every process of the run, local Dask workers, an external cluster's
  workers and the dashboard's simulation process alike: the workers need only the
  installed packages it imports.

This module sits at the bottom of the layers with `config`: it imports nothing of the
workbench (config validation reads it), and cloudpickle only when something is shipped.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import linecache
import marshal
import os
import re
import sys
import sysconfig
import threading
import types
from typing import Any

__all__ = ["UserCodeError", "code_record", "dumps", "is_factory", "is_spec", "lookup", "receive", "resolve", "shipment", "spec_of",
           "token_of"]

# package.module:Name (dots inside either part; a class nested in a function shows as
# `f.<locals>.Net`, a name only the session that made it can look up); `@hex` marks an instance.
_SPEC = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*:[A-Za-z_<][\w.<>]*(?:@[0-9a-f]{8,64})?")
_lock = threading.Lock()
_OBJECTS: dict[str, tuple[Any, str]] = {}     # spec -> (object, token: a hash of its code and state)
_SHIPPED: dict[str, bytes] = {}                 # spec -> its shipment's bytes, made once


class UserCodeError(ValueError):
    """A model name that cannot be resolved; `str()` is what is allowed (config adds the field)."""

    def __init__(self, allowed: str, value: Any):
        self.allowed, self.value = allowed, value
        super().__init__(allowed)


def is_spec(text: Any) -> bool:
    """Whether `text` has the form of a model name `package.module:Name`.

    >>> is_spec("mymodels:TanhNet"), is_spec("a.b.c:Outer.Inner"), is_spec("mlp"), is_spec("x:")
    (True, True, False, False)
    """
    return isinstance(text, str) and len(text) <= 300 and _SPEC.fullmatch(text) is not None


def is_factory(obj: Any) -> bool:
    """A class, a function or a `functools.partial` (called with n_features, n_classes and
    `model_args`), not an instance (used as it is).

    >>> import functools
    >>> is_factory(dict), is_factory(len), is_factory(functools.partial(dict, a=1)), is_factory({})
    (True, True, True, False)
    """
    import functools
    return isinstance(obj, (type, functools.partial)) or inspect.isroutine(obj)


def _code_of(obj: Any) -> Any:
    """The class or function whose module holds `obj`'s code."""
    if isinstance(obj, type) or inspect.isroutine(obj):
        return obj
    func = getattr(obj, "func", None)      # a functools.partial
    return func if func is not None and is_factory(func) else type(obj)


def spec_of(obj: Any) -> str:
    """The name a Python object goes by in a config, keeping the object in this process.

    A class or a function: `module:qualname` (the same object again gives the same name;
    a new definition of it, say a notebook cell run again, replaces the old one). Anything
    else (an instance, a partial): `module:qualname@<hash of its pickled state>`, since
    importing the name would not give it back.
    """
    code = _code_of(obj)
    spec = f"{code.__module__}:{code.__qualname__}"
    state = ""
    if code is not obj:
        try:
            pickled = _dumps(obj)
        except Exception as exc:   # a lock, an open file, a socket: no worker could be sent it
            raise UserCodeError(f"an instance that pickles, to be sent to every worker ({type(obj).__name__} "
                                f"raised {type(exc).__name__}: {_first_line(exc)}); or give its class or a "
                                "factory, so each worker builds its own", f"{spec}@...") from None
        state = _digest(pickled)[:12]
        spec += "@" + state
    if not is_spec(spec):
        raise UserCodeError("a class, a function or an object with a module and a name "
                            "(package.module:Name)", spec)
    token = code_record(obj)["sha256"][:16] + state
    with _lock:
        held = _OBJECTS.get(spec)
        if held is None or held[0] is not obj:
            # another object under a name already held (a class defined again, in a cell run
            # again or made by type()): a new generation, so nothing built from the old is reused
            generation = int(held[1].rpartition(".")[2]) + 1 if held is not None else 0
            _OBJECTS[spec] = (obj, f"{token}.{generation}")
            _SHIPPED.pop(spec, None)
    return spec


def lookup(spec: str) -> Any | None:
    """The object this process holds under `spec` (None when it holds none)."""
    with _lock:
        entry = _OBJECTS.get(spec)
    return None if entry is None else entry[0]


def token_of(spec: str) -> str:
    """What tells two models of one name apart in this process: the hash of the code (and,
    for an instance, the state) of the object held under `spec`; "" when none is held."""
    with _lock:
        entry = _OBJECTS.get(spec)
    return "" if entry is None else entry[1]


def resolve(spec: str) -> Any:
    """The object `spec` names: the one this process holds, else imported.

    Raises:
        UserCodeError: the module does not import (its error is named), has no such
            name, or the name is an instance of another session.
    """
    held = lookup(spec)
    if held is not None:
        return held
    if not is_spec(spec):
        raise UserCodeError("a built-in model or package.module:Name", spec)
    module_name, _, rest = spec.partition(":")
    if "@" in rest:
        raise UserCodeError(f"an instance given in Python in this session ({rest.split('@')[0]} objects are "
                            "not rebuilt from their name: pass it again, or name its class)", spec)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UserCodeError(f"package.module:Name of an importable module (No module named {exc.name!r}; "
                            "is its folder on sys.path?)", spec) from None
    except Exception as exc:
        raise UserCodeError(f"package.module:Name of a module that imports (importing {module_name} raised "
                            f"{type(exc).__name__}: {_first_line(exc)})", spec) from None
    obj: Any = module
    for part in rest.split("."):
        if not hasattr(obj, part):
            where = (": a model defined in a notebook or a script's __main__ is that session's only; move it "
                     "into a module file to use it from another session" if module_name == "__main__" else "")
            raise UserCodeError(f"package.module:Name of a name the module defines ({module_name} has no "
                                f"{rest}{where})", spec)
        obj = getattr(obj, part)
    return obj


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


# ------------------------------------------------------------------------------ what the code is
def _installed(module: Any) -> bool:
    """Whether a module comes from an installed package (site-packages, the standard
    library) or is the workbench: code every worker imports by name."""
    name = getattr(module, "__name__", "")
    if name.split(".")[0] == "workbench" or name in sys.builtin_module_names:
        return True
    path = getattr(module, "__file__", None)
    if not path:
        return False                      # __main__ in a notebook, an interactive session
    path = os.path.realpath(path)
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    return any(path.startswith(os.path.realpath(r) + os.sep) for r in roots if r)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_record(obj: Any) -> dict[str, Any]:
    """What a model's code is, for a run's summary: its module, the module's file and that
    file's SHA-256 (`hash_of` "file"); code with no file of its own (a notebook cell) is
    hashed from its source ("source") or, failing that, its pickled bytes ("pickle").
    `shipped`: whether a run sends it to the workers by value (not an installed package).
    """
    target = _code_of(obj)
    module_name = getattr(target, "__module__", None) or "?"
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None) if module is not None and module_name != "__main__" else None
    record: dict[str, Any] = {"module": module_name, "file": path, "shipped": not _installed(module)}
    if path and os.path.isfile(path):
        with open(path, "rb") as f:
            record.update(sha256=_digest(f.read()), hash_of="file")
        return record
    try:
        record.update(sha256=_digest(inspect.getsource(target).encode()), hash_of="source")
    except (OSError, TypeError):
        record.update(sha256=_digest(_dumps(target)), hash_of="pickle")
    return record


# ------------------------------------------------------------------------------ shipping
def dumps(obj: Any, code: Any = None) -> bytes:
    """`obj` pickled with the code of `code` (default `obj`) by value wherever that code is
    not an installed package (cloudpickle; the module and its package's other local
    modules), so a process without the user's files can load it."""
    return _dumps(obj, code)


def _dumps(obj: Any, code: Any = None) -> bytes:
    import cloudpickle
    target = _code_of(obj if code is None else code)
    top = (getattr(target, "__module__", None) or "").split(".")[0]
    local = [m for name, m in list(sys.modules.items())
             if m is not None and (name == top or name.startswith(top + ".")) and name != "__main__"
             and not _installed(m)]
    registered = set(cloudpickle.list_registry_pickle_by_value())
    added = [m for m in local if m.__name__ not in registered]
    for m in added:
        cloudpickle.register_pickle_by_value(m)
    try:
        with io.BytesIO() as out:
            _named_pickler(cloudpickle)(out, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
            return out.getvalue()
    finally:
        for m in added:
            cloudpickle.unregister_pickle_by_value(m)


_PICKLER: list[type] = []


def _named_pickler(cloudpickle: Any) -> type:
    """cloudpickle's Pickler, keeping the file name of the code it ships by value.

    cloudpickle writes every such code object's file as `<dynamic-code>`, so an error in a
    researcher's model on a worker read `File "<dynamic-code>", line 23` with no line shown.
    Here each code object travels whole (`marshal`: the workers run this Python, as code
    shipped by value requires anyway) with its file's lines, which the receiving process
    puts in its `linecache`: a traceback there names the user's file and shows the line,
    a notebook cell's and a file on another host's too.
    """
    if not _PICKLER:
        class NamedPickler(cloudpickle.Pickler):
            def __init__(self, *args: Any, **kwargs: Any):
                super().__init__(*args, **kwargs)
                self._lines: dict[str, tuple[str, ...]] = {}

            def reducer_override(self, obj: Any) -> Any:
                if isinstance(obj, types.CodeType):
                    name = obj.co_filename
                    if name not in self._lines:   # one tuple a file: pickle's memo writes it once
                        self._lines[name] = tuple(linecache.getlines(name)) if name[:1] != "<" else ()
                    return _code_of_file, (marshal.dumps(obj), name, self._lines[name])
                return super().reducer_override(obj)
        _PICKLER.append(NamedPickler)
    return _PICKLER[0]


def _code_of_file(data: bytes, name: str, lines: tuple[str, ...]) -> types.CodeType:
    """A shipped code object, its file's lines registered in this process's `linecache`
    (an entry with no modification time, as IPython registers its cells: kept as given)."""
    if lines:
        linecache.cache[name] = (sum(map(len, lines)), None, list(lines), name)
    return marshal.loads(data)   # noqa: S302 - our own client's shipment of the user's code


def shipment(spec: str) -> tuple[str, str, bytes] | None:
    """(spec, token, bytes) of the model `spec` names, for another process to `receive`:
    the object this process holds under it, or the one its name imports when that code is
    not an installed package. None for a built-in name, or code the workers import by name."""
    with _lock:
        entry = _OBJECTS.get(spec)
        data = _SHIPPED.get(spec)
    if entry is None:
        if not is_spec(spec) or "@" in spec:
            return None
        obj = resolve(spec)
        record = code_record(obj)
        if not record["shipped"]:
            return None
        entry = (obj, record["sha256"][:16])
    if data is None:
        data = _dumps(entry[0])
        with _lock:
            _SHIPPED[spec] = data
    return spec, entry[1], data


def receive(item: tuple[str, str, bytes] | None) -> None:
    """Hold the object of a `shipment` in this process under its name (a no-op for None,
    or when the same one is held already)."""
    if item is None:
        return
    spec, token, data = item
    with _lock:
        held = _OBJECTS.get(spec)
    if held is not None and held[1] == token:
        return
    import pickle
    obj = pickle.loads(data)   # noqa: S301 - our own client's shipment of the user's code
    with _lock:
        _OBJECTS[spec] = (obj, token)


def reach(spec: str, item: tuple[str, str, bytes] | None) -> str | None:
    """In a worker, before its run starts: load `item` (a shipment) or import `spec`; None
    when the model is there, else what went wrong, in one line (the client refuses the run)."""
    try:
        if item is not None:
            receive(item)
        else:
            resolve(spec)
    except UserCodeError as exc:
        return exc.allowed
    except Exception as exc:          # unpickling the shipment: a package its code imports is missing
        return f"{type(exc).__name__}: {_first_line(exc)}"
    return None
