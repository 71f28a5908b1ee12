"""`run_simulated`: one run on the simulated cluster, optionally over a given link (validation)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..config import ConfigError, RunConfig
from ..execution.engine import execute, transport_for
from ..results.records import OnRecord
from ..results.result import RunResult


def run_simulated(config: RunConfig, on_record: OnRecord | None = None,
                  should_stop: Callable[[], bool] | None = None, link: Any = None) -> RunResult:
    """Run `config` (with `simulate=True`) on virtual workers through the engine's one run path.

    `link` (a `costmodel.Network`) replaces the config's named network: e.g. this machine's
    link calibrated on real runs, `costmodel.calibrate(results).link("measured")`."""
    if not config.simulate:
        raise ConfigError("simulate", "true for a simulated run", config.simulate)
    t_called = time.time()
    transport = transport_for(config)
    transport.link = link
    return execute(config, transport, on_record=on_record, should_stop=should_stop, t_called=t_called)
