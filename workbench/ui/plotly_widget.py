"""plotly's FigureWidget, with its 5 MB JavaScript module sent to the browser once per kernel.

plotly (>= 6) ships FigureWidget as an anywidget whose `_esm` is its whole widget
bundle (about 5 MB: plotly.js inside), so every FigureWidget sends and imports its own
copy. anywidget then gives each model 2 s to set itself up; a model that misses this
("[anywidget] Failed to initialize model.") still draws its first state but drops
every later message from the kernel, since anywidget's `_handle_comm_msg` awaits the
failed set-up first: its plot never changes again. The dashboard's nine figures, each
importing 5 MB at once, missed it for 1 to 4 figures in every browser test run with
both cores of the machine busy.

Here each figure's `_esm` is a stub of a few hundred bytes whose `initialize` returns
at once, so anywidget's limit is always met. The stub waits for plotly's module, which
one hidden `PlotlyModuleLoader` widget per kernel imports from a string trait, then
hands `initialize` and `render` over to plotly's own code, with the figure's model
wrapped so that plotly's per-edit replies (computed defaults the kernel never reads) stay
in the browser. A view is drawn only after
plotly's model code is set up; edits sent before that are not applied to the model's
copy of the figure, which is why the dashboard holds edits until a view has reported
in (`FigureSlot`, below). On a page reload the browser recreates every model,
the loader included, from the kernel. Only `traces.as_widget` makes these widgets.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from copy import deepcopy
from typing import Any

import anywidget
import ipywidgets as widgets
import plotly
import plotly.graph_objects as go
import traitlets

# The global the loader puts plotly's module promise under (one per plotly version,
# so two kernels with different plotly versions in one JupyterLab page do not mix).
MODULE_KEY = "__workbench_plotly_widget_" + plotly.__version__.replace(".", "_").replace("-", "_")
WAIT_MS = 180_000      # how long a figure waits for the loader before it reports an error

_LOADER_ESM = """
export default {
  initialize({ model }) {
    const key = model.get("key");
    if (!globalThis[key]) {
      const url = URL.createObjectURL(new Blob([model.get("bundle")], { type: "text/javascript" }));
      globalThis[key] = import(url);
    }
  },
};
"""

_FIGURE_ESM = """
const KEY = %(key)r;
const WAIT_MS = %(wait_ms)d;

function plotlyModule() {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    (function poll() {
      const found = globalThis[KEY];
      if (found) return found.then(resolve, reject);
      if (Date.now() - t0 > WAIT_MS) {
        return reject(new Error("workbench: plotly's widget module never arrived from the kernel "
                                + "(its PlotlyModuleLoader widget is missing)"));
      }
      setTimeout(poll, 20);
    })();
  });
}

// After every edit plotly's view sends back the defaults it computed (a layout delta and
// trace deltas), which plotly.py folds into the Python figure. The dashboard reads none of
// them back, and with every live figure redrawn each second they queued on the kernel's
// main thread ahead of a Stop click (22-31 s late on a busy 2-core machine). So they stay
// here, except the first trace deltas (the kernel's sign that a view has drawn), and each
// later one becomes a number: _wb_drawn, the trace edit the view has drawn, with which the
// dashboard sends a figure its next edit only once the last one is on screen
// (FigureSlot, below). A user's zoom or pan (_js2py_relayout, _js2py_restyle) still goes.
function quiet(model) {
  let reported = false;
  return new Proxy(model, {
    get(target, prop) {
      if (prop === "set") {
        return (key, value, ...rest) => {
          if (key === "_js2py_layoutDelta") return;
          if (key === "_js2py_traceDeltas") {
            if (value && value.trace_edit_id != null) target.set("_wb_drawn", value.trace_edit_id);
            if (reported) return;
            reported = true;
          }
          return target.set(key, value, ...rest);
        };
      }
      const value = target[prop];
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

// plotly's anywidget view sizes its figure once, as it renders: into an element not yet
// laid out, so at plotly's default 700 px, whatever its column's width (at 1400x900 beside
// JupyterLab's file browser the live figures' columns are 562 px: 138 px of every figure,
// its last ticks, toolbar and legend entries, were cut off and scrolled sideways; ipywidgets'
// own view resized on Lumino's resize messages, which an anywidget view never gets). So each
// view follows its element's width: plotly's own autosize (FigureView.autosizeFigure, which
// leaves a figure with a width of its own alone) whenever that width changes.
function followWidth(mod, ctx) {
  const autosize = mod.FigureView && mod.FigureView.prototype && mod.FigureView.prototype.autosizeFigure;
  if (typeof autosize !== "function" || typeof ResizeObserver !== "function") return () => {};
  const view = { el: ctx.el, model: ctx.model, _sendLayoutDelta() {} };  // layout deltas stay here (quiet)
  let width = -1;
  const observer = new ResizeObserver(() => {
    const now = ctx.el.clientWidth;
    if (now > 0 && Math.abs(now - width) >= 1) {
      width = now;
      autosize.call(view);
    }
  });
  observer.observe(ctx.el);
  return () => observer.disconnect();
}

export default () => {
  let inner = null;
  let ready = null;
  return {
    // Returns at once (anywidget's 2 s limit); plotly's model code is set up when its
    // module has arrived.
    initialize(ctx) {
      ready = plotlyModule().then((mod) => {
        inner = mod.default();
        return inner.initialize({ ...ctx, model: quiet(ctx.model) });
      });
    },
    async render(ctx) {
      await ready;
      const remove = await inner.render(ctx);
      const unfollow = followWidth(await plotlyModule(), ctx);
      return () => { unfollow(); if (typeof remove === "function") remove(); };
    },
  };
};
"""


class PlotlyModuleLoader(anywidget.AnyWidget):
    """Hidden: carries plotly's widget module to the browser once (see the module doc)."""

    _esm = _LOADER_ESM
    key = traitlets.Unicode(MODULE_KEY).tag(sync=True)
    bundle = traitlets.Unicode("").tag(sync=True)


_loader: PlotlyModuleLoader | None = None
_loader_lock = threading.Lock()


def bundle_text() -> str:
    """plotly's own widget bundle: go.FigureWidget's `_esm` (anywidget reads the file)."""
    return str(go.FigureWidget._esm)


def ensure_loader() -> PlotlyModuleLoader:
    """The kernel's loader widget, opened (again, if it was closed) on first need."""
    global _loader
    with _loader_lock:
        if _loader is None or _loader.comm is None:
            _loader = PlotlyModuleLoader(bundle=bundle_text())
        return _loader


class WholeStateFigureWidget(go.FigureWidget):
    """A FigureWidget that opens its comm only once plotly has filled in its state, and
    loads plotly's module through the kernel's loader.

    `go.FigureWidget(fig)` opens the widget (from ipywidgets' `Widget.__init__`) with an
    empty layout and no data, then sends both as separate updates, which a frontend
    still setting the widget up can drop: the plot stays bare axes (plotly.py #4933 /
    #4998, anywidget #803; 16 of 50 figures in a browser test). Holding `open` back
    until the constructor is done makes the first message carry everything (0 of 50).
    """

    _esm = _FIGURE_ESM % {"key": MODULE_KEY, "wait_ms": WAIT_MS}
    _wb_open_now = False
    _wb_drawn = traitlets.Int(0).tag(sync=True)     # the last trace edit a view has drawn (set by the view)

    def open(self) -> None:
        if self._wb_open_now:
            ensure_loader()            # its comm opens first, so the module is on its way
            super().open()


def whole_state_widget(fig: Any) -> WholeStateFigureWidget:
    """A new WholeStateFigureWidget holding `fig`'s data and layout."""
    widget = WholeStateFigureWidget(fig)
    widget._wb_open_now = True
    widget.open()
    return widget


def sync_widget(fig: Any) -> Any:
    """Make a FigureWidget's next frontend view start from its whole current state.

    A FigureWidget ships edits as "latest value" traits that existing views apply;
    a view created later starts from the figure's initial state, so edits made before
    it are lost. plotly re-sends the whole state in `FigureWidget._repr_mimebundle_`,
    which is not called for a figure shown inside an ipywidgets container (plotly.py
    #4956, #4998): call this before showing a container of FigureWidgets (the
    dashboard does, when it is displayed). Plain Figures pass through; returns `fig`.
    """
    if isinstance(fig, go.FigureWidget):
        fig._widget_layout = deepcopy(fig._layout_obj._props)
        fig._widget_data = deepcopy(fig._data)
    return fig


# ------------------------------------------------------------------------------ a figure on a page
READY_WAIT_S = 30.0   # a shown figure no view reports in for gets its edits after this (no browser)
DRAWN_WAIT_S = 5.0    # a view that has not said it drew the last edit gets the next one after this
_REPORTS = ["_js2py_traceDeltas"]   # plotly's view sets it after its first draw


class FigureSlot:
    """A FigureWidget in its own Box, edited only once its frontend model takes edits.

    A FigureWidget's frontend model sets up plotly's code asynchronously (it waits for
    plotly's module: `plotly_widget`); an edit that arrives before that (traces added
    or deleted, a relayout) changes the model's traits with nobody listening, so a view
    drawn later shows the figure without it, and later edits address traces it does
    not have. So, once the figure has been shown:

    - edits queue until a view reports in: plotly's view draws only after plotly's
      model code is set up, and reports right after its first draw; queued edits are
      then applied in order, and later ones at once;
    - with no report READY_WAIT_S after showing (papermill, no browser), or when
      forced (a run's last flush), edits apply anyway, so the Python figure is whole.

    - flow control: after that, a figure gets its next edit only once its view says it
      has drawn the last one (`plotly_widget`'s `_wb_drawn`), or DRAWN_WAIT_S later;
      edits made meanwhile queue and go out together. A browser slower than the kernel's
      redraws (a busy machine) then sees fewer, larger updates instead of a growing
      backlog that delays everything behind it, a Stop click's reply included.
    - a figure no view has drawn when a run ends (`flush(whole=True)`) or when it is shown
      again is renewed (`renew`): a new widget, whole from its first message.

    Never shown (tests, headless use), edits apply at once. Thread-safe: the flusher
    edits from its thread while reports arrive on the kernel's.
    """

    def __init__(self, fig: Any, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        # A block box: plotly sizes the figure to its parent's width (a flex box's child has
        # none of its own, and plotly then falls back to 700 px, wider than the plot column).
        self.box = widgets.Box([fig], layout=widgets.Layout(display="block", width="100%"))
        self._lock = threading.RLock()
        self._pending: list[Callable[[Any], Any]] = []
        self._shown = False
        self._attach(fig)

    @property
    def fig(self) -> Any:
        """The current FigureWidget (`replace` changes it)."""
        return self._fig

    @property
    def pending(self) -> int:
        """Edits waiting for the frontend."""
        return len(self._pending)

    @property
    def viewed(self) -> bool:
        """Whether a view has reported in since the figure was shown."""
        return self._viewed

    def _attach(self, fig: Any) -> None:
        self._fig = fig
        self._since = self._clock()            # when its whole state last went out
        self._viewed = False
        self._sent_edit, self._sent_at = 0, 0.0   # the last trace edit sent to a view, and when
        fig.observe(self._on_report, names=_REPORTS)
        if fig.has_trait("_wb_drawn"):
            fig.observe(self._on_drawn, names=["_wb_drawn"])

    def shown(self) -> None:
        """The figure is being displayed: send its whole state again (`sync_widget`)
        and hold later edits until a view reports in. Shown again while no view has
        reported in, the figure is renewed instead (`renew`)."""
        with self._lock:
            if self._shown and not self._viewed:
                self.renew()
            else:
                sync_widget(self._fig)
            self._shown, self._since = True, self._clock()

    def renew(self) -> None:
        """Show a new widget holding the figure's whole current state in its first message.

        A figure put on the page while edits were streaming to it (the time breakdown,
        replaced when a run's worker count changed, then three quick runs) can be left with
        no view that ever drew: its views showed empty axes, ticked -1 ... 4 where worker
        names belong, on every later display too, though the kernel held every trace and
        re-sent them (`sync_widget`). A new widget's first message carries everything
        (`WholeStateFigureWidget`), which is what a view starts from."""
        with self._lock:
            self._apply()
            old = self._fig
            self.replace(whole_state_widget(old))
            old.close()        # (its views show the new one: the box's child)

    def ready(self) -> bool:
        """Whether an edit made now reaches the frontend's copy of the figure, and its view
        has drawn the last one."""
        if not self._shown:
            return True
        now = self._clock()
        if not self._viewed:
            return now - self._since >= READY_WAIT_S
        drawn = getattr(self._fig, "_wb_drawn", None)
        return drawn is None or drawn >= self._sent_edit or now - self._sent_at >= DRAWN_WAIT_S

    def edit(self, fn: Callable[[Any], Any]) -> None:
        """Apply `fn(fig)` (inside one batch_update) now, or once the frontend is ready;
        edits apply in the order given."""
        with self._lock:
            self._pending.append(fn)
            if self.ready():
                self._apply()

    def flush(self, whole: bool = False) -> None:
        """Apply queued edits now, ready or not (a run's last flush). `whole`: also make the
        figure's synced state its whole current one (`sync_widget`), which is what a notebook
        saves of a widget and what a view opened later starts from: edits reach a view as
        messages, so a notebook executed without a browser (papermill) saved the figures as
        they were when first shown, empty."""
        with self._lock:
            self._apply()
            if whole and self._shown:
                if self._viewed:
                    sync_widget(self._fig)
                else:           # no view drew it: a new widget, whole from its first message
                    self.renew()

    def replace(self, fig: Any) -> None:
        """Show `fig` instead (its whole state goes out with it); queued edits apply to it."""
        with self._lock:
            self._fig.unobserve(self._on_report, names=_REPORTS)
            if self._fig.has_trait("_wb_drawn"):
                self._fig.unobserve(self._on_drawn, names=["_wb_drawn"])
            self._attach(fig)
            self.box.children = (fig,)

    def _apply(self) -> None:
        if not self._pending:
            return
        edits, self._pending = self._pending, []
        before = getattr(self._fig, "_last_trace_edit_id", 0)
        with self._fig.batch_update():
            for fn in edits:
                fn(self._fig)
        after = getattr(self._fig, "_last_trace_edit_id", 0)
        if after != before:                     # traces changed: the view will say when it drew them
            self._sent_edit, self._sent_at = after, self._clock()

    def apply_if_ready(self) -> None:
        """Apply queued edits if the view can take them now (the flusher calls it)."""
        with self._lock:
            if self._pending and self.ready():
                self._apply()

    def _on_drawn(self, change: dict) -> None:
        if self._pending and (change.get("new") or 0) >= self._sent_edit:
            with self._lock:
                if self.ready():
                    self._apply()

    def _on_report(self, change: dict) -> None:
        if self._viewed or not change.get("new"):
            return
        with self._lock:
            self._viewed = True
            self._apply()


class Figures(Mapping):
    """FIGURE_KEYS -> the current FigureWidget of each slot (`FigureSlot.replace` changes it)."""

    def __init__(self, slots: dict[str, FigureSlot]):
        self._slots = slots

    def __getitem__(self, key: str) -> Any:
        return self._slots[key].fig

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)
