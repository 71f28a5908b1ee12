"""The notebook experience in a real browser: JupyterLab + headless Chromium (Playwright).

Plotly FigureWidgets (anywidget) and ipywidgets most often fail by silently not
rendering; only a browser sees that. These tests

- start JupyterLab on 127.0.0.1 (random port and token, the venv's kernel) in a temp
  dir holding a copy of notebooks/quickstart.ipynb (`quick = False` injected after its
  parameters cell), open it in Debian's Chromium at 1400x900, run all cells, find the
  dashboard (no plot axes before the first run), press Run on its default config
  (sync_sgd on 2 Dask workers), and with BOTH cores kept busy by other processes
  (`busy_cores`, as on Binder or a teaching lab) check that the status line shows the
  start-up phase, then that the live loss plot gains points and the status's step count
  rises at least three times before Stop is pressed; press Stop and check the status
  line says the run stopped (or ended), printing how long it took from the click (and its
  parts, in dashboard-pace.json), that every live figure drew, and that the runs
  tab lists the run with links;
- tick the dashboard's "simulated cluster" toggle (simulate, cpu_device power8, 32 virtual
  workers typed into cpus), press Run and check that the live loss plot grows and the
  status line moves in virtual seconds while the simulation goes, that no Dask cluster
  started, that the time axes say "time (virtual seconds)"; then sweep 1,2,4,8 simulated
  workers from the scaling tab and check its figure (samples per virtual second, every point);
- open a run directory's report.html (from `python -m workbench run`) and check every
  figure drew;
- run a dashboard three times (2, 3, 2 workers), displaying it after each run, and check
  that every display's time breakdown names workers 0 and 1;
- fail on any widget / anywidget load error in the page or the console, on uncaught JS
  exceptions, and if no plotly plot rendered.

Screenshots go to test-artifacts/browser/ (WORKBENCH_TEST_ARTIFACTS overrides the
parent dir); their paths are printed. Setup: `bash .ci/browser-setup.sh` (Debian
chromium, the playwright Python package; never a browser download). Without them the
tests skip and say so. WORKBENCH_BROWSER_NOTEBOOK points the dashboard test at another
notebook (it is copied too, never written).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from browser.chromium import Chromium, page_widget_errors, plots, unavailable, wait_for
from browser.lab import JupyterLab, copy_notebook, kernel_commands

from workbench.ui.liverun import STOP_PROMISE_S

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = Path(os.environ.get("WORKBENCH_BROWSER_NOTEBOOK", REPO / "notebooks" / "quickstart.ipynb"))
ARTIFACTS = Path(os.environ.get("WORKBENCH_TEST_ARTIFACTS", REPO / "test-artifacts")) / "browser"
SETUP_LOG = ARTIFACTS / "setup-failed.txt"      # .ci/browser-setup.sh says here why it could not install

VIEWPORT = {"width": 1400, "height": 900}    # controls and the loss plot share this screen
BUSY_PROCESSES = 2      # CPU-bound processes started beside the test: both cores of the machine busy
MOVING_S = 40           # s: while running, the step count must rise >= MOVES times within this ...
MOVES = 3               # ... and the loss plot gain points, before Stop is pressed
MAX_STATUS_GAP_S = 3.0  # s: the aim for the longest the page's status line goes unchanged while training (reported)
# Other work already on the machine (the 1-minute load average before our busy processes start)
# above this many runnable processes per core before the test's own busy processes, the printed pace
# says the machine was too busy to judge it: such a machine cannot tell the dashboard's pace from its
# own (seen: load 15 -> 3.2 s gaps).
OTHER_LOAD_PER_CORE_MAX = 2.5
OPEN_TIMEOUT = 60       # s: JupyterLab loads, the kernel is idle
DASHBOARD_TIMEOUT = 90  # s: all cells ran, the dashboard's widgets and plots rendered
DATA_TIMEOUT = 90       # s: after Run, the loss plot shows points (a local Dask cluster starts first)
STOP_TIMEOUT = 30       # s: after Stop, the status line says the run ended
DRAW_TIMEOUT = 30       # s: after that, every live figure shows the run's data

LONG_EPOCHS = 3000      # typed into the dashboard: a run of minutes, ended by Stop
SIM_WORKERS = 32        # virtual workers typed into cpus (the default batch of 32: one sample each)
SIM_EPOCHS = 30         # ~1300 steps: a simulation of several seconds here, long enough to watch it move
SIM_SWEEP = "1,2,4,8"   # the simulated sweep's worker counts
SIM_TIMEOUT = 180       # s: a simulated run (or the sweep) ends
SCALING_TITLE = re.compile(r"^(strong|weak) scaling")
# Live figures every run draws into (by title; a figure not found is not checked).
RUN_FIGURES = [re.compile(p, re.I) for p in (r"loss and test accuracy", r"throughput", r"where the time goes",
                                              r"lr actually used")]
LOSS_TITLE = re.compile(r"loss", re.I)
STATUS_RE = re.compile(r"^(ready|starting|running|stopping|stopped|completed|diverged|failed|error|busy|sweep)\b")
ENDED_RE = re.compile(r"^(stopped|completed)\b")
DASH = "[data-wb-dashboard]"     # the output area holding the dashboard (marked once found)


STEP_RE = re.compile(r"\bstep (\d+)/(\d+)")
# In the page: note the time of every change of the dashboard's status line and every redraw
# of its loss plot (a MutationObserver and plotly's afterplot event: no polling of the page).
WATCH_STATUS_JS = """(root) => {
  const el = [...document.querySelectorAll(root + ' .widget-html-content')]
    .find(e => /^(ready|starting|running)/.test(e.textContent.trim()));
  if (!el) return false;
  window.__wbStatus = [[performance.now(), el.textContent.trim()]];
  new MutationObserver(() => window.__wbStatus.push([performance.now(), el.textContent.trim()]))
    .observe(el, {childList: true, subtree: true, characterData: true});
  return true;
}"""
WATCH_LOSS_JS = """(root) => {
  const gd = [...document.querySelectorAll(root + ' .js-plotly-plot')]
    .find(g => /loss/.test((g.querySelector('.gtitle') || {}).textContent || ''));
  if (!gd || !gd.on) return false;
  const points = () => (gd._fullData || []).reduce((n, t) => n + ((t.x && t.x.length) || 0), 0);
  window.__wbLoss = [[performance.now(), points()]];
  gd.on('plotly_afterplot', () => window.__wbLoss.push([performance.now(), points()]));
  return true;
}"""


# ------------------------------------------------------------------------------ fixtures
class BusyProcesses(list):
    """The spinning processes, and the load the machine carried before they started."""

    def __init__(self, procs: list, load_before: float):
        super().__init__(procs)
        self.load_before = load_before

    def too_busy(self) -> str | None:
        """Why timing bounds cannot be judged now (other work beyond OTHER_LOAD_PER_CORE_MAX), else None."""
        cores = os.cpu_count() or 1
        if self.load_before > OTHER_LOAD_PER_CORE_MAX * cores:
            return (f"the machine was too busy to judge the dashboard's pace: load average "
                    f"{self.load_before:.1f} on {cores} cores before the test's own busy processes")
        return None


@pytest.fixture
def busy_cores():
    """BUSY_PROCESSES Python processes spinning on the CPU for the length of the test
    (`procs.load_before`: the load average before they started)."""
    load_before = os.getloadavg()[0]
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
             for _ in range(BUSY_PROCESSES)]
    try:
        yield BusyProcesses(procs, load_before)
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(10)


@pytest.fixture(scope="module")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    return ARTIFACTS


@pytest.fixture
def quickstart() -> Path:
    """The notebook the dashboard test opens (a copy of it: the original is never written)."""
    if not NOTEBOOK.exists():
        shown = NOTEBOOK.relative_to(REPO) if NOTEBOOK.is_relative_to(REPO) else NOTEBOOK
        pytest.skip(f"{shown} does not exist: the browser test opens the quickstart notebook "
                    "(the dashboard in three cells)")
    return NOTEBOOK


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    why = unavailable()
    if why:
        if SETUP_LOG.exists():
            why += f" (.ci/browser-setup.sh: {SETUP_LOG.read_text().strip()})"
        pytest.skip(f"browser tests need headless Chromium and Playwright: {why}")
    with Chromium(tmp_path_factory.mktemp("chromium")) as b:
        yield b


@pytest.fixture
def say(request):
    """Write a line to the terminal even under -q and output capture."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")

    def _say(text: str) -> None:
        if reporter is None or capman is None:  # pragma: no cover
            print(text)
            return
        with capman.global_and_fixture_disabled():
            reporter.write_line(text)
    return _say


def _shot(page, artifacts: Path, name: str, say, **kw) -> Path:
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), timeout=15_000, **kw)
    say(f"screenshot: {path}")
    return path


@contextlib.contextmanager
def _shot_on_failure(page, artifacts: Path, name: str, say):
    """Around a test's work on `page`: a screenshot `name` if it fails (the failure is
    re-raised, not a failed screenshot), and the page closed either way."""
    try:
        yield page
    except BaseException:
        with contextlib.suppress(Exception):
            _shot(page, artifacts, name, say)
        raise
    finally:
        with contextlib.suppress(Exception):
            page.close()


def _shot_whole(page, element, artifacts: Path, name: str, say) -> Path:
    """A screenshot of all of `element` (JupyterLab scrolls inside a fixed-height panel:
    the window is made tall enough for a moment)."""
    size = page.viewport_size
    height = element.evaluate("e => e.getBoundingClientRect().height")
    try:
        page.set_viewport_size({"width": size["width"], "height": int(min(8000, height + 300))})
        page.wait_for_timeout(500)                  # plotly relayouts on resize
        element.evaluate("e => e.scrollIntoView({block: 'start'})")
        return _shot(page, artifacts, name, say)
    finally:
        page.set_viewport_size(size)


# ------------------------------------------------------------------------------ JupyterLab page helpers
# The open notebook panel (window.jupyterapp: LabApp.expose_app_in_browser).
_PANEL = "(() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget; " \
         "return w && w.context && w.context.path === NAME ? w : null; })()"

KERNEL_IDLE_JS = "(name) => { const NAME = name; const w = " + _PANEL + "; " \
                 "const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel; " \
                 "return !!(k && k.status === 'idle'); }"
RUN_ALL_JS = "(name) => { const NAME = name; const w = " + _PANEL + "; if (!w) return false; " \
             "window.jupyterapp.commands.execute('notebook:run-all-cells'); return true; }"
# Per code cell: execution count and error outputs (kernel-side exceptions).
CELLS_JS = "(name) => { const NAME = name; const w = " + _PANEL + "; if (!w) return null; " \
           "const cells = w.content.model.cells; const out = []; " \
           "for (let i = 0; i < cells.length; i++) { const c = cells.get(i); if (c.type !== 'code') continue; " \
           "const errs = c.outputs.toJSON().filter(o => o.output_type === 'error')" \
           ".map(o => o.ename + ': ' + o.evalue); out.push({count: c.executionCount, errors: errs}); } " \
           "return out; }"
STATUS_JS = "(root) => [...document.querySelectorAll(root + ' .widget-html-content')]" \
            ".map(e => e.textContent.trim())"


def _label(text: str) -> re.Pattern:
    """A button's exact text (its icon is CSS generated content, which role names would include)."""
    return re.compile(rf"^\s*{re.escape(text)}\s*$")


def _status(page) -> str:
    texts = page.evaluate(STATUS_JS, DASH)
    return next((t for t in texts if STATUS_RE.match(t)), "")


def _loss_plot(page) -> dict | None:
    found = [p for p in plots(page, DASH) if LOSS_TITLE.search(p["title"])]
    timed = [p for p in found if "time" in p["title"]]
    return (timed or found or [None])[0]


def _has_points(plot: dict | None) -> bool:
    return bool(plot) and (plot["vertices"] >= 2 or plot["markers"] >= 1) and sum(plot["points"]) > 0


def _stateless_hint(page) -> str:
    """Say so if some plotly figures rendered without the state Python gave them."""
    bare = [i for i, p in enumerate(plots(page, DASH)) if not p["template"]]
    if not bare:
        return ""
    return (f"; {len(bare)} dashboard figure(s) (positions {bare}) rendered as plotly's bare default "
            "(no template, no title): their FigureWidget state never reached the frontend model "
            "(edits sent before anywidget finished creating the model are dropped: plotly.py#4933/#4998, "
            "anywidget#803)")


def _check_widget_errors(page, browser, where: str) -> None:
    text = page.locator(".jp-NotebookPanel").first.inner_text(timeout=10_000)
    problems = page_widget_errors(text) + browser.log.widget_errors()
    assert not problems, f"widget errors {where}:\n" + "\n".join(problems[:20]) + \
        f"\n--- console ---\n{browser.log.dump()}"


def _diagnostics(page, browser, lab: JupyterLab, name: str) -> str:
    parts = []
    try:
        parts.append(f"cells: {page.evaluate(CELLS_JS, name)}")
        parts.append(f"status line: {_status(page)!r}")
        parts.append(f"plots: {plots(page, DASH) or plots(page)}")
        outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
        parts.append("outputs:\n" + "\n".join(o[:1500] for o in outputs))
    except Exception as exc:  # the page may be gone
        parts.append(f"(page not readable: {exc})")
    parts.append(f"--- console ---\n{browser.log.dump()}")
    parts.append(f"--- JupyterLab log ---\n{lab.log_tail(3000)}")
    return "\n".join(parts)


def _open_dashboard(page, browser, lab: JupyterLab, nb: Path, say, t0: float):
    """Open `nb` in JupyterLab, run all its cells, wait for the dashboard's figures to
    render; returns (the dashboard's output area, its Run button) as locators."""
    # ---- open the notebook; the kernel starts
    page.goto(lab.url(f"lab/tree/{nb.name}"), wait_until="domcontentloaded")
    page.wait_for_function(KERNEL_IDLE_JS, arg=nb.name, timeout=OPEN_TIMEOUT * 1000, polling=250)
    kernels = kernel_commands(lab)
    assert kernels and all(Path(k[0]).parent.resolve().is_relative_to(Path(sys.prefix).resolve()) for k in kernels), \
        f"the notebook's kernel is not the project's Python ({sys.executable}): {kernels}"
    say(f"JupyterLab open, kernel ({kernels[0][0]}) idle after {time.monotonic() - t0:.1f} s")

    # ---- run all cells; the dashboard renders
    assert page.evaluate(RUN_ALL_JS, nb.name), "the notebook is not the current JupyterLab widget"
    run_button = page.locator(".jp-OutputArea-output button", has_text=_label("Run"))
    idle = {"since": None}

    def button_or_done():
        if run_button.count() and run_button.first.is_visible():
            return "button"
        cells = page.evaluate(CELLS_JS, nb.name) or []
        done = cells and all(c["count"] for c in cells) and page.evaluate(KERNEL_IDLE_JS, nb.name)
        idle["since"] = (idle["since"] or time.monotonic()) if done else None
        return "done" if done and time.monotonic() - idle["since"] > 30 else None
    try:
        found = wait_for(page, button_or_done, DASHBOARD_TIMEOUT, "the dashboard's Run button")
    except TimeoutError as exc:
        found = str(exc)
    if found != "button":
        raise AssertionError(f"no dashboard Run button rendered ({found}; 'done': every cell ran and "
                             f"the kernel is idle):\n" + _diagnostics(page, browser, lab, nb.name))
    assert run_button.count() == 1, f"{run_button.count()} Run buttons in the notebook's outputs"
    run_button.evaluate("b => b.closest('.jp-OutputArea-output').setAttribute('data-wb-dashboard', '1')")

    # every plotly figure of the dashboard has rendered: their number stays put for 3 s
    seen = {"n": -1, "since": time.monotonic()}

    def plots_settled():
        n = sum(1 for p in plots(page, DASH) if p["main_svg"] > 0)
        if n != seen["n"]:
            seen.update(n=n, since=time.monotonic())
        return n > 0 and time.monotonic() - seen["since"] >= 3
    try:
        wait_for(page, plots_settled, DASHBOARD_TIMEOUT, "the dashboard's plotly figures to render")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}:\n{_diagnostics(page, browser, lab, nb.name)}") from None
    return page.locator(DASH), run_button


# ------------------------------------------------------------------------------ tests
@pytest.mark.timeout(420)
def test_quickstart_dashboard_runs_and_stops_in_jupyterlab(quickstart, browser, artifacts, tmp_path, say,
                                                           busy_cores):
    t0 = time.monotonic()
    work = tmp_path / "lab"
    work.mkdir()
    nb = copy_notebook(quickstart, work, parameters={"quick": False})   # quick=True is the headless path

    with JupyterLab(work) as lab:
        page = browser.context.new_page()
        page.set_viewport_size(VIEWPORT)
        with _shot_on_failure(page, artifacts, "99-failure", say):
            dash, run_button = _open_dashboard(page, browser, lab, nb, say, t0)
            stop_button = dash.locator("button", has_text=_label("Stop"))
            rendered = plots(page, DASH)
            assert all(p["template"] for p in rendered), _stateless_hint(page) + f": {rendered}"
            # before the first run: no empty placeholder axes, only the planned lr schedule
            assert _loss_plot(page) is None, f"a loss plot (empty axes) before the first run: {rendered}"
            assert any("lr schedule" in p["title"] for p in rendered), rendered
            wait_for(page, lambda: STATUS_RE.match(_status(page)), 30, "the dashboard's status line")
            cells = page.evaluate(CELLS_JS, nb.name)
            assert not any(c["errors"] for c in cells), f"a cell raised: {cells}"
            _check_widget_errors(page, browser, "after the dashboard loaded")
            # every control explains itself: a tooltip (the field's description) on each labelled input
            untipped = dash.evaluate("""e => [...e.querySelectorAll('.widget-inline-hbox')]
                .filter(w => w.offsetParent !== null && w.querySelector('label'))
                .filter(w => !(w.getAttribute('title') || (w.querySelector('[title]') || {}).title))
                .map(w => w.querySelector('label').textContent)""")
            assert not untipped, f"controls without a tooltip: {untipped}"
            say(f"dashboard rendered after {time.monotonic() - t0:.1f} s: {len(rendered)} plotly plots, "
                f"status {_status(page)!r}")
            dash.evaluate("e => e.scrollIntoView({block: 'start'})")      # controls, preview, Run / Stop
            _shot(page, artifacts, "01-dashboard-loaded", say)

            # ---- a longer run, typed into the epochs control, so that Stop has something to stop
            before = _status(page)
            epochs = dash.locator(".widget-inline-hbox", has=page.locator("label", has_text=_label("epochs")))
            epochs.locator("input").fill(str(LONG_EPOCHS))
            epochs.locator("input").press("Enter")
            after = wait_for(page, lambda: (lambda s: s if s != before and s.startswith("ready") else None)(
                _status(page)), 30, f"the status line to follow epochs={LONG_EPOCHS} (it said {before!r})")
            say(f"epochs set to {LONG_EPOCHS}: {after!r}")

            # ---- warmup (issue 23 item 1): choosing gradual shows warmup_epochs with a default
            # that validates, and Run stays enabled; the long run below warms up gradually
            warmup_epochs = _control(page, dash, "warmup_epochs")
            assert not warmup_epochs.is_visible(), "warmup_epochs is shown while warmup is none"
            _control(page, dash, "warmup").locator("select").select_option("gradual")
            warmup_epochs.wait_for(state="visible", timeout=10_000)
            def warmed():      # the default arrives from the kernel with the control (the status keeps its text)
                value = float(warmup_epochs.locator("input").input_value() or 0)
                return (value, _status(page)) if value > 0 else None
            value, shown = wait_for(page, warmed, 30, "warmup_epochs to get a default")
            say(f"warmup gradual: warmup_epochs shown with {value:g}; {shown!r}")
            assert shown.startswith("ready") and value > 0, (shown, value)
            assert run_button.is_enabled(), "Run is disabled after choosing a gradual warmup"
            warmup_epochs.scroll_into_view_if_needed()
            _shot(page, artifacts, "01-warmup-chosen", say)

            # ---- a negative lr typed in: refused by name in the page, not clamped to a slider's
            # minimum (an lr slider ran -0.1 as 1e-5 with "ready"); then the default again
            _type(page, dash, "lr", -0.1)
            refused = wait_for(page, lambda: (lambda s: s if s.startswith("error") else None)(_status(page)), 30,
                               "the status line to refuse lr -0.1")
            assert refused == "error: lr: a finite number > 0, got -0.1", refused
            assert not run_button.is_enabled(), "Run is enabled with lr -0.1"
            _type(page, dash, "lr", 0.1)
            wait_for(page, lambda: _status(page).startswith("ready"), 30, "the status line to accept lr 0.1 again")

            # ---- Run (both cores busy): start-up is its own phase, then the view moves
            assert _status(page).startswith("ready: sync_sgd"), f"not the parallel default: {_status(page)!r}"
            assert page.evaluate(WATCH_STATUS_JS, DASH), "cannot find the status line to watch"
            run_button.click()
            t_run = time.monotonic()
            starting = wait_for(page, lambda: (lambda s: s if s.startswith(("starting", "running")) else None)(
                _status(page)), 30, "the status line to show the run starting")
            say(f"after Run: {starting!r}")
            if starting.startswith("starting"):
                _shot(page, artifacts, "02-starting", say)
            try:
                loss = wait_for(page, lambda: (lambda p: p if _has_points(p) else None)(_loss_plot(page)),
                                DATA_TIMEOUT, "data points in the live loss plot")
            except TimeoutError as exc:
                raise AssertionError(f"{exc}:\n{_diagnostics(page, browser, lab, nb.name)}") from None
            say(f"loss plot has {loss['vertices']} line vertices / {loss['markers']} markers "
                f"({loss['points']} points in its traces) {time.monotonic() - t_run:.1f} s after Run; "
                f"status {_status(page)!r}")
            loss_el = page.locator(f"{DASH} .js-plotly-plot").filter(has=page.locator(".gtitle", has_text="loss"))
            _shot(page, artifacts, "02-running", say)     # controls and the loss plot on one 1400x900 screen

            # the status's step count rises, and the loss plot gains points, while it runs
            assert page.evaluate(WATCH_LOSS_JS, DASH), "cannot watch the loss plot's redraws"
            t_watch = time.monotonic()

            def progress_so_far():
                log = page.evaluate("() => window.__wbStatus")
                steps = [(t, int(m.group(1))) for t, text in log if (m := STEP_RE.search(text))]
                rises = [b for a, b in zip(steps, steps[1:]) if b[1] > a[1]]
                loss = page.evaluate("() => window.__wbLoss")
                grew = [b for a, b in zip(loss, loss[1:]) if b[1] > a[1]]
                ended = [text for _, text in log if ENDED_RE.match(text)]
                assert not ended, f"the run ended before Stop: {ended[0]!r}"
                return log, steps, rises, grew
            try:
                wait_for(page, lambda: (lambda p: len(p[2]) >= MOVES and len(p[3]) >= MOVES)(progress_so_far()),
                         MOVING_S, f"the step count to rise and the loss plot to grow {MOVES} times")
                page.wait_for_timeout(max(0.0, 8.0 - (time.monotonic() - t_watch)) * 1000)  # 8 s of watching
                log, steps, rises, grew = progress_so_far()
            except (TimeoutError, AssertionError) as exc:
                log, steps, rises, grew = page.evaluate("() => window.__wbStatus"), [], [], []
                raise AssertionError(f"{exc}\nstatus changes in the page: {log[-20:]}\n"
                                     f"loss plot redraws: {page.evaluate('() => window.__wbLoss')[-20:]}\n"
                                     + _diagnostics(page, browser, lab, nb.name)) from None
            running_log = [(t, text) for t, text in log if text.startswith("running")]
            gaps = [(b[0] - a[0]) / 1000 for a, b in zip(running_log, running_log[1:])]
            loss_gaps = [(b[0] - a[0]) / 1000 for a, b in zip(grew, grew[1:])]
            say(f"while running ({BUSY_PROCESSES} busy processes), in the page: {len(rises)} step-count rises "
                f"({steps[0][1] if steps else '-'} -> {steps[-1][1] if steps else '-'}), status line changed every "
                f"{statistics.median(gaps) if gaps else float('nan'):.2f} s (median), at most {max(gaps, default=0):.2f} s "
                f"apart; loss plot grew {len(grew)} times, every {statistics.median(loss_gaps) if loss_gaps else float('nan'):.2f} s "
                f"(median), at most {max(loss_gaps, default=0):.2f} s apart")
            assert len(rises) >= MOVES and len(grew) >= MOVES, (rises, grew)
            # The pace (the longest status gap; 0.5-1.5 s here with both cores busy, 4.0 s once with
            # the first redraws) is printed and kept in dashboard-pace.json, not asserted: a duration
            # on a shared machine is the benchmark's business (`python -m workbench.ui.dashbench`);
            # that a slow redraw never holds the status line up is asserted by events in
            # tests/test_dashboard.py (the status moves while a redraw is stuck).
            busy = busy_cores.too_busy()
            pace = {"busy_processes": BUSY_PROCESSES, "load_before": busy_cores.load_before, "too_busy": busy or None,
                    "status_gap_max_s": max(gaps, default=None), "status_gap_median_s": statistics.median(gaps) if gaps else None,
                    "status_gap_aim_s": MAX_STATUS_GAP_S, "loss_redraw_gap_max_s": max(loss_gaps, default=None)}
            say(f"the longest status gap, {max(gaps, default=0):.2f} s, against the aim of {MAX_STATUS_GAP_S} s"
                + (f" ({busy})" if busy else ""))
            links = dash.locator("a", has_text="Dask dashboard")
            assert links.count() == 1, "no Dask dashboard link in the status area"
            href = links.first.get_attribute("href")
            assert re.match(r"^(https?://127\.0\.0\.1:\d+/status|/.*proxy/\d+/status)$", href or ""), href
            loss_el.first.scroll_into_view_if_needed()
            _shot(page, artifacts, "02-running-moving", say)
            loss_el.first.screenshot(path=str(artifacts / "02-running-loss-plot.png"), timeout=15_000)
            say(f"screenshot: {artifacts / '02-running-loss-plot.png'}")

            # ---- Stop: the run ends as stopped (or has already completed)
            pressed = False
            t_stop = time.monotonic()
            with contextlib.suppress(Exception):
                stop_button.evaluate("b => { b.addEventListener('click', () => { window.__wbStopClick = "
                                     "performance.now(); }, {capture: true}); return true; }")
            if stop_button.is_enabled():
                try:
                    stop_button.click(timeout=5_000)
                    pressed = True
                except Exception:        # the run ended between the check and the click, or Playwright
                    # gave up on a starved page after the click went in (its listener saw it)
                    pressed = bool(page.evaluate("() => window.__wbStopClick != null"))
            try:
                final = wait_for(page, lambda: (lambda s: s if ENDED_RE.match(s) and stop_button.is_disabled()
                                                else None)(_status(page)),
                                 STOP_TIMEOUT, "the status line to say the run stopped or completed")
                # Run comes back once the final redraw and the run's report.html are done
                wait_for(page, lambda: run_button.is_enabled(), STOP_TIMEOUT, "Run to be enabled again")
            except TimeoutError as exc:
                raise AssertionError(f"{exc}:\n{_diagnostics(page, browser, lab, nb.name)}") from None
            say(f"{'Stop pressed while running' if pressed else 'the run had ended before Stop'}; "
                f"{time.monotonic() - t_stop:.1f} s later the status says: {final!r}")
            # a run of LONG_EPOCHS epochs is still training here: Stop ends it, and the status says so
            assert pressed and final.startswith("stopped"), (pressed, final)
            # How long it took, timed in the page from the click event to the status line's change
            # (its MutationObserver), with both cores busy. Two parts: the page's round trip (the
            # click's comm message reaching the kernel's main thread and a status line coming back:
            # `echo`, click to the "stopping" line, 0.24-0.70 s here at load 2-9 with the busy
            # processes: JupyterLab, Chromium and the machine) and the dashboard's own part,
            # `latency - echo` (the kernel from Stop to "stopped": the loops' end, the result built
            # and saved, and the status line's way back; 0.44-1.01 s here). Printed and kept in
            # dashboard-pace.json, not asserted: a duration on a shared machine is the benchmark's
            # business (`python -m workbench.ui.dashbench --what stop` prints the dashboard's part
            # against STOP_PROMISE_S), and what keeps the promise on any machine (the status says
            # "stopped" before the last redraw and report.html) is asserted by event order in
            # tests/test_dashboard.py::test_stop_says_stopped_before_the_final_redraw_and_the_report.
            latency, echo = _stop_latency(page)
            busy = busy_cores.too_busy()
            say(f"Stop: click to {final.split(':')[0]!r} in the page: "
                f"{'not measured' if latency is None else f'{latency:.2f} s'} (click to 'stopping': "
                f"{'not seen' if echo is None else f'{echo:.2f} s'}; {BUSY_PROCESSES} busy processes, load "
                f"{busy_cores.load_before:.1f} before them{f'; {busy}' if busy else ''}; "
                f"the promise is {STOP_PROMISE_S:g} s)")
            pace.update({"stop_click_to_stopped_s": latency, "stop_click_to_stopping_s": echo,
                         "stop_dashboard_part_s": None if latency is None or echo is None else latency - echo,
                         "stop_promise_s": STOP_PROMISE_S, "too_busy_at_stop": busy or None})
            (artifacts / "dashboard-pace.json").write_text(json.dumps(pace, indent=1))
            assert latency is not None, f"the click or the stopped status was not seen: {page.evaluate('() => window.__wbStatus')[-10:]}"
            loss_el.first.scroll_into_view_if_needed()
            _shot(page, artifacts, "03-stopped", say)
            assert _has_points(_loss_plot(page)), "the loss plot lost its points after the run ended"
            # every live figure of a run draws its data (not only the loss plot). The status line
            # may say "stopped" before the browser has drawn the last plot edits: each widget model
            # applies its messages on its own promise chain, and Plotly draws asynchronously, so a
            # loaded machine needs a moment; a figure that never draws is the failure.
            t_end = time.monotonic()

            def empty_run_figures():
                return [p["title"] for p in plots(page, DASH)
                        if any(r.search(p["title"]) for r in RUN_FIGURES) and not p["drawn"]]
            try:
                wait_for(page, lambda: not empty_run_figures(), DRAW_TIMEOUT, "every live figure to draw")
            except TimeoutError:
                after_run = plots(page, DASH)
                raise AssertionError(f"live figures left empty {DRAW_TIMEOUT} s after the run ended: "
                                     f"{empty_run_figures()}{_stateless_hint(page)}: {after_run}\n"
                                     f"--- console ---\n{browser.log.dump()}") from None
            say(f"every live figure drew its data {time.monotonic() - t_end:.1f} s after the status said so")
            _shot_whole(page, dash, artifacts, "03-stopped-dashboard", say)
            # ---- every figure fits its column at 1400x900 beside the file browser (issue 23 item 9):
            # nothing between a figure and the dashboard's output area scrolls sideways, and no
            # figure reaches past that area's right edge. (Before plotly_widget's followWidth,
            # every figure was drawn at plotly's default 700 px in a 562 px column, 340 px for
            # the lr preview: its box scrolled 138 / 360 px sideways.)
            assert page.evaluate(FILE_BROWSER_OPEN_JS), "the file browser is not open beside the notebook"
            fits = page.evaluate(FIT_JS, DASH)
            wide = [f for f in fits if f["overflow"] > 1 or f["right"] > f["area_right"] + 1]
            say(f"figure fit at {VIEWPORT['width']} px, file browser open: " +
                "; ".join(f"{f['title'] or '(untitled)'}: {f['width']:.0f} px, overflow {f['overflow']:.0f} px"
                          for f in fits))
            assert len(fits) >= len(RUN_FIGURES) + 1, f"not every figure is on the page: {fits}"
            assert not wide, f"figures wider than their column (scrolling sideways): {wide}"
            # ... nor squeezed by their column: the lr preview's box was 0 px tall under the controls
            squeezed = [f for f in fits if f["box_height"] < f["height"] - 1]
            assert not squeezed, f"figures in boxes shorter than they are: {squeezed}"
            # ... and no text of a figure drawn over another or cut off (issue 23 item 9: x-axis
            # titles were drawn over legends); the whole-dashboard screenshot shows them
            overlaps = page.evaluate(OVERLAP_JS, f"{DASH} .js-plotly-plot")
            assert not overlaps, f"figure texts drawn over each other or cut off at {VIEWPORT['width']} px: {overlaps}"
            # ---- the runs tab: the run, with links to its folder and report
            dash.locator(".lm-TabBar-tab, .p-TabBar-tab", has_text="runs").first.click()
            table = dash.locator("table").filter(has_text="sync_sgd")
            table.first.wait_for(state="visible", timeout=10_000)
            report_link = dash.locator("a", has_text="report")
            assert report_link.count() >= 1, "the runs table links no report"
            href = report_link.first.get_attribute("href")
            assert href.startswith("/files/"), href                 # served by this JupyterLab, not file://
            reply = page.request.get(lab.url(href.lstrip("/")))
            assert reply.ok and "workbench run" in reply.text(), f"the report link {href} gives {reply.status}"
            _shot(page, artifacts, "04-runs-tab", say)
            dash.locator(".lm-TabBar-tab, .p-TabBar-tab", has_text="scaling").first.click()
            page.wait_for_timeout(500)
            _shot(page, artifacts, "05-scaling-tab", say)
            _check_widget_errors(page, browser, "after the run")
            other = browser.log.errors()
            if other:
                say("console errors (not widget-related, not failing):\n  " + "\n  ".join(other[:10]))
    say(f"dashboard browser test took {time.monotonic() - t0:.1f} s")


def _stop_latency(page) -> tuple[float | None, float | None]:
    """Seconds from the click on Stop (its listener's timestamp) to the first status line
    after it saying stopped or completed (the status MutationObserver's), both in the page;
    and from the click to the first line saying "stopping" (the kernel got the click), if any."""
    latency = echo = None
    with contextlib.suppress(Exception):
        clicked = page.evaluate("() => window.__wbStopClick")
        log = [(t, text) for t, text in page.evaluate("() => window.__wbStatus") if t >= clicked]
        latency = (next(t for t, text in log if ENDED_RE.match(text)) - clicked) / 1000
        echo = (next(t for t, text in log if "stopping" in text or ENDED_RE.match(text)) - clicked) / 1000
    return latency, echo


def _control(page, dash, name: str):
    """A labelled control of the dashboard (its label reads `name`)."""
    return dash.locator(".widget-inline-hbox", has=page.locator("label", has_text=_label(name))).first


def _type(page, dash, name: str, value: Any) -> None:
    box = _control(page, dash, name).locator("input")
    box.fill(str(value))
    box.press("Enter")


# Each visible dashboard figure: its width, how far it reaches right, and the most any
# element between it and the dashboard's output area scrolls sideways (or its own drawing
# is wider than it).
FIT_JS = """(root) => { const area = document.querySelector(root); const edge = area.getBoundingClientRect().right;
  return [...area.querySelectorAll('.js-plotly-plot')].filter(g => g.offsetParent !== null).map(g => {
    let overflow = 0;
    for (let p = g.parentElement; p && p !== area.parentElement; p = p.parentElement) {
      const style = getComputedStyle(p);
      if (style.overflowX !== 'visible' || p === area) overflow = Math.max(overflow, p.scrollWidth - p.clientWidth);
    }
    const r = g.getBoundingClientRect();
    const svg = g.querySelector('.main-svg');          // plotly's drawing, wider than its element: cut off
    if (svg) overflow = Math.max(overflow, svg.getBoundingClientRect().width - r.width);
    const box = (g.parentElement.closest('.widget-box') || g).getBoundingClientRect();   // its FigureSlot's box
    return {title: (g.querySelector('.gtitle') || {}).textContent || '', width: r.width, right: r.right,
            area_right: edge, overflow: overflow, height: r.height, box_height: box.height};
  }); }"""
# In each plotly figure under `sel`: pairs of its texts drawn over each other (the legend over an
# axis title, a tick label, a subplot title, the title or a button; an axis title over a subplot
# title; a subplot title over a tick label or a button) and texts cut off by the figure's edge.
OVERLAP_JS = """(sel) => {
  const boxes = (gd, css) => [...gd.querySelectorAll(css)].map(e => ({e, r: e.getBoundingClientRect()}))
      .filter(b => b.r.width > 0 && b.r.height > 0);
  const hit = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const name = b => (b.e.textContent || b.e.getAttribute('class') || '').trim().slice(0, 40);
  return [...document.querySelectorAll(sel)].filter(gd => gd.offsetParent !== null).map(gd => {
    const legend = boxes(gd, '.legend .bg');
    const titles = boxes(gd, '[class^="g-x"][class$="title"] text, [class^="g-y"][class$="title"] text');
    const ticks = boxes(gd, '.xtick text, .ytick text, [class*="x2tick"] text, [class*="y2tick"] text');
    const notes = boxes(gd, '.annotation-text-g');
    const main = boxes(gd, '.g-gtitle text');
    const menus = boxes(gd, '.updatemenu-button');
    const out = [];
    for (const l of legend) for (const o of [...titles, ...ticks, ...notes, ...main, ...menus])
      if (hit(l.r, o.r)) out.push(['legend', name(o)]);
    for (const t of titles) for (const o of [...notes, ...main]) if (hit(t.r, o.r)) out.push([name(t), name(o)]);
    for (const n of notes) for (const o of [...ticks, ...main, ...menus]) if (hit(n.r, o.r)) out.push([name(n), name(o)]);
    for (const m of main) for (const o of menus) if (hit(m.r, o.r)) out.push([name(m), 'button ' + name(o)]);
    const svg = gd.querySelector('.main-svg');
    if (svg) {
      const edge = svg.getBoundingClientRect();
      for (const b of [...legend, ...titles, ...notes, ...main])
        if (b.r.left < edge.left - 1 || b.r.right > edge.right + 1) out.push(['cut off by the edge', name(b)]);
    }
    return {title: (gd.querySelector('.gtitle') || {}).textContent || '', overlaps: out};
  }).filter(f => f.overlaps.length);
}"""


FILE_BROWSER_OPEN_JS = "() => { const fb = document.querySelector('.jp-FileBrowser'); " \
                       "return !!(fb && fb.offsetParent !== null && fb.getBoundingClientRect().width > 100); }"


AXIS_TITLES_JS = "(root) => [...document.querySelectorAll(root + ' .js-plotly-plot')].map(gd => ({" \
                 "title: (gd.querySelector('.gtitle') || {}).textContent || '', " \
                 "axes: [...gd.querySelectorAll('.g-xtitle, .g-x2title, .g-ytitle, .annotation-text')]" \
                 ".map(e => e.textContent)}))"


@pytest.mark.timeout(420)
def test_a_simulated_cluster_runs_and_sweeps_from_the_dashboard(quickstart, browser, artifacts, tmp_path, say):
    """The "simulated cluster" toggle: SIM_WORKERS virtual workers typed in, Run; the live
    loss plot grows and the status line moves, in virtual seconds, while the simulation
    goes; no Dask cluster starts; then a simulated sweep in the scaling tab."""
    t0 = time.monotonic()
    work = tmp_path / "lab"
    work.mkdir()
    nb = copy_notebook(quickstart, work, parameters={"quick": False})
    with JupyterLab(work) as lab:
        page = browser.context.new_page()
        page.set_viewport_size(VIEWPORT)
        with _shot_on_failure(page, artifacts, "99-simulated-failure", say):
            dash, run_button = _open_dashboard(page, browser, lab, nb, say, t0)
            # ---- the toggle, then its knobs, as a user sets them
            dash.get_by_role("checkbox", name="simulate", exact=True).check()
            wait_for(page, lambda: "simulated workers" in _status(page), 30, "the status line to say simulated")
            _control(page, dash, "cpu_device").locator("select").select_option("power8")
            _type(page, dash, "cpus", SIM_WORKERS)
            _type(page, dash, "epochs", SIM_EPOCHS)
            ready = wait_for(page, lambda: (lambda s: s if s.startswith("ready") and
                                            f"on {SIM_WORKERS} simulated workers" in s else None)(_status(page)),
                             30, f"the status line to follow cpus={SIM_WORKERS}")
            say(f"simulated cluster set: {ready!r}")
            _shot(page, artifacts, "07-simulated-ready", say)

            # ---- Run: live points and a moving status line before the simulation ends
            assert page.evaluate(WATCH_STATUS_JS, DASH), "cannot find the status line to watch"
            run_button.click()
            t_run = time.monotonic()
            wait_for(page, lambda: _has_points(_loss_plot(page)), DATA_TIMEOUT, "data points in the live loss plot")
            assert page.evaluate(WATCH_LOSS_JS, DASH), "cannot watch the loss plot's redraws"
            final = wait_for(page, lambda: (lambda s: s if ENDED_RE.match(s) or s.startswith(("failed", "error"))
                                            else None)(_status(page)), SIM_TIMEOUT, "the simulated run to end")
            log, loss_log = page.evaluate("() => window.__wbStatus"), page.evaluate("() => window.__wbLoss")
            t_end = next(t for t, text in log if ENDED_RE.match(text) or text.startswith(("failed", "error")))
            running = [text for t, text in log if text.startswith("running")]
            grew = [b for a, b in zip(loss_log, loss_log[1:]) if b[1] > a[1] and b[0] < t_end]
            say(f"simulated run ended {time.monotonic() - t_run:.1f} s after Run: {final!r}; while it ran the "
                f"status changed {len(running)} times (last {running[-1] if running else '-'!r}), the loss plot "
                f"grew {len(grew)} times")
            assert final.startswith("completed") and "virtual s (simulated in" in final, final
            assert running and all("virtual s" in text for text in running if STEP_RE.search(text)), running
            assert len({STEP_RE.search(t).group(1) for t in running if STEP_RE.search(t)}) >= 2, running
            assert len(grew) >= 1, f"the loss plot did not grow while the run went: {loss_log}"
            assert dash.locator("a", has_text="Dask dashboard").count() == 0, "a simulated run started Dask"
            titles = {p["title"]: p["axes"] for p in page.evaluate(AXIS_TITLES_JS, DASH)}
            timed = [axes for title, axes in titles.items() if "against time" in title or "throughput" in title]
            assert timed and all("time (virtual seconds)" in axes for axes in timed), titles
            loss_el = page.locator(f"{DASH} .js-plotly-plot").filter(has=page.locator(".gtitle", has_text="loss"))
            loss_el.first.scroll_into_view_if_needed()
            _shot(page, artifacts, "08-simulated-run", say)
            _check_widget_errors(page, browser, "after the simulated run")

            # ---- the scaling tab: a simulated sweep, one more point as each run ends
            _type(page, dash, "epochs", 2)
            dash.locator(".lm-TabBar-tab, .p-TabBar-tab", has_text="scaling").first.click()
            workers = _control(page, dash, "workers").locator("input")
            workers.fill(SIM_SWEEP)
            workers.press("Enter")
            dash.locator("button", has_text=_label("Sweep")).click()
            done = wait_for(page, lambda: (lambda s: s if s.startswith(("sweep done", "failed", "error"))
                                           else None)(_status(page)), SIM_TIMEOUT, "the simulated sweep to end")
            n_points = len(SIM_SWEEP.split(","))
            assert done.startswith(f"sweep done: {n_points} point(s) from {n_points} run(s)"), done
            scaling = [p for p in page.evaluate(AXIS_TITLES_JS, DASH) if SCALING_TITLE.match(p["title"])]
            assert scaling and any("samples per virtual second" in a for a in scaling[0]["axes"]), scaling
            found = [p for p in plots(page, DASH) if SCALING_TITLE.match(p["title"])]
            assert found and n_points in found[0]["points"], found       # the "simulated" trace: every point
            say(f"simulated sweep: {done!r}")
            page.locator(f"{DASH} .js-plotly-plot").filter(
                has=page.locator(".gtitle", has_text=SCALING_TITLE)).first.scroll_into_view_if_needed()
            overlaps = page.evaluate(OVERLAP_JS, f"{DASH} .js-plotly-plot")
            assert not overlaps, f"figure texts drawn over each other or cut off: {overlaps}"
            _shot(page, artifacts, "09-simulated-sweep", say)
            _check_widget_errors(page, browser, "after the simulated sweep")
    say(f"simulated dashboard browser test took {time.monotonic() - t0:.1f} s")


@pytest.mark.timeout(150)
def test_report_html_figures_draw(browser, artifacts, tmp_path, say):
    t0 = time.monotonic()
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "workbench", "run", "--algorithm", "sgd", "--steps", "30",
                           "--out", str(run_dir), "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"workbench run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    report = run_dir / "report.html"
    assert report.is_file(), f"no report.html in {sorted(p.name for p in run_dir.iterdir())}"

    page = browser.context.new_page()
    mark = browser.log.mark()
    errors_before = len(browser.log.page_errors)
    with _shot_on_failure(page, artifacts, "99-report-failure", say):
        page.goto(report.as_uri(), wait_until="load")
        n_divs = page.locator(".figure").count()
        assert n_divs > 0, "report.html has no figure divs"
        page.locator(".main-svg").first.wait_for(state="attached", timeout=30_000)

        def all_drawn():
            found = plots(page)
            return found if len(found) >= n_divs and all(p["drawn"] > 0 for p in found) else None
        try:
            found = wait_for(page, all_drawn, 30, "every report figure to draw its traces")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}: {plots(page)}\n--- console ---\n{browser.log.dump()}") from None
        assert all(p["main_svg"] > 0 and p["traces"] > 0 for p in found), found
        say(f"report.html: {len(found)} figures drawn: " +
            "; ".join(f"{p['title'] or '(untitled)'}: {p['traces']} traces, {p['drawn']} shapes" for p in found))
        errors = browser.log.errors(mark) + browser.log.page_errors[errors_before:]
        assert not errors, "console errors in report.html:\n" + "\n".join(errors)
        assert page.locator("a", has_text="steps.csv").count() == 1, "report.html links no steps.csv"
        # its figures' texts clear of each other, and its tables inside the page (they scroll
        # sideways in their own box when wider): at a narrow window and a wide one
        for width in (900, 1400):
            page.set_viewport_size({"width": width, "height": 900})
            page.wait_for_timeout(500)                  # plotly relayouts on resize
            overlaps = page.evaluate(OVERLAP_JS, ".js-plotly-plot")
            assert not overlaps, f"report.html at {width} px: figure texts drawn over each other or cut off: {overlaps}"
            wider = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            assert wider <= 1, f"report.html at {width} px is {wider} px wider than the window"
        assert "start-up" in page.locator("body").inner_text()
        _shot(page, artifacts, "06-report", say, full_page=True)
    say(f"report browser test took {time.monotonic() - t0:.1f} s")


RESHOWN_CELLS = (
    "import workbench as wb\nfrom workbench.ui.dashboard import Dashboard\n"
    "d = Dashboard(cluster='threads', config=wb.RunConfig(algorithm='sync_sgd', cpus=2, steps=60))\nd",
    "d.run(); print(d.wait(120).status)",
    "d",
    "d.controls['cpus'].value = 3; d.controls['batch_size'].value = 64; d.run(); print(d.wait(120).status)",
    "d",
    "d.controls['cpus'].value = 2; d.run(); print(d.wait(120).status)",
    "d",
)
# Per time-breakdown figure on the page: its bars' y tick labels (the bar panel's y axis)
BREAKDOWN_TICKS_JS = """() => [...document.querySelectorAll('.js-plotly-plot')]
  .filter(g => /where the time goes/.test((g.querySelector('.gtitle') || {}).textContent || ''))
  .map(g => [...g.querySelectorAll('.yaxislayer-above .ytick text')].map(t => t.textContent))"""


def test_a_reshown_dashboard_names_the_workers_of_its_time_breakdown(browser, artifacts, tmp_path, say):
    # Three quick runs of 2, 3 and 2 workers (the breakdown replaced for each worker count), the
    # dashboard displayed after each: every display showed empty axes ticked -1 ... 4 where the
    # names of the workers belong (FigureSlot.renew).
    import nbformat
    root = tmp_path / "nb"
    root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in RESHOWN_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, str(root / "reshown.ipynb"))
    page = browser.context.new_page()
    with JupyterLab(root) as lab, _shot_on_failure(page, artifacts, "98-reshown-failure", say):
        page.goto(lab.url("lab/tree/reshown.ipynb"), wait_until="domcontentloaded")
        page.wait_for_function(KERNEL_IDLE_JS, arg="reshown.ipynb", timeout=OPEN_TIMEOUT * 1000, polling=250)
        assert page.evaluate(RUN_ALL_JS, "reshown.ipynb"), "the notebook is not the current JupyterLab widget"

        def named():
            cells = page.evaluate(CELLS_JS, "reshown.ipynb") or []
            done = len(cells) == len(RESHOWN_CELLS) and all(c["count"] for c in cells)
            assert not any(c["errors"] for c in cells), cells
            ticks = page.evaluate(BREAKDOWN_TICKS_JS)
            return ticks if done and len(ticks) == 4 and all(t == ["worker 1", "worker 0"] for t in ticks) else None
        try:
            ticks = wait_for(page, named, DASHBOARD_TIMEOUT, "every display's time breakdown to name workers 0 and 1")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}: {page.evaluate(BREAKDOWN_TICKS_JS)}") from None
        say(f"re-shown dashboard: the time breakdown's bars in {len(ticks)} displays: {ticks[0]}")
