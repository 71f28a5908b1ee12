"""Which code a process runs: its Python and the workbench package's own files.

A run's workers must run the client's code: a worker of another release, another checkout
or another Python computes something else (or fails as it unpacks its first task). The
identity is read from the installed files, without importing the package, so that it can
be asked of a worker that cannot import it (standard library only: this module also
travels by value, `execution.cluster.workers_of`).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import re


def code_identity() -> dict[str, str | None]:
    """{"python": "3.11", "workbench": its version, "code": a digest of its .py files};
    workbench and code None where the package is not importable here.

    >>> ident = code_identity()
    >>> ident["python"].count("."), len(ident["code"])
    (1, 12)
    """
    return _identity(_package)


def fresh_identity() -> dict[str, str | None]:
    """`code_identity`, read afresh: what travels by value to a worker that may not import
    workbench (`execution.cluster.workers_of`). The cache, an `lru_cache` object, would be
    pickled by reference, and unpickling it there fails on the very import it was to avoid.

    >>> fresh_identity() == code_identity()
    True
    """
    return _identity(_read_package)


def _identity(read) -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": ".".join(platform.python_version_tuple()[:2]), "workbench": None,
                                  "code": None}
    spec = importlib.util.find_spec("workbench")
    if spec is None or not spec.submodule_search_locations:
        return out
    root = list(spec.submodule_search_locations)[0]
    out["workbench"], out["code"] = read(root)
    return out


@functools.lru_cache(maxsize=4)
def _package(root: str) -> tuple[str | None, str]:
    return _read_package(root)


def _read_package(root: str) -> tuple[str | None, str]:
    """(__version__ as __init__.py states it, sha256 of every .py file's path and bytes)."""
    version = None
    try:
        with open(os.path.join(root, "__init__.py"), encoding="utf-8") as f:
            found = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', f.read(), re.M)
            version = found.group(1) if found else None
    except OSError:
        pass
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    digest.update(f.read())
    return version, digest.hexdigest()[:12]


def differences(mine: dict, theirs: dict) -> list[str]:
    """What in `theirs` differs from `mine`, in words.

    >>> differences({"python": "3.11", "workbench": "0.1.0", "code": "a"}, {"python": "3.12", "workbench": "0.1.0", "code": "b"})
    ['Python 3.12', 'workbench code b']
    >>> differences({"python": "3.11", "workbench": "0.1.0", "code": "a"}, {"python": "3.11", "workbench": None, "code": None})
    ['no workbench']
    """
    if theirs.get("workbench") is None and theirs.get("code") is None:
        return ["no workbench"] + ([f"Python {theirs['python']}"] if theirs.get("python") != mine.get("python") else [])
    out = []
    if theirs.get("python") != mine.get("python"):
        out.append(f"Python {theirs.get('python')}")
    if theirs.get("workbench") != mine.get("workbench"):
        out.append(f"workbench {theirs.get('workbench')}")
    elif theirs.get("code") != mine.get("code"):
        out.append(f"workbench code {theirs.get('code')}")
    return out


def describe(ident: dict) -> str:
    """One identity in words.

    >>> describe({"python": "3.11", "workbench": "0.1.0", "code": "ab12"})
    'workbench 0.1.0 (code ab12), Python 3.11'
    """
    return f"workbench {ident.get('workbench')} (code {ident.get('code')}), Python {ident.get('python')}"
