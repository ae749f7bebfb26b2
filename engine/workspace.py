"""Confining paths that arrive over the network to a workspace root.

Contract:

* ``inside(root, path, what)`` resolves ``path`` the way the engine will open it (relative paths from the working
  directory, symlinks followed) and returns it when it is ``root`` or below it; otherwise (``../`` escapes, absolute
  paths elsewhere, a symlink inside the root that points out) it raises ``PathOutsideWorkspace`` naming ``what`` and
  the path as given, never the root or the resolved path (the message reaches a browser).
* ``config_paths_inside(config, root)`` applies ``inside`` to every path field of a run config (``CONFIG_PATHS``,
  each ``data.sources`` file, plus ``critic.model`` for the hf critic and ``launch.accelerate_config`` in
  accelerate mode) and raises ``ConfigError`` naming the first field outside the root. Empty fields are skipped; a
  hub id (``org/model``) is judged as the relative path it would also be.
* The studio applies both to everything a browser can send (the Run tab's config, the Export tab's file). The CLI
  does not: its caller already owns the shell and the files (``python -m engine export --out`` writes anywhere).
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.config import RunConfig
from engine.errors import ConfigError

# Config fields naming a file or directory the engine reads or writes.
CONFIG_PATHS = ("run.workdir", "data.tasks", "data.ground", "data.exclude_tasks", "sft.original_data", "planner.path",
                "planner.adapter", "grounder.path", "grounder.adapter", "tools.corpus")


class PathOutsideWorkspace(ValueError):
    """A user-supplied path that resolves outside the workspace root."""


def inside(root: str | Path, path: str | Path, what: str = "path") -> Path:
    """``path`` resolved (from the working directory, symlinks followed) if it lies in ``root``; else raises."""
    base = Path(root).resolve()
    resolved = Path(path).expanduser().resolve()  # relative -> from cwd, as open() and the engine see it
    if resolved != base and base not in resolved.parents:
        # Neither the root nor the resolved path: the message reaches a browser, and a server's directory layout
        # is not a visitor's to see (a Space's /home/user/app). The path as sent, and why it is out.
        linked = Path(os.path.abspath(Path(path).expanduser())) != resolved
        how = " (through a symbolic link that points out of it)" if linked else ""
        raise PathOutsideWorkspace(f"{what} must be inside the workspace; {str(path)!r} is outside it{how}")
    return resolved


def config_paths_inside(config: RunConfig, root: str | Path) -> None:
    """Raise ``ConfigError`` for the first path field of ``config`` outside ``root`` (see the module docstring)."""
    fields = list(CONFIG_PATHS) + (["critic.model"] if config.critic.backend == "hf" else []) + (
        ["launch.accelerate_config"] if config.launch.mode == "accelerate" else [])  # only read in that mode
    if config.data.sources:  # they replace data.tasks/ground, which then name nothing the engine opens
        fields = [f for f in fields if f not in ("data.tasks", "data.ground")]
    checks = [(dotted, getattr(getattr(config, dotted.split(".")[0]), dotted.split(".")[1])) for dotted in fields]
    for index, item in enumerate(config.data.sources, start=1):
        checks += [(f"data.sources[{index}].path", item.path), (f"data.sources[{index}].ground", item.ground)]
    for dotted, value in checks:
        if not value:
            continue
        try:
            inside(root, value, dotted)
        except PathOutsideWorkspace as exc:
            raise ConfigError(dotted, f"{exc} (the studio only reads and writes inside its workspace)") from None
