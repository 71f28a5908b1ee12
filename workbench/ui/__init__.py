"""Notebook user interface: figures, static HTML reports and the interactive dashboard.

The only part of workbench that imports plotly (`figures`, `report`) and ipywidgets
(`dashboard`, composed of `form`, `liverun` and `sweeppanel`). Names are loaded on
first use, so `import workbench.ui` stays cheap:

`Dashboard()` as a notebook cell's value shows the controls, Run/Stop and live plots
(`workbench.ui.dashboard` runs one from code).
"""
from __future__ import annotations

__all__ = ["Dashboard", "write_report", "write_comparison_report", "figures"]


def __getattr__(name: str):
    # import_module, not `from . import x`: the latter looks the name up here again.
    from importlib import import_module
    if name == "Dashboard":
        return import_module(".dashboard", __name__).Dashboard
    if name in ("write_report", "write_comparison_report"):
        return getattr(import_module(".report", __name__), name)
    if name == "figures":
        return import_module(".figures", __name__)
    raise AttributeError(f"module 'workbench.ui' has no attribute {name!r}")
