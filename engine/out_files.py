"""Where the engine's output files go: one writer for tasks, exports, traces and the evaluation cache.

``write_file(path, mode, fill)`` runs ``fill`` on the open file:

* A regular file, new or replaced, is written to a temp file of a unique name beside it (``.NAME.<hex>.tmp``) and
  renamed into place: a reader never sees half a file, two writers never share a temp file, and any failure (Ctrl-C
  included) removes the temp file and leaves the file as it was. It gets the mode ``open(path, "w")`` would give it:
  the replaced file's, else ``0o666`` less the umask. A folder that takes no new file raises ``OSError`` naming the
  folder, before ``fill`` runs; ``probe_out(path)`` asks the same up front.
* A symlink is followed: its final target is replaced as above (temp file beside the target), the link kept.
* A path that is no regular file (a FIFO, a character device such as a terminal) or that names an open file
  descriptor (``/dev/stdout``, ``/dev/fd/N``, ``/proc/<pid>/fd/N``, whatever it is open on) is written straight into,
  appending as a shell's ``>>`` does: no rename can reach it, so nothing there is atomic.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_file(path: str | Path, mode: str, fill: Callable[[Any], object]) -> None:
    """Run ``fill`` on ``path`` opened with ``mode`` (``"w"`` or ``"wb"``) as the module docstring says: a regular
    file (a symlink's target) through a temp file renamed over it, anything else straight."""
    target = out_target(Path(path))
    encoding = None if "b" in mode else "utf-8"
    if target is None:
        # Append, not truncate: under /dev/stdout may be the shell's ``>>`` file, and a pipe or device ignores it.
        with open(path, mode.replace("w", "a"), encoding=encoding) as out:
            fill(out)
        return
    fd, tmp = create_temp(target)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as out:
            fill(out)
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_FD_FOLDER = re.compile(r"/proc/[^/]+/fd")  # /dev/fd and /proc/self/fd resolve here


def out_target(path: Path) -> Path | None:
    """The regular file a write to ``path`` replaces: ``path`` itself, or the end of its symlinks (renaming over the
    link replaced the link and left its target as it was); ``None`` when ``path`` is to be written straight into.

    A descriptor's link is ``None`` even onto a regular file: the rename would swap the file under a shell's
    ``>>`` (losing what it held) or hand the data to a deleted file's name."""
    link = Path(os.path.abspath(path))
    for _ in range(40):  # Linux's own limit on links followed; a loop then fails in ``os.stat`` below
        if not link.is_symlink():
            break
        folder = os.path.realpath(link.parent)
        if _FD_FOLDER.fullmatch(folder):
            return None
        link = Path(folder, os.readlink(link))
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
    except FileNotFoundError:  # a new file, or a link to one: created where the link points, as ``open`` does
        pass
    return Path(os.path.realpath(path))


def probe_out(path: str | Path) -> None:
    """Raise the ``OSError`` writing ``path`` would meet at its first step (the folder takes no new file), leaving
    nothing behind: a command that works for a while before it writes asks first. A path written straight into is
    only opened when written."""
    target = out_target(Path(path))
    if target is not None:
        fd, tmp = create_temp(target)
        os.close(fd)
        tmp.unlink(missing_ok=True)


def create_temp(path: Path) -> tuple[int, Path]:
    """An empty temp file beside ``path`` (same filesystem, so the rename is atomic), opened for writing.

    Not ``tempfile.mkstemp``: it makes ``0o600`` files, which the rename then handed to the user as the file's own
    mode. Created with ``0o666`` the kernel applies the umask, exactly as ``open()`` does (reading the umask means
    setting it, which races the studio's other threads); a file being replaced lends its mode, as it keeps it under
    ``open(path, "w")``. ``OSError`` when the folder takes no new file, its message naming the folder (the raw one
    names the temp file, which the user never asked for)."""
    try:
        mode: int | None = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = None
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        except OSError as exc:
            raise OSError(exc.errno, f"cannot create a file in {path.parent} ({exc.strerror})") from None
        if mode is not None:
            try:
                os.chmod(tmp, mode)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
        return fd, tmp
    raise FileExistsError(f"no free temp file name beside {path}")
