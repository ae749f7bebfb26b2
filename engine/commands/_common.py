"""Helpers shared by command modules: JSON printing and turning engine errors into exit codes."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from engine.errors import ConfigError, DataError


def print_json(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, indent=None, default=str))


def fail(exc: Exception) -> int:
    """Print a located error on stderr and return the exit code for bad input."""
    if isinstance(exc, (DataError, ConfigError)):
        print(f"error: {exc}", file=sys.stderr)
        return 2
    raise exc


def quiet_libraries() -> None:
    """Silence the progress bars ``datasets`` draws while TRL's trainers tokenize their rows and the "Loading
    weights" bar transformers draws for every model load (``--quiet``): in this process, and through the
    environment in the worker processes it starts."""
    os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # transformers reads it at import (a worker's)
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
