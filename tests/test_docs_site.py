"""The documentation site builds (`make docs` builds it whole; this is the fast subset CI runs):
every page of docs/, the lessons as committed (not executed) and the API reference. A
warning in a page or a lesson (a broken link, a toctree entry that does not exist, bad
markup) fails the test; warnings inside docstrings are reported, not failed on (docutils
reads the docstrings as reStructuredText, which they are not always written as)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_site_builds_without_a_broken_page(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    pytest.importorskip("furo")
    out = tmp_path / "html"
    env = {**os.environ, "WB_DOCS_LESSONS": "source"}
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-d", str(tmp_path / "doctrees"),
                           str(ROOT / "docs"), str(out)], capture_output=True, text=True, env=env, timeout=880)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [w for w in proc.stderr.splitlines() if re.search(r"(WARNING|ERROR|CRITICAL)", w)]
    in_docstrings = [w for w in warnings if ":docstring of " in w or "/_api/" in w]
    broken = [w for w in warnings if w not in in_docstrings]
    if in_docstrings:
        print(f"{len(in_docstrings)} docstring warnings (reported, not failed on):\n" + "\n".join(in_docstrings))
    assert not broken, "\n".join(broken)
    pages = {p.relative_to(out).as_posix() for p in out.rglob("*.html")}
    for page in ("index.html", "install.html", "lessons.html", "api.html", "algorithms.html", "simulator.html",
                 "benchmarks.html", "architecture.html", "_api/workbench.api.html"):
        assert page in pages, page
    lessons = {Path(n).stem for n in (ROOT / "notebooks").glob("*.ipynb")}
    assert {p.split("/")[1][:-5] for p in pages if p.startswith("_source_lessons/")} == lessons
    api = (out / "_api" / "workbench.api.html").read_text()
    assert 'id="workbench.api.run"' in api           # autodoc documented wb.run from its docstring
    index = (out / "lessons.html").read_text()
    assert all(f"_source_lessons/{name}.html" in index for name in lessons)   # the toctree found every lesson


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_lesson_executed_for_the_site_draws_its_figures_without_embedding_plotly_js(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("papermill")
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import execute_lessons
    finally:
        sys.path.remove(str(ROOT / "docs"))
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('quick = False\nout_dir = "runs/tiny"', metadata={"tags": ["parameters"]})
    figure = nbformat.v4.new_code_cell("import plotly.graph_objects as go\n"
                                       "go.Figure(go.Scatter(x=[0, 1], y=[1, 0 if quick else 2]))")
    nb.cells = [nbformat.v4.new_markdown_cell("# tiny"), params, figure]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = tmp_path / "tiny.ipynb"
    nbformat.write(nb, source)
    execute_lessons.execute(source, tmp_path / "site")
    done = nbformat.read(tmp_path / "site" / "tiny.ipynb", as_version=4)
    assert "quick mode" in done.cells[0].source and "load average" in done.cells[0].source   # when and where it ran
    hidden = [c for c in done.cells if "remove-cell" in c.metadata.get("tags", [])]
    assert len(hidden) == 2                     # the renderer cell and papermill's injected parameters
    (html,) = [o["data"]["text/html"] for o in done.cells[-1].outputs if "text/html" in o.get("data", {})]
    assert "Plotly.newPlot" in html and '"y":[1,0]' in html.replace(" ", "")    # drawn, in quick mode
    assert 'addEventListener("load"' in html    # after plotly.js, which the site loads at the end of the page
    assert len(html) < 100_000                  # plotly.js (4.8 MB) is served once by the site, not embedded
