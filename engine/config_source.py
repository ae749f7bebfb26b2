"""Where a bad config value came from, for ``engine.config.load_config``'s errors.

``override_source(field, overrides)`` is the ``--set section.field=value`` that set a failing field (None when the
command line did not set it), with a key-shaped name or value shown as ``<hidden>``; ``file_line_source(path,
field)`` is ``path:line`` of the field in a TOML file, found by a line scan (tomllib keeps no positions), or None
when the scan cannot name exactly one line: no line beats a wrong one.
"""

from __future__ import annotations

import re
from pathlib import Path
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


_TABLE_HEADER = re.compile(r"\s*(\[\[?)\s*([A-Za-z0-9_.\s-]+?)\s*\]\]?\s*(#.*)?")
_QUOTED_HEADER = re.compile(r"\s*\[\[?\s*[\"']")


def file_line_source(path: Path, field_name: str) -> str | None:
    """``path:line`` of the field in a TOML file (tomllib keeps no positions): the line ``name = ...`` under its
    ``[section]`` (or ``[[section.list]]`` table number N, for ``section.list[N].name``), or ``section.name = ...``
    before any header; the header line itself for an error about a whole section or table. None when the file is not
    TOML or the scan does not find exactly one such line (an inline table, a quoted key): no line beats a wrong one."""
    found = re.fullmatch(r"([\w-]+)(?:\.([\w-]+))?(?:\[(\d+)\])?(?:\.([\w-]+))?", field_name)
    if path.suffix != ".toml" or not found:
        return None
    section, name, index, item_name = found.groups()
    if index:  # section.list[N] or section.list[N].name: the Nth [[section.list]] table
        table, key = f"{section}.{name}[{index}]", item_name
    elif item_name:
        return None
    else:
        table, key = (section, name) if name else ("", None)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    current, counts, hits, in_string = "", {}, [], False
    for number, line in enumerate(lines, start=1):
        odd = (line.count('"""') + line.count("'''")) % 2 == 1  # a multi-line string opens or closes here
        if in_string:
            in_string = not odd
            continue
        in_string = odd  # the line that opens one may still be the key's own line
        header = _TABLE_HEADER.fullmatch(line)
        if not header and _QUOTED_HEADER.match(line):  # ["a.b"]: a table this scan cannot name; its keys match nothing
            current = "?"
            continue
        if header:
            current = re.sub(r"\s*\.\s*", ".", header.group(2))
            if header.group(1) == "[[":
                counts[current] = counts.get(current, 0) + 1
                current = f"{current}[{counts[current]}]"
            if key is None and current == (table or section):
                hits.append(number)
            continue
        if key is None:
            continue
        if current == table and re.match(rf"\s*{re.escape(key)}\s*=", line):
            hits.append(number)
        elif current == "" and not index and re.match(rf"\s*{re.escape(section)}\s*\.\s*{re.escape(key)}\s*=",
                                                      line):
            hits.append(number)
    return f"{path}:{hits[0]}" if len(hits) == 1 else None
