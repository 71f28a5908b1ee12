"""Helpers for tests/test_browser.py: a throwaway JupyterLab server and a headless Chromium.

    lab.py      start / stop JupyterLab on 127.0.0.1 in a temp dir (random port and token)
    chromium.py find Debian's Chromium and Playwright, launch and clean up the browser,
                the JS probes (plotly traces, widget status) and the widget-error patterns

Nothing here writes into the repository: notebooks are copied into pytest's tmp dir.
"""
