"""What an optional feature needs, said in one line when it is missing.

The base install trains and writes run directories; figures, reports, the dashboard and
papermill reproductions need the `lab` extra, TensorBoard export the `tensorboard` extra.
A feature used without its extra raises `MissingExtra`: a ModuleNotFoundError (so every
`except ImportError` still catches it) whose message names the feature, the missing
package and the one command that installs it.
"""
from __future__ import annotations

DISTRIBUTION = "parallel-workbench"

# feature -> the extra that brings it (one place: messages, docs and tests read it here)
FEATURES: dict[str, str] = {
    "report.html": "lab",
    "compare": "lab",
    "sweep.html": "lab",
    "reproduce": "lab",
    "the dashboard": "lab",
    "figures": "lab",
    "export --tensorboard": "tensorboard",
}


class MissingExtra(ModuleNotFoundError):
    """An optional feature was used without the extra that provides it."""


def install_command(extra: str) -> str:
    """The pip command that installs `extra`.

    >>> install_command("lab")
    "pip install 'parallel-workbench[lab]'"
    """
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_extra_message(feature: str, package: str | None) -> str:
    """One line: what needs which extra, which package is missing, how to install it.

    >>> missing_extra_message("compare", "plotly")
    "compare needs the lab extra (plotly is not installed): pip install 'parallel-workbench[lab]'"
    """
    extra = FEATURES[feature]
    what = f" ({package} is not installed)" if package else ""
    return f"{feature} needs the {extra} extra{what}: {install_command(extra)}"


def missing_extra(feature: str, exc: ImportError) -> MissingExtra:
    """The MissingExtra to raise for `feature` from the ImportError that revealed it
    (`raise missing_extra("compare", exc) from None`)."""
    package = (getattr(exc, "name", None) or "").split(".")[0] or None
    error = MissingExtra(missing_extra_message(feature, package))
    error.name = package
    return error
