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
in (`dashboard.FigureSlot`). On a page reload the browser recreates every model,
the loader included, from the kernel. Only `figures.as_widget` makes these widgets.
"""
from __future__ import annotations

import threading
from typing import Any

import anywidget
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
// (dashboard.FigureSlot). A user's zoom or pan (_js2py_relayout, _js2py_restyle) still goes.
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
      return inner.render(ctx);
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
