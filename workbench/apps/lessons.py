"""The lesson notebooks and experiment files, wherever this package was installed from.

In the repository they are the top-level `notebooks/` and `experiments/` folders (the
only copies); a built wheel carries the same files as `workbench/_lessons/notebooks` and
`workbench/_lessons/experiments` (pyproject maps them in). `copy_lessons(DIR)` writes
both into `DIR/notebooks` and `DIR/experiments`, keeping the layout that `reproduce`
expects (an experiment's `notebook:` path is relative to the folder above it).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["lessons_source", "copy_lessons"]

PARTS = ("notebooks", "experiments")
PATTERNS = {"notebooks": ("*.ipynb",), "experiments": ("*.yaml", "*.sh")}


def lessons_source() -> Path:
    """The folder holding `notebooks/` and `experiments/`: the installed package's
    `_lessons`, or, in a source checkout, the repository root."""
    pkg = Path(__file__).resolve().parents[1]   # the workbench package (this file is in workbench/apps)
    for root in (pkg / "_lessons", pkg.parent):
        if all((root / part).is_dir() and any((root / part).glob(PATTERNS[part][0])) for part in PARTS):
            return root
    raise FileNotFoundError(f"no lessons next to {pkg}: reinstall parallel-workbench (the wheel ships them)")


def copy_lessons(dest: str | os.PathLike, overwrite: bool = False) -> list[Path]:
    """Copy the notebooks and experiment files into `dest/notebooks` and `dest/experiments`.

    Args:
        dest: the folder to copy into (created if missing).
        overwrite: replace files that exist already; by default they are kept (your edits
            to a lesson survive a second copy).
    Returns:
        The files written.
    """
    src, out = lessons_source(), Path(dest).expanduser()
    written = []
    for part in PARTS:
        (out / part).mkdir(parents=True, exist_ok=True)
        for pattern in PATTERNS[part]:
            for f in sorted((src / part).glob(pattern)):
                target = out / part / f.name
                if target.exists() and not overwrite:
                    continue
                shutil.copy2(f, target)
                written.append(target)
    return written
