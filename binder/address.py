"""The repository's public address, set in one place.

    python binder/address.py OWNER/NAME     # or: make address REPO=OWNER/NAME
    python binder/address.py --check        # every link agrees with pyproject.toml (a test runs it)

The address of record is pyproject.toml's `[project.urls] Source` (https://github.com/OWNER/NAME).
Each file whose links need it (pyproject.toml's other URLs, the README's Binder badge,
CITATION.cff's repository-code) carries it written out, since a rendered README cannot
read a setting; this script rewrites it in all of them at once, and `--check` finds any
that disagrees. The Binder badge opens JupyterLab on the quickstart with binder/'s
environment once the repository is public at that address.
"""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ("pyproject.toml", "README.md", "CITATION.cff")
NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


def current(root: Path = ROOT) -> str:
    """OWNER/NAME from pyproject.toml's Source URL."""
    source = tomllib.loads((root / "pyproject.toml").read_text())["project"]["urls"]["Source"]
    return source.removeprefix("https://github.com/").strip("/")


def _patterns(repo: str) -> list[str]:
    return [f"github.com/{repo}", f"mybinder.org/v2/gh/{repo}/"]


def disagreements(root: Path = ROOT) -> list[str]:
    """Files that link to the repository at another address than pyproject's Source."""
    repo = current(root)
    found = []
    for name in FILES:
        text = (root / name).read_text()
        for link in re.findall(r"(?:github\.com|mybinder\.org/v2/gh)/([\w.-]+/[\w.-]+)", text):
            if link.removesuffix(".git") != repo and link.split("/")[0] == repo.split("/")[0]:
                found.append(f"{name}: {link}")
        if not any(p in text for p in _patterns(repo)):
            found.append(f"{name}: no link to {repo}")
    return found


def set_address(repo: str, root: Path = ROOT) -> list[str]:
    """Write OWNER/NAME into every file of FILES; the files changed."""
    if not NAME.match(repo):
        raise SystemExit(f"error: address: OWNER/NAME as on GitHub (letters, digits, -, ., _), got {repo!r}")
    old = current(root)
    changed = []
    for name in FILES:
        path = root / name
        text = path.read_text()
        new = text
        for before, after in zip(_patterns(old), _patterns(repo)):
            new = new.replace(before, after)
        if new != text:
            path.write_text(new)
            changed.append(name)
    return changed


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        bad = disagreements()
        print("\n".join(bad) if bad else f"every link points to {current()}")
        return 1 if bad else 0
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    changed = set_address(argv[0])
    print(f"address {argv[0]} written into {', '.join(changed) or 'nothing (already set)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
