"""A throwaway JupyterLab server for browser tests.

    nb = copy_notebook(src, workdir, parameters={"quick": True})   # papermill-style injection
    with JupyterLab(workdir) as lab:
        lab.url("lab/tree/" + nb.name)                               # token included

The server listens on 127.0.0.1 on a port the OS picks (read back from its runtime
file), with a random token, no browser, root allowed, its config / data / runtime /
settings / workspace dirs all inside a temp dir (so a user's ~/.jupyter and
~/.local/share/jupyter can neither change nor be changed by the test), and the kernel
of the Python running the tests (the project venv). Every JupyterLab update and news
check is off: the network is closed. `stop()` asks it to shut down (which ends its
kernels), then terminates and finally kills whatever of its process tree is left, so
kernels and the Dask workers they started never outlive the test.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import nbformat

# JupyterLab user settings: no news / update checks (closed network, no toast in screenshots).
USER_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
}


def copy_notebook(src: Path, workdir: Path, parameters: dict[str, Any] | None = None) -> Path:
    """Copy `src` into `workdir`, outputs stripped, `parameters` injected after the parameters cell.

    As papermill does: a cell tagged `injected-parameters` right after the cell tagged
    `parameters` (or first, if there is none). The original is never written.
    """
    nb = nbformat.read(str(src), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata.pop("widgets", None)
    if parameters:
        source = "# Parameters injected by tests/test_browser.py\n" + "".join(
            f"{k} = {v!r}\n" for k, v in parameters.items())
        injected = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
        at = next((i + 1 for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])), 0)
        nb.cells.insert(at, injected)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    dst = Path(workdir) / Path(src).name
    nbformat.write(nb, str(dst))
    return dst


class JupyterLab:
    """JupyterLab serving `root` on 127.0.0.1; a context manager."""

    def __init__(self, root: Path, start_timeout: float = 60.0, python: str = sys.executable):
        self.root = Path(root)
        self.start_timeout = start_timeout
        self.python = python
        self.token = secrets.token_hex(24)
        self.state = self.root.parent / f"{self.root.name}-jupyter-state"
        self.log_path = self.state / "jupyterlab.log"
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._log = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> JupyterLab:
        for sub in ("config", "data", "runtime", "settings", "workspaces", "ipython"):
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        for name, settings in USER_SETTINGS.items():
            path = self.state / "settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(settings))
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(self.state / "config"),      # no user config
            JUPYTER_DATA_DIR=str(self.state / "data"),          # no user kernels: the venv's own
            JUPYTER_RUNTIME_DIR=str(self.state / "runtime"),    # the server's info file lands here
            IPYTHONDIR=str(self.state / "ipython"),
            JUPYTER_PLATFORM_DIRS="1",
            PYTHONUNBUFFERED="1",
        )
        env.pop("JUPYTER_PORT", None)
        env.pop("JUPYTER_TOKEN", None)
        cmd = [
            self.python, "-m", "jupyter", "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.port=0",                    # the OS picks a free port; read back below
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            "--ServerApp.allow_root=True",
            "--ServerApp.allow_remote_access=False",
            f"--ServerApp.root_dir={self.root}",
            "--ServerApp.terminals_enabled=False",
            "--KernelSpecManager.ensure_native_kernel=True",
            "--LabApp.expose_app_in_browser=True",   # window.jupyterapp: run commands, read the notebook model
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
            f"--LabApp.user_settings_dir={self.state / 'settings'}",
            f"--LabApp.workspaces_dir={self.state / 'workspaces'}",
        ]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        runtime = self.state / "runtime"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.proc.returncode} before it was ready:\n"
                                   f"{self.log_tail()}")
            if self.port is None:
                for info in runtime.glob(f"jpserver-{self.proc.pid}.json"):
                    try:
                        self.port = int(json.loads(info.read_text())["port"])
                    except (ValueError, KeyError):
                        pass                                   # written but not complete yet
            if self.port:
                try:
                    status = self.api("GET", "api/status", timeout=5)
                    if "started" in status:
                        return
                except (urllib.error.URLError, OSError, ValueError):
                    pass
            time.sleep(0.25)
        raise TimeoutError(f"JupyterLab not ready after {self.start_timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """Shut the server and its kernels down; terminate, then kill, whatever of them lingers.

        Kernels run in sessions of their own (jupyter_client starts them so), so the
        server's process tree is taken before shutting down, and every process of it
        (kernels, the Dask workers they started) is ended by pid if it outlives the
        shutdown.
        """
        proc = self.proc
        if proc is None:
            return
        try:
            family = _process_tree(proc.pid)
            if proc.poll() is None and self.port:
                try:
                    self.api("POST", "api/shutdown", timeout=5)   # ends the kernels too
                except (urllib.error.URLError, OSError, ValueError):
                    pass
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            _end_processes(family + _process_tree(proc.pid))
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        finally:
            self.proc = None
            if self._log is not None:
                self._log.close()
                self._log = None

    def __enter__(self) -> JupyterLab:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ access
    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def url(self, path: str) -> str:
        """`path` on the server, with the token."""
        sep = "&" if "?" in path else "?"
        return f"{self.base}{path}{sep}token={self.token}"

    def api(self, method: str, path: str, timeout: float = 10.0) -> dict:
        request = urllib.request.Request(self.base + path, method=method,
                                         headers={"Authorization": f"token {self.token}"},
                                         data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else {}

    def log_tail(self, chars: int = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no JupyterLab log)"
        return text[-chars:]


def _process_tree(pid: int) -> list:
    """psutil.Process of `pid` and all its descendants (empty if it has gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _end_processes(procs: list, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, the still-running processes among `procs` (psutil checks pid reuse)."""
    import psutil

    def running(p) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    alive = [p for p in procs if running(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not alive:
            return
        for p in alive:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(alive, timeout=grace)


def kernel_commands(lab: JupyterLab) -> list[list[str]]:
    """Command lines of the server's running ipykernel processes (to check they run the venv's Python)."""
    found = []
    for p in _process_tree(lab.proc.pid)[1:] if lab.proc else []:
        try:
            cmd = p.cmdline()
        except Exception:
            continue
        if "ipykernel_launcher" in cmd:
            found.append(cmd)
    return found
