"""Execute lesson notebooks in quick mode for the documentation site (`make docs` calls it).

    python docs/execute_lessons.py notebooks/easgd_family.ipynb [...] --into docs/_lessons

Each notebook runs under papermill with `quick=True` and its runs written to a temporary
folder (removed afterwards), in notebooks/ as its working directory, as `make lab` would
run it. Two cells are added to the executed copy, both only for the site:

* first, a note saying that this page is a quick-mode execution, when and where it ran
  (date, machine, load), and how to run the full lesson;
* a hidden cell (tag `remove-cell`) that makes plotly render each figure as HTML that
  calls the plotly.js the site serves once (docs/conf.py), instead of embedding 4.8 MB of
  plotly.js in every notebook or loading it from a CDN.

papermill's injected parameters cell is hidden too (the note says what it set), and the
widgets' saved state is dropped (the page shows their text). A
notebook that fails leaves no page behind and makes the command exit 1.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

RENDERER = """\
import re as _re

import plotly.io as _pio


class _SiteRenderer(_pio.base_renderers.MimetypeRenderer):
    # the site loads plotly.js once, at the end of the page (docs/conf.py): each figure is its
    # div and a newPlot call that waits for the page to load
    def to_mimebundle(self, fig_dict):
        html = _pio.to_html(fig_dict, include_plotlyjs=False, full_html=False)
        return {"text/html": _on_load(html)}


def _on_load(html):
    html = _re.sub(r"(<script[^>]*>)", r'\\1window.addEventListener("load", function () {', html, count=1)
    head, end, tail = html.rpartition("</script>")
    return head + "});" + end + tail


_pio.renderers["workbench-docs"] = _SiteRenderer()
_pio.renderers.default = "workbench-docs"
"""


def _machine() -> str:
    cores = os.cpu_count() or 1
    return f"{platform.machine()} Linux, {cores} cores" if sys.platform == "linux" else f"{platform.platform()}, {cores} cores"


def execute(notebook: Path, into: Path) -> float:
    """Run one notebook quick into `into/<name>.ipynb`; the seconds it took."""
    import nbformat
    import papermill

    into.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(notebook, as_version=4)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    note = nbformat.v4.new_markdown_cell(
        f"```{{note}}\nThis page is `{notebook.name}` executed in **quick mode** (`quick=True`) for the "
        f"documentation on {when}, on {_machine()} (load average {load:.1f} before it). Quick mode "
        f"is a smaller version of the lesson; the full one runs with `quick=False`, the default, "
        f"from `make lab` or `python -m workbench lessons DIR`. Timings here are this machine's.\n```")
    hidden = nbformat.v4.new_code_cell(RENDERER, metadata={"tags": ["remove-cell"]})
    nb.cells[:0] = [note, hidden]
    target = into / notebook.name
    partial = into / f".{notebook.stem}.running.ipynb"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"wb-docs-{notebook.stem}-") as out, \
            tempfile.TemporaryDirectory() as staging:
        source = Path(staging) / notebook.name
        nbformat.write(nb, source)
        try:
            papermill.execute_notebook(str(source), str(partial), parameters={"quick": True, "out_dir": out},
                                       kernel_name="python3", cwd=str(notebook.parent), progress_bar=False)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    executed = nbformat.read(partial, as_version=4)
    # no widget state: the page shows the widgets' text (docs/conf.py), and the dashboard's
    # state would carry plotly.js (5 MB) into the page
    executed.metadata.pop("widgets", None)
    for cell in executed.cells:       # and no widget views: without their state they would show only their repr
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs
                            if "application/vnd.jupyter.widget-view+json" not in o.get("data", {})]
    for cell in executed.cells:
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            cell.metadata["tags"] = [*tags, "remove-cell"]
    nbformat.write(executed, partial)
    partial.replace(target)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--into", type=Path, default=Path(__file__).resolve().parent / "_lessons")
    args = parser.parse_args(argv)
    failed = []
    for path in args.notebooks:
        try:
            seconds = execute(path.resolve(), args.into)
            print(f"{path.stem}: executed in {seconds:.0f} s -> {args.into / path.name}", flush=True)
        except Exception as exc:      # papermill's error names the cell; go on with the others
            failed.append(path.stem)
            print(f"{path.stem}: FAILED ({type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]})",
                  file=sys.stderr, flush=True)
    if failed:
        print(f"error: lessons that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
