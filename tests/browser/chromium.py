"""Headless Debian Chromium driven by Playwright's Python API, and what the tests read off pages.

    why = unavailable()                 # None, or why the browser tests cannot run here
    with Chromium(tmpdir) as browser:
        page = browser.context.new_page()
        ...
        browser.log.widget_errors()     # console / page errors that mean a widget failed

Playwright is only the driver here: it launches Debian's /usr/bin/chromium
(`WORKBENCH_CHROMIUM` overrides) and never downloads a browser. The browser runs with
the flags known to work on these machines (no sandbox as root, no GPU, no background
networking: the network is closed) and a fresh profile dir. On exit the context and
Playwright are closed, and any Chromium process still running with that profile dir
(only ours have it) is killed.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
SETUP_HINT = "install it with `bash .ci/browser-setup.sh` (Debian chromium + the playwright package)"

# Text in the page or the console that means a widget did not load or render.
WIDGET_ERROR_PATTERNS = [re.compile(p, re.I) for p in (
    r"Error displaying widget",
    r"Failed to load model class",
    r"Could not (find|load|create|instantiate|render)[^\n]*(widget|anywidget|model|view|plotly)",
    r"Could not find[^\n]*(anywidget|jupyter-widgets|jupyterlab-plotly)",
    r"Class \S+ not found in module",
    r"Model class \S+ .*not found",
    r"widget manager[^\n]*error|error[^\n]*widget manager",
    r"\[anywidget\][^\n]*(error|fail)",
    r"anywidget[^\n]*(Failed|Error)",
    r"Failed to (import|load)[^\n]*(esm|module|widget)",
    r"Error (rendering|creating) (widget|view|model)",
    r"Javascript Error",
)]
# anywidget gives a model 2 s to set up (`AbortSignal.timeout(2000)` in its runtime)
# and then throws "[anywidget] Failed to initialize model."; that model still draws
# its first state but drops every later message from the kernel, so its plot never
# changes. It used to fire for plotly figures on a loaded machine (each imported
# plotly's 5 MB module); `workbench.ui.plotly_widget` makes it impossible for ours,
# so here it is a failure like any other widget error (an uncaught exception, and
# "[anywidget] ... fail" in WIDGET_ERROR_PATTERNS).

# Console errors worth failing on even without a pattern: they name the widget stack.
WIDGET_WORDS = re.compile(r"widget|anywidget|plotly|ipywidgets|jupyter-widgets", re.I)


def unavailable() -> str | None:
    """None if Chromium and Playwright are here; else why not and how to get them."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return f"the Python package playwright is not installed: {SETUP_HINT}"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"no Chromium at {CHROMIUM}: {SETUP_HINT}"
    return None


@dataclass
class ConsoleLog:
    """Console messages and uncaught page errors of every page of a browser context."""

    messages: list[tuple[str, str, str]] = field(default_factory=list)   # (type, text, url)
    page_errors: list[str] = field(default_factory=list)

    def attach(self, page: Any) -> None:
        def on_console(msg: Any) -> None:
            try:
                url = (msg.location or {}).get("url", "")
            except Exception:  # pragma: no cover - a closing page
                url = ""
            self.messages.append((msg.type, msg.text, url))

        page.on("console", on_console)
        page.on("pageerror", lambda exc: self.page_errors.append(f"{exc.name}: {exc.message}\n{exc.stack or ''}"))

    def mark(self) -> int:
        return len(self.messages)

    def errors(self, since: int = 0) -> list[str]:
        return [f"{t}: {text} ({url})" for t, text, url in self.messages[since:] if t == "error"]

    def widget_errors(self) -> list[str]:
        """Uncaught JS exceptions (anywidget's set-up timeout among them), and console
        errors/warnings that say a widget failed."""
        found = [f"uncaught exception: {e}" for e in self.page_errors]
        for t, text, url in self.messages:
            if t not in ("error", "warning", "assert"):
                continue
            if any(p.search(text) for p in WIDGET_ERROR_PATTERNS) or (t == "error" and WIDGET_WORDS.search(text)):
                found.append(f"console {t}: {text} ({url})")
        return found

    def dump(self, limit: int = 60) -> str:
        lines = [f"[{t}] {text}" for t, text, _ in self.messages[-limit:]]
        lines += [f"[pageerror] {e}" for e in self.page_errors]
        return "\n".join(lines) or "(empty)"


def page_widget_errors(text: str) -> list[str]:
    """Lines of a page's visible text that say a widget failed."""
    return [line.strip() for line in text.splitlines() if any(p.search(line) for p in WIDGET_ERROR_PATTERNS)]


class Chromium:
    """Headless Debian Chromium under Playwright, with a fresh profile; a context manager."""

    def __init__(self, workdir: Path, viewport: tuple[int, int] = (1400, 1000), timeout_ms: int = 30_000):
        self.workdir = Path(workdir)
        self.viewport = viewport
        self.timeout_ms = timeout_ms
        self.log = ConsoleLog()
        self.profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=self.workdir))
        self._pw = None
        self.context = None

    def __enter__(self) -> Chromium:
        from playwright.sync_api import sync_playwright

        try:
            self._pw = sync_playwright().start()
            self.context = self._pw.chromium.launch_persistent_context(
                str(self.profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                chromium_sandbox=False, timeout=self.timeout_ms,
                viewport={"width": self.viewport[0], "height": self.viewport[1]},
                service_workers="block", accept_downloads=False)
            self.context.set_default_timeout(self.timeout_ms)
            self.context.set_default_navigation_timeout(self.timeout_ms)
            self.context.on("page", self.log.attach)
            for page in self.context.pages:
                self.log.attach(page)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        try:
            if self.context is not None:
                self.context.close()
        except Exception:
            pass
        finally:
            self.context = None
            try:
                if self._pw is not None:
                    self._pw.stop()
            except Exception:
                pass
            self._pw = None
            _kill_profile_processes(self.profile)
            shutil.rmtree(self.profile, ignore_errors=True)

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _kill_profile_processes(profile: Path) -> None:
    """Kill Chromium processes still running with our profile dir (no one else uses it)."""
    import psutil

    marker = f"--user-data-dir={profile}"
    procs = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if marker in (p.info["cmdline"] or []):
                procs.append(p)
        except psutil.Error:
            continue
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    if procs:
        psutil.wait_procs(procs, timeout=5)


# ------------------------------------------------------------------------------ page probes
# Every plotly graph under `root`: title, traces in its data, and what its SVG drew.
PLOTS_JS = r"""
(root) => {
  const scope = root ? document.querySelectorAll(root) : [document];
  const out = [];
  for (const s of scope) {
    for (const gd of s.querySelectorAll('.js-plotly-plot')) {
      const title = (gd.querySelector('.gtitle') || {}).textContent || '';
      const lines = [...gd.querySelectorAll('.scatterlayer .trace path.js-line')]
        .map(p => p.getAttribute('d') || '').filter(d => /[LC]/.test(d));
      const vertices = lines.reduce((n, d) => n + (d.match(/[MLC]/g) || []).length, 0);
      const markers = gd.querySelectorAll('.scatterlayer .trace .points path').length;
      // anything drawn in a data layer: lines, markers, fills, bars, boxes, heatmaps/images
      const layers = '.scatterlayer, .barlayer, .boxlayer, .violinlayer, .heatmaplayer, .contourlayer, .imagelayer, .pielayer';
      const drawn = [...gd.querySelectorAll(layers)].flatMap(l => [...l.querySelectorAll('path, image')])
        .filter(p => p.tagName.toLowerCase() === 'image' || /[LCAHVQ]/i.test((p.getAttribute('d') || '').slice(1))).length;
      const full = gd._fullData || [];
      const r = gd.getBoundingClientRect();
      // A figure from Python always carries its template; a FigureWidget whose state never
      // reached the frontend model renders plotly's bare default instead (no template, no title).
      const template = !!(gd.layout && gd.layout.template);
      out.push({title, template, main_svg: gd.querySelectorAll('.main-svg').length,
                traces: (gd.data || []).length,
                points: full.map(t => (t.x && t.x.length) || (t.y && t.y.length) || (t.z && t.z.length) || 0),
                lines: lines.length, vertices, markers, drawn,
                width: Math.round(r.width), height: Math.round(r.height)});
    }
  }
  return out;
}
"""


def plots(page: Any, root: str | None = None) -> list[dict]:
    """PLOTS_JS on `page`: one dict per plotly graph under the CSS selector `root`."""
    return page.evaluate(PLOTS_JS, root)


def wait_for(page: Any, predicate, timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll `predicate()` until it returns something truthy; TimeoutError after `timeout` s.

    Sleeps through `page.wait_for_timeout`, so Playwright keeps delivering console events.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        page.wait_for_timeout(interval * 1000)
