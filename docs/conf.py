"""Sphinx configuration of the documentation site (`make docs`; docs/index.md says what is where).

Sphinx with MyST-NB: the pages are the Markdown files of this folder (read on GitHub as
they are), the lessons are the notebooks of notebooks/ executed in quick mode by
docs/execute_lessons.py into docs/_lessons/ (MyST-NB renders them and never executes),
and the API reference is written from the package's docstrings (autodoc, one page per
module, generated into docs/_api/ at every build, so a new module appears by itself).
Nothing is fetched while building or reading: plotly.js comes from the installed plotly.

WB_DOCS_LESSONS=source renders the notebooks as they are in notebooks/ (no outputs, no
execution): the fast build tests/test_docs_site.py runs to catch a broken page.
"""
from __future__ import annotations

import os
import pkgutil
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))          # the checkout's package, installed or not

import workbench  # noqa: E402

project = "workbench"
author = "the workbench authors"
copyright = "the workbench authors, BSD-3-Clause"
release = version = workbench.__version__

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints", "execute_lessons.py"]
LESSONS_FROM = os.environ.get("WB_DOCS_LESSONS", "executed")   # executed | source
if LESSONS_FROM == "source":
    exclude_patterns.append("_lessons")
else:
    exclude_patterns.append("_source_lessons")

html_theme = "furo"
html_title = f"workbench {version}"
html_static_path = ["_static"]
html_css_files = ["workbench.css"]
html_logo = None
templates_path: list[str] = []

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3               # [text](page.md#a-heading) links, as GitHub makes them
nb_execution_mode = "off"              # the lessons were executed by docs/execute_lessons.py
nb_merge_streams = True
# widgets (the progress bars) have no saved state in a papermill run: show their text instead
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None),
                              ("html", "text/html", 10), ("html", "text/plain", 40)]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_mock_imports = ["cupy", "dask_cuda", "torch", "tensorboardX"]   # optional: never needed to read the docs
default_role = "code"                  # the docstrings' `name` is code, as in the Markdown pages
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# ref.python: `RunConfig` is both workbench.RunConfig and workbench.config.RunConfig (re-exported); either target is right
suppress_warnings = ["myst.header", "misc.highlighting_failure", "ref.python"]

# modules with no API of their own to document (the CLI's entry, pytest's scaffolding, lesson data)
SKIP_MODULES = {"workbench.__main__", "workbench.conftest"}


def _modules() -> list[str]:
    """Every module of the package, in import order of the layers' listing (alphabetical)."""
    names = ["workbench"]
    for info in pkgutil.walk_packages(workbench.__path__, "workbench."):
        if info.name in SKIP_MODULES or info.name.startswith("workbench._lessons"):
            continue
        names.append(info.name)
    return sorted(names)


def _write_api_pages(app) -> None:
    """docs/_api/<module>.md, one automodule page per module, rewritten only when it changed."""
    folder = HERE / "_api"
    folder.mkdir(exist_ok=True)
    wanted = set()
    for name in _modules():
        page = folder / f"{name}.md"
        wanted.add(page.name)
        # autodoc writes reStructuredText, which MyST reads only inside eval-rst
        text = f"# `{name}`\n\n```{{eval-rst}}\n.. automodule:: {name}\n   :members:\n   :show-inheritance:\n```\n"
        if not page.exists() or page.read_text() != text:
            page.write_text(text)
    for stale in folder.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()


def _source_lessons(app) -> None:
    """WB_DOCS_LESSONS=source: the notebooks as committed, copied to docs/_source_lessons/."""
    if LESSONS_FROM != "source":
        return
    folder = HERE / "_source_lessons"
    folder.mkdir(exist_ok=True)
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        target = folder / nb.name
        if not target.exists() or target.read_bytes() != nb.read_bytes():
            shutil.copyfile(nb, target)


def _plotly_js(app) -> None:
    """plotly.js from the installed plotly, once, for the lessons' figures (no network)."""
    import plotly
    source = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    target = HERE / "_static" / "plotly.min.js"
    if source.exists() and (not target.exists() or target.stat().st_size != source.stat().st_size):
        shutil.copyfile(source, target)


def _lesson_scripts(app, pagename, templatename, context, doctree) -> None:
    """Lesson pages load plotly.js (4.8 MB, cached by the browser); the other pages do not."""
    if pagename.startswith(("_lessons/", "_source_lessons/")):
        app.add_js_file("plotly.min.js", priority=400)


def _lessons_toctree(app, docname, source) -> None:
    """The lessons page's toctree: every notebook of the folder this build renders (the
    quickstart first), so a lesson added to notebooks/ appears without editing a page."""
    if docname != "lessons":
        return
    folder = "_source_lessons" if LESSONS_FROM == "source" else "_lessons"
    names = sorted(p.stem for p in (HERE / folder).glob("*.ipynb"))
    names.sort(key=lambda n: n != "quickstart")
    entries = "\n".join(f"{folder}/{n}" for n in names)
    source[0] += f"\n\n```{{toctree}}\n:maxdepth: 1\n:caption: The lessons\n\n{entries}\n```\n"


def setup(app):
    app.connect("source-read", _lessons_toctree)
    app.connect("builder-inited", _write_api_pages)
    app.connect("builder-inited", _source_lessons)
    app.connect("builder-inited", _plotly_js)
    app.connect("html-page-context", _lesson_scripts)
