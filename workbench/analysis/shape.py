"""Verdicts on a reproduction's expected shape, written by the experiment notebooks."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class ShapeChecks:
    """Collects `check(id, held, measured)` calls and writes `out_dir/shape.json`.

    >>> checks = ShapeChecks()
    >>> checks.check("faster", 2.0 > 1.0, "2.0x")
    True
    >>> checks.verdicts[0]["held"]
    True
    """

    def __init__(self) -> None:
        self.verdicts: list[dict[str, Any]] = []

    def check(self, id: str, held: bool, measured: str) -> bool:
        """Record whether the expected shape `id` held, with what was measured."""
        self.verdicts.append({"id": id, "held": bool(held), "measured": str(measured)})
        return bool(held)

    def write(self, out_dir: str | Path) -> Path:
        path = Path(out_dir) / "shape.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.verdicts, indent=2))
        return path

    def table(self) -> Any:
        """The verdicts as a pandas DataFrame (for the notebook to show)."""
        import pandas as pd
        return pd.DataFrame(self.verdicts, columns=["id", "held", "measured"])
