"""Where a bad config value came from, for ``engine.config.load_config``'s errors.

``override_source(field, overrides)`` is the ``--set section.field=value`` that set a failing field (None when the
command line did not set it), with a key-shaped name or value shown as ``<hidden>``. The file's line of a field is
``engine.config_lines.file_line_source``.
"""

from __future__ import annotations

import re
from typing import Any

from engine.config_values import KEY_FIELD, KEY_VALUE


def override_source(field_name: str, merged: dict[str, dict[str, Any]]) -> str | None:
    """``--set section.field=value`` when the failing field (``data.sources[2].format``: its ``data.sources``; an
    unknown section: its name) was set on the command line; a key-shaped name or value is not echoed."""
    dotted = re.match(r"[^\[]*", field_name).group()
    section, _, name = dotted.partition(".")
    if section not in merged or (name and name not in merged[section]):
        return None
    if not name:  # the section itself (unknown): the first override that named it
        name = next(iter(merged[section]))
    value = str(merged[section][name])
    hidden = KEY_FIELD.search(name) or KEY_VALUE.search(value)
    shown = "<hidden>" if hidden else value if len(value) <= 60 else value[:57] + "..."
    return f"--set {section}.{name}={shown}"
