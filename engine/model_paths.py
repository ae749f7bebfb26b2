"""Whether a model path is a local directory that is missing, or a Hugging Face hub id worth asking the hub about.

Contract: ``missing_model_directory(path)`` is True when ``path`` is no directory on this disk and cannot be a hub
id either, so a checker can say ``no such model directory`` at once instead of asking the hub (which retries for
about 25 s and then fails with a network error). A path is local, never a hub id, when it

* exists as something other than a directory (a file);
* lacks the hub's ``org/name`` form (``HUB_ID``): an absolute path, one with more than two components, ...;
* starts with ``.`` or ``~`` (``./planner``, ``../agents/grounder``, ``~/models/x``): the hub refuses names that
  start with ``.``, and ``~`` is the home directory;
* has a first component that is a directory here, relative to the working directory (``runs/demo-joint`` beside a
  ``runs/`` folder: a checkpoint not built yet, not the model ``demo-joint`` of a hub user ``runs``), or is
  ``runs``, the engine's default ``run.workdir``, which a fresh clone does not have yet (the presets' ``runs/...``
  agents are built there: before, such a path was asked of the hub for about 35 s).

Anything else of the ``org/name`` form (``HuggingFaceTB/SmolLM2-135M`` with no ``HuggingFaceTB/`` folder here) is a
hub id and False: the loaders resolve it on the hub.
"""

from __future__ import annotations

import re
from pathlib import Path

HUB_ID = re.compile(r"[\w.-]+/[\w.-]+\Z")  # "org/name"
DEFAULT_WORKDIR = "runs"  # engine.config.RunSection.workdir's default (not imported: this module stays light)


def reads_as_local(path: str) -> bool:
    """Whether ``path``, of the hub's ``org/name`` form or not, names a place on this disk (see the module
    docstring): it starts with ``.`` or ``~``, or its first component is a directory in the working directory."""
    if path.startswith((".", "~")):
        return True
    first = path.split("/", 1)[0]
    return first == DEFAULT_WORKDIR or (bool(first) and Path(first).is_dir())


def missing_model_directory(path: str) -> bool:
    """Neither a directory on this disk nor something the hub could serve (see the module docstring)."""
    local = Path(path).expanduser()
    if local.is_dir():
        return False
    return local.exists() or not HUB_ID.match(path) or reads_as_local(path)
