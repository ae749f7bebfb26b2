"""The key that encrypts what the studio keeps in a curator's browser (their name, their place, their filters).

``gr.BrowserState`` encrypts each value with a secret; Gradio's default is a new random one per server, so every
restart of the studio (a Space sleeps and wakes often) threw away every curator's name, place and filters.
``browser_secret(store_path)`` is, in order: the ``MOAT_BROWSER_SECRET`` environment variable (a Space's secret, which
outlives its disk), else a key kept beside the store in ``.moat-studio-secret`` (created once, 32 random bytes as
hex, readable by its owner only), else, where that file cannot be read or written (a read-only directory), a new
random key for this process: the old behaviour, said once on stderr.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

ENV = "MOAT_BROWSER_SECRET"
FILE_NAME = ".moat-studio-secret"


def browser_secret(store_path: str | Path) -> str:
    """The secret for the studio serving the store at ``store_path`` (see the module docstring)."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    path = Path(store_path).resolve().parent / FILE_NAME
    try:
        return _read(path) or _create(path)
    except OSError as exc:
        print(f"MOAT Studio: cannot keep a browser secret at {path} ({exc.strerror or exc}): curators' names, places "
              f"and filters are forgotten when the studio restarts (set {ENV} to keep them)", file=sys.stderr)
        return secrets.token_hex(32)


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise OSError(f"{path} is not a key this studio wrote") from None
    return text or None


def _create(path: Path) -> str:
    """Write a new key with owner-only permissions; a studio that created it first (two starting at once) wins."""
    key = secrets.token_hex(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path) or key
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key + "\n")
    return key
