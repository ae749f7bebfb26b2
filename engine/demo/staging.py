"""Build into a partial directory, then move into place whole: ``build_into(out, build)``.

``build(staging)`` writes everything into ``<out>.partial-<pid>`` (``staging_dir``: a sibling, so the final moves
are renames on one filesystem). An error or Ctrl-C (``KeyboardInterrupt``) partway removes that directory and leaves
``out`` as it was; once ``build`` returns, ``move_into_place`` puts each of its entries at its place in ``out``
(agents first, ``build.json`` last) and replaces only what was built: anything else in ``out`` stays.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class NotAFolderError(ValueError):
    """``out`` exists and is a file."""


def staging_dir(out: Path) -> Path:
    """Where a build of ``out`` is written before it is moved into place: a sibling (so the final moves are renames
    on one filesystem), named for this process (two builds of one --out never share it)."""
    out = out.resolve()  # "." or "assets/demo/" have no usable name of their own
    return out.parent / f"{out.name}.partial-{os.getpid()}"


def move_into_place(staging: Path, out: Path) -> None:
    """Put each entry of the finished ``staging`` at its place in ``out`` and remove ``staging``. A new ``out`` is one
    rename. Otherwise an agent directory is swapped by two renames (the old one into ``staging``, removed with it)
    and a file by one atomic ``os.replace``, agents first, ``build.json`` last; what ``staging`` lacks (a role not
    rebuilt, other files) stays."""
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(out)
        return
    entries = sorted(staging.iterdir(), key=lambda e: (not e.is_dir(), e.name == "build.json", e.name))
    for entry in entries:
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            target.rename(staging / f"{entry.name}.replaced")
            entry.rename(target)
        else:
            os.replace(entry, target)
    shutil.rmtree(staging)


def build_into(out: Path, build: Callable[[Path], T]) -> T:
    """``build(staging)``'s result, its files moved into ``out`` once it has returned; nothing changes in ``out`` if
    it raises (Ctrl-C included). Raises ``NotAFolderError`` when ``out`` is a file, before anything is built."""
    if out.exists() and not out.is_dir():
        raise NotAFolderError(f"{out} is a file, not a directory")
    staging = staging_dir(out)
    shutil.rmtree(staging, ignore_errors=True)  # left by a killed process that had this pid
    try:
        result = build(staging)
    except BaseException:  # KeyboardInterrupt included: out stays as it was
        shutil.rmtree(staging, ignore_errors=True)
        raise
    # Outside the try: interrupted between its renames, the partial directory (holding any agent already swapped
    # out) must stay for a person to look at, not be removed with what it holds.
    move_into_place(staging, out)
    return result
