"""The line of a config field in its file, so an error can say ``FILE:LINE: field: message``.

``file_line_source(path, field)`` is ``path:line`` for a dotted field name as errors name it (``sample.k``,
``data.sources[2].path``, ``variants.no_critic.set``, a whole table ``sample``), or None when it cannot name exactly
one line: no line beats a wrong one; ``toml_line(text, field)`` the same for TOML text (the studio's config editor).
TOML: tomllib keeps no positions, so a line scan finds the key's line under its ``[table]`` (or ``[[array]]`` table
number N), a dotted key (``sample.k = 2``) or the table's header. YAML: PyYAML's node tree keeps them, so the key's (or
list item's) own mark. Run configs and experiment files both use it.
"""

from __future__ import annotations

import re
from pathlib import Path

_SEGMENT = re.compile(r"([\w-]+)(?:\[(\d+)\])?")
_TABLE_HEADER = re.compile(r"\s*(\[\[?)\s*([A-Za-z0-9_.\s-]+?)\s*\]\]?\s*(#.*)?")
_QUOTED_HEADER = re.compile(r"\s*\[\[?\s*[\"']")
_BARE_KEY = re.compile(r"\s*([A-Za-z0-9_-]+(?:\s*\.\s*[A-Za-z0-9_-]+)*)\s*=")


def _segments(field_name: str) -> list[tuple[str, int | None]] | None:
    """``data.sources[2].path`` -> [("data", None), ("sources", 2), ("path", None)]; None when not that shape."""
    parts = field_name.split(".")
    found = [_SEGMENT.fullmatch(part) for part in parts]
    if not field_name or not all(found):
        return None
    return [(m.group(1), int(m.group(2)) if m.group(2) else None) for m in found]


def file_line_source(path: Path, field_name: str) -> str | None:
    """``path:line`` of the field in a TOML or YAML file; None for another kind of file or no single line."""
    segments = _segments(field_name)
    if segments is None:
        return None
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None
    if path.suffix == ".toml":
        line = toml_line(text, field_name)
    elif path.suffix in (".yaml", ".yml"):
        line = _yaml_line(text, segments)
    else:
        return None
    return None if line is None else f"{path}:{line}"


def toml_line(text: str, field_name: str) -> int | None:
    """The one line whose full dotted name (its table's, then its key's) is ``field_name``, or the header of that
    table; a quoted header or key is a name this scan cannot read, so nothing under it matches."""
    current, counts, hits, in_string = "", {}, [], False
    for number, line in enumerate(text.splitlines(), start=1):
        odd = (line.count('"""') + line.count("'''")) % 2 == 1  # a multi-line string opens or closes here
        if in_string:
            in_string = not odd
            continue
        in_string = odd  # the line that opens one may still be the key's own line
        header = _TABLE_HEADER.fullmatch(line)
        if not header and _QUOTED_HEADER.match(line):
            current = "?"
            continue
        if header:
            current = re.sub(r"\s*\.\s*", ".", header.group(2))
            if header.group(1) == "[[":
                counts[current] = counts.get(current, 0) + 1
                current = f"{current}[{counts[current]}]"
            if current == field_name:
                hits.append(number)
            continue
        key = _BARE_KEY.match(line)
        if key and current != "?":
            dotted = re.sub(r"\s*\.\s*", ".", key.group(1))
            if (f"{current}.{dotted}" if current else dotted) == field_name:
                hits.append(number)
    return hits[0] if len(hits) == 1 else None


def _yaml_line(text: str, segments: list[tuple[str, int | None]]) -> int | None:
    """Follow the segments through the composed node tree (no values constructed, so no tag runs)."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    mark = None
    for name, index in segments:
        if not isinstance(node, yaml.MappingNode):
            return None
        matches = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == name]
        if len(matches) != 1:
            return None
        key, node = matches[0]
        mark = key.start_mark
        if index is not None:  # errors count list items from 1
            if not isinstance(node, yaml.SequenceNode) or not 1 <= index <= len(node.value):
                return None
            node = node.value[index - 1]
            mark = node.start_mark
    return None if mark is None else mark.line + 1
