"""The dashboard's form: a control for every knob, the config they describe, the lr preview.

Every control is named after, and maps onto, the `RunConfig` field of the same name
(`controls.CONTROL_FIELDS`), carries that field's description as its tooltip
(`config.field_help`) and sits in the field's group (`config.FIELD_GROUPS`); an
algorithm's or a dataset's own knobs are shown only when they apply (`controls.RELEVANT`).
What the controls say is validated as a whole on every change (`Form.refresh`): a bad
combination shows its `ConfigError` text in the dashboard's status line, a good one redraws
the schedule preview and says "ready". The `Dashboard` composes the form with the live run
(`ui/liverun.py`) and the sweep panel (`ui/sweeppanel.py`).
"""
from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from ..config import GROUP_TITLES, SIM_FIELDS, ConfigError, RunConfig
from ..problem import Problem
from . import figdata
from . import figures as F
from . import traces as T
from .controls import (
    CONTROL_WIDTH,
    CONTROLS,
    DEPENDENTS,
    FOLLOWS_WHEN_UNSET,
    GPU_COUNTS,
    LEFT_TO_CODE,
    RELEVANT,
    hidden_fields,
    lr_follows,
    sorted_options,
    tooltip_on_label,
    workers_of,
)
from .plotly_widget import FigureSlot

PREVIEW_TITLE_CHARS = 46  # the lr preview's title (the schedule in words) wraps at this many characters:
                          # one line ran past its 340 px figure ("... gradual warmup 44 steps, constant over ...")


def code_spans(text: str) -> str:
    """`text` as HTML, its `backticked` spans as code (the page showed the backticks).

    >>> code_spans("in code: `RunConfig(a=1)` or `--a` (< 2)")
    'in code: <code>RunConfig(a=1)</code> or <code>--a</code> (&lt; 2)'
    """
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


class Form:
    """The controls of a `Dashboard`, grouped, and the `RunConfig` they describe.

    Args:
        host: the dashboard: its status line, its buttons, whether it is running.
        base: the starting values (the fields without a control keep these).
    """

    def __init__(self, host: Any, base: RunConfig) -> None:
        self._host = host
        self._base = base
        self._syncing = False
        self._sim_warmed = False                        # the simulation's fork server started (simproc.warm)
        self._lr_note = ""                              # the status line's word on an lr that followed a choice
        self.changed: set[str] = set()                  # the controls the user changed since the base was set
        self.shown_config: RunConfig | None = None      # the config the preview and status show
        self.error: str | None = None                   # why the controls' config cannot run, if it cannot
        self.preview_slot: FigureSlot | None = None
        self.controls: dict[str, Any] = {}
        groups: dict[str, list] = {g: [] for g in GROUP_TITLES}
        for c in CONTROLS:
            w = tooltip_on_label(c.make(c.from_field(getattr(base, c.field))))
            w.observe(self._on_change, names="value")
            self.controls[c.field] = w
            groups[c.group].append(w)
        left_out = "; ".join(f"<code>{k}</code>: {code_spans(v)}" for k, v in LEFT_TO_CODE.items())
        self.sections: list[Any] = []
        for g, ws in groups.items():
            if ws:
                self.sections.append(widgets.HTML(f"<b>{GROUP_TITLES[g]}</b>",
                                                  layout=widgets.Layout(margin="6px 0 0 0")))
                self.sections.extend(ws)
        self.sections.append(widgets.HTML(f"<small>Hover a control for what it means. Left to code: {left_out}.</small>",
                                          layout=widgets.Layout(width=CONTROL_WIDTH)))

    def build(self) -> Any:
        """The form's column (the controls, then the schedule preview), once the dashboard
        around it exists: validates the controls first, so the preview shows their config."""
        self.refresh()                                   # validates, says "ready" or what is wrong
        self.preview_slot = FigureSlot(T.as_widget(self.preview_figure(self.shown_config)))
        self.preview_slot.box.layout.width = CONTROL_WIDTH
        # not shrunk by the column's flex layout: a widget box scrolls its overflow, so the
        # column (at most 820 px, the controls above it taller) squeezed the preview to 0 px
        self.preview_slot.box.layout.flex = "0 0 auto"
        return widgets.VBox([*self.sections, self.preview_slot.box],
                            layout=widgets.Layout(width="370px", min_width="370px", max_height="820px",
                                                  overflow="hidden auto", padding="0 8px 0 0"))

    def values(self) -> dict[str, Any]:
        """The controls' values as RunConfig fields; a field whose control is hidden (it does
        not apply: `controls.RELEVANT`, e.g. `warmup_epochs` with no warmup, `tau` with
        sync_sgd, the simulated cluster's knobs while `simulate` is off) at its default. The
        controls keep what was set, for when they show again; what a run uses, and is checked
        against, is only what the page shows (a hidden warmup_epochs of 1 must not refuse
        epochs 0.5, nor a hidden tau travel into the runs table)."""
        values = {c.field: c.to_field(self.controls[c.field].value) for c in CONTROLS}
        if not values.get("simulate"):
            # The simulated cluster's knobs are valid only with it (RunConfig refuses them otherwise)
            values.update({name: RunConfig.model_fields[name].default for name in SIM_FIELDS})
        for _ in range(3):   # a knob hidden by another hidden one (compression_ratio under compression)
            hidden = hidden_fields({**self._base.model_dump(), **values})
            defaults = {name: RunConfig.model_fields[name].default for name in hidden}
            if all(values[name] == v for name, v in defaults.items()):
                break
            values.update(defaults)
        return values

    @property
    def config(self) -> RunConfig:
        """The RunConfig the controls describe; raises ConfigError for a bad combination.

        A field of `FOLLOWS_WHEN_UNSET` goes in only once its control was changed: left alone
        it stays as the base has it, unset unless set there, so that the config works it out
        as `RunConfig` does from code and the CLI (LTFB's tournament_size on a small dataset:
        what each trainer's share can hold out, where a passed 256 was refused)."""
        values = self.values()
        for name in FOLLOWS_WHEN_UNSET:
            if name not in self.changed:
                del values[name]
        return self._base.replace(**values)

    @config.setter
    def config(self, config: RunConfig) -> None:
        self._base = config.replace(out=None)
        self.changed = set()
        self._syncing = True
        try:
            for c in CONTROLS:
                w, value = self.controls[c.field], c.from_field(getattr(config, c.field))
                if isinstance(w, widgets.SelectionSlider) and value not in w.options:
                    w.options = sorted_options(tuple(w.options), value)
                w.value = value
        finally:
            self._syncing = False
        self.refresh()

    def _on_change(self, change: dict) -> None:
        if self._syncing:
            return
        changed = next((name for name, w in self.controls.items() if w is change.get("owner")), None)
        self._lr_note = ""
        if changed is not None:
            self.changed.add(changed)
            self._fill_dependents(changed)
            self._follow_lr(changed, change.get("old"))
        self.refresh()

    def _fill_dependents(self, changed: str) -> None:
        """Give the fields that `changed`'s new value makes required a value that passes
        validation (`DEPENDENTS`), without a refresh per field."""
        rules = [d for d in DEPENDENTS if changed in d.triggers]
        if not rules:
            return
        values = {c.field: c.to_field(self.controls[c.field].value) for c in CONTROLS}
        self._syncing = True
        try:
            for d in rules:
                if d.needed(values):
                    c = next(c for c in CONTROLS if c.field == d.field)
                    values[d.field] = d.default(values)
                    w, value = self.controls[d.field], c.from_field(values[d.field])
                    if isinstance(w, widgets.SelectionSlider) and value not in w.options:
                        w.options = sorted_options(tuple(w.options), value)
                    w.value = value
        finally:
            self._syncing = False

    def _follow_lr(self, changed: str, old: Any) -> None:
        """A new update rule (or algorithm) moves lr to its default, and the status line says
        so (`controls.lr_follows`)."""
        values = {c.field: c.to_field(self.controls[c.field].value) for c in CONTROLS}
        moved = lr_follows(changed, old, values)
        if moved is None:
            return
        self._syncing = True
        try:
            self.controls["lr"].value = moved[0]
        finally:
            self._syncing = False
        self._lr_note = moved[1]

    def _show_relevant(self) -> None:
        """Show the controls that apply to what the controls say now, valid or not (a
        control that would fix an invalid combination must be on the page)."""
        values = {**self._base.model_dump(), **self.values()}
        hidden = hidden_fields(values)                 # unvalidated: `applies` reads plain fields
        for name in RELEVANT:
            self.controls[name].layout.display = "none" if name in hidden else None
        # "auto" (detect the GPUs) is no choice on a simulated cluster, which counts them
        gpus = self.controls["gpus"]
        options = list(GPU_COUNTS) if values.get("simulate") else [("auto", "auto"), *GPU_COUNTS]
        if [v for _, v in gpus._options_full] != [v for _, v in options]:
            was, self._syncing = self._syncing, True
            try:
                value = gpus.value
                gpus.options = options
                gpus.value = value if value != "auto" or not values.get("simulate") else 0
            finally:
                self._syncing = was

    def _show_unset(self, cfg: RunConfig) -> None:
        """A `FOLLOWS_WHEN_UNSET` field the config left unset: its control shows the value the
        run will use (LTFB's tournament set, 256 or fewer on a small dataset)."""
        for name in FOLLOWS_WHEN_UNSET:
            c = next(c for c in CONTROLS if c.field == name)
            value = c.from_field(getattr(cfg, name))
            if name not in cfg.model_fields_set and self.controls[name].value != value:
                was, self._syncing = self._syncing, True
                try:
                    self.controls[name].value = value
                finally:
                    self._syncing = was

    def refresh(self) -> RunConfig | None:
        """Validate the controls; redraw the schedule preview; say what is wrong, if anything.

        Leaves the status line alone when the config did not change (a frontend echoing
        a control's value back must not hide the last run's result)."""
        host = self._host
        self._show_relevant()
        try:
            cfg = self.config
            if cfg == self.shown_config:
                return cfg
            plan = Problem.from_config(cfg).plan   # the run's own plan, built once (preflight reuses it)
        except (ConfigError, ValueError) as exc:   # DataError and schedule errors are ValueErrors
            self.shown_config = None
            self.error = str(exc)
            host.set_status(f"error: {exc}", error=True)
            host.set_buttons(host.running)
            return None
        self.shown_config = cfg
        self.error = None
        self._show_unset(cfg)
        if cfg.simulate and host.sim_in_child and not self._sim_warmed:   # ready before Run is pressed
            from . import simproc
            self._sim_warmed = True
            simproc.warm()
        self.controls["alpha"].show_resolved(cfg.resolved_alpha(max(1, workers_of(cfg))))
        host.live.lineage_box.layout.display = "block" if cfg.algorithm == "ltfb" else "none"
        if self.preview_slot is not None:
            def redraw(fig: Any, series: list = figdata.planned_series(plan), title: str = plan.schedule_text) -> None:
                T.extend_series(fig, series)
                fig.layout.title.text = T.wrap_title(f"lr schedule: {title}", PREVIEW_TITLE_CHARS)
            self.preview_slot.edit(redraw)
        if not host.running:
            host.set_buttons(False)
            where = f", on {workers_of(cfg)} simulated workers" if cfg.simulate else ""
            host.set_status(f"ready: {cfg.algorithm} on {cfg.dataset}, {plan.total_steps} steps "
                            f"of {cfg.batch_size} samples{where}"
                            + (f"; {self._lr_note}" if self._lr_note else ""))
        return cfg

    @staticmethod
    def preview_figure(cfg: RunConfig | None) -> Any:
        """The schedule preview as a static figure (the widget is made from it once)."""
        fig = F.schedule_figure(Problem.from_config(cfg).plan) if cfg is not None else F._lr_base()
        title = f"lr schedule: {fig.layout.title.text}" if cfg is not None else "lr schedule"
        return fig.update_layout(height=250, margin={"t": 60, "b": 30, "l": 50, "r": 10},
                                 title=T.wrap_title(title, PREVIEW_TITLE_CHARS),
                                 title_font_size=11, showlegend=False)
