"""One config value against its field: type conversion (``--set`` text is parsed; a file's or a snapshot's values
are checked as they are, so a quoted number or true/false is refused; lists of tables), the declared range and
choices, and the secret rules for values (a key-shaped string is refused before any message could echo it). Every
problem raises ``ConfigError`` naming the dotted field. Rules that tie fields together live in
``engine.config_checks``.

One exception to "checked as they are": a choice of "auto" or an explicit on/off (``bf16``: auto | true | false,
typed ``engine.config_fields.Bf16``) takes a file's boolean as the on/off (``bf16 = false``; TRL's own YAML writes
``bf16: true``), and ``--set`` text in any case (``dpo.bf16=False``), as a bool field does. A non-string for a string
field is refused with a hint to quote it only where the quoted value could be right (a number, for a field whose
choices are not known to refuse it): never a boolean, never a value the field's choices would then refuse.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import types
import typing
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError

if TYPE_CHECKING:
    from engine.config import RunConfig

# Field names and values that carry a secret (see ``engine.config``'s docstring); the *_env fields hold variable
# NAMES.
KEY_FIELD = re.compile(r"(api_?key|token|secret|passw(or)?d)$", re.IGNORECASE)
# A key's own shape, a bearer header, a URL with a password (user:pw@), or a URL carrying a key in its query
# (``?api_key=...``, ``&token=...``, an Azure SAS ``sig=``): each would be stored with the run and shown in the studio.
KEY_VALUE = re.compile(r"(?<![A-Za-z0-9])(sk-[A-Za-z0-9_-]{12,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
                       r"|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})|Bearer\s+\S+|://[^/\s:@]+:[^/\s@]+@"
                       r"|://\S*[?&](?i:api[_-]?key|key|token|access[_-]?token|secret|passw(?:or)?d|auth|sig)=[^&#\s]")
# How alike (difflib's ratio) a key-shaped name and a field must be to read as a typo of it: a letter added or
# dropped in a long name (max_new_token: 0.96), not a different word (hf_token vs max_tokens: 0.67).
TYPO_RATIO = 0.9
USE_KEY_ENV = ("never write a key in a config (it is stored with the run and shown in the studio): put it in an "
               "environment variable and set critic.api_key_env (or tools.qa_api_key_env) to that variable's NAME")


def range_text(meta: dict[str, Any]) -> str:
    """``>= 1``, ``> 0``, ``in (0, 1]`` from a field's bounds."""
    def num(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"

    low = f"[{num(meta['ge'])}" if meta["ge"] is not None else f"({num(meta['gt'])}" if meta["gt"] is not None \
        else None
    high = f"{num(meta['le'])}]" if meta["le"] is not None else f"{num(meta['lt'])})" if meta["lt"] is not None \
        else None
    if low and high:
        return f"in {low}, {high}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {low[1:]}"
    return f"{'<=' if high[-1] == ']' else '<'} {high[:-1]}"


def choice_text(choices: typing.Sequence[str]) -> str:
    """``a, b, c``; an empty choice is a field's "unset" (data.sources[].split): named, not printed as nothing."""
    return ", ".join(repr(c) if c == "" else str(c) for c in choices)


def check_field(value: Any, meta: dict[str, Any], dotted: str, source: str | None) -> None:
    """A field's declared range or choices (declared with ``engine.config_fields.setting``)."""
    choices = meta.get("choices")
    if choices:
        for item in value if isinstance(value, list) else [value]:
            if item not in choices:
                hint = difflib.get_close_matches(str(item), choices, n=1)
                suggest = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise ConfigError(dotted, f"{item!r} is not one of {choice_text(choices)}{suggest}", source)
    bounds = {k: meta.get(k) for k in ("ge", "gt", "le", "lt")}
    if all(b is None for b in bounds.values()):
        return
    ok = ((bounds["ge"] is None or value >= bounds["ge"]) and (bounds["gt"] is None or value > bounds["gt"])
          and (bounds["le"] is None or value <= bounds["le"]) and (bounds["lt"] is None or value < bounds["lt"]))
    if not ok:
        why = f" ({meta['why']})" if meta.get("why") else ""
        raise ConfigError(dotted, f"must be {range_text(bounds)}{why}, got {value!r}", source)


def get_field(config: RunConfig, dotted: str) -> Any:
    section, name = dotted.split(".", 1)
    return getattr(getattr(config, section), name)


def coerce(value: Any, annotation: Any, dotted: str, source: str | None, text: bool = False,
           choices: typing.Sequence[str] | None = None) -> Any:
    """Check/convert one value against its field type. ``text``: the value is command-line text (``--set``, a
    phase's ``set``), so a string is parsed into the field's type; a value from a file or a stored snapshot already
    carries its type, and a string there for a number or a bool (``k = "15"``) is refused, not silently converted.
    ``choices``: a string field's declared choices where the caller has them (a ``Literal`` type carries its own);
    ``check_field`` still checks them."""
    texts = value if isinstance(value, list) else [value]
    if any(isinstance(v, str) and KEY_VALUE.search(v) for v in texts):  # checked first: later errors echo values
        raise ConfigError(dotted, f"looks like a key or a URL with a password or key in it; {USE_KEY_ENV}", source)
    hint = annotation
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
        origin = typing.get_origin(hint)
    if origin is typing.Literal:  # a string field typed as its choices (engine.config_fields.Bf16)
        hint, choices = str, typing.get_args(hint)
    if origin is list and dataclasses.is_dataclass(typing.get_args(hint)[0]):
        return _coerce_tables(value, typing.get_args(hint)[0], dotted, source, text)
    if hint in (bool, int, float) and isinstance(value, str) and not text:
        wanted = "true or false" if hint is bool else "an integer" if hint is int else "a number"
        raise ConfigError(dotted, f"expected {wanted}, got the string {json.dumps(value, ensure_ascii=False)}",
                          source)
    if origin is list:
        if isinstance(value, str) and value.startswith("["):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(dotted, f"expected a JSON list: {exc.msg} at column {exc.colno}", source) from None
        elif isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(dotted, f"expected a list of strings, got {value!r}", source)
        return list(value)
    if hint is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        if not isinstance(value, bool):
            raise ConfigError(dotted, f"expected true or false, got {value!r}", source)
        return value
    if hint in (int, float):
        if isinstance(value, bool):
            raise ConfigError(dotted, f"expected a number, got {value!r}", source)
        try:
            converted = hint(value)
        except (TypeError, ValueError):
            raise ConfigError(dotted, f"expected {'an integer' if hint is int else 'a number'}, got {value!r}",
                              source) from None
        if hint is int and isinstance(value, float) and not value.is_integer():
            raise ConfigError(dotted, f"expected an integer, got {value!r}", source)
        if hint is float and not math.isfinite(converted):  # "nan" and "inf" parse, and slip past every range
            raise ConfigError(dotted, f"expected a finite number, got {value!r}", source)
        return converted
    if hint is str:
        return _coerce_text(value, dotted, source, text, choices)
    return value


def _coerce_text(value: Any, dotted: str, source: str | None, text: bool, choices: typing.Sequence[str] | None) -> str:
    """A string field's value (``coerce``'s contract; ``choices`` None: none, or not known here)."""
    on_off = choices is not None and {"true", "false"} <= set(choices)
    if on_off and isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value.lower() if on_off and text and value.lower() in choices else value
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if text and number:  # from the command line everything is text
        return str(value)
    # From a file a number is refused as a string is for a number (``path = 5`` read as the file "5"). Quoting is
    # offered only where the quoted value could then pass: a boolean in quotes is Python's "False", not TOML's
    # false, and rarely meant as text; where the choices are known, naming them says what would pass.
    if choices:
        raise ConfigError(dotted, f"expected one of {choice_text(choices)}, got {value!r}", source)
    quoted = f" (write it in quotes: \"{value}\")" if number else ""
    raise ConfigError(dotted, f"expected a string, got {value!r}{quoted}", source)


def _coerce_tables(value: Any, cls: type, dotted: str, source: str | None, text: bool) -> list[Any]:
    """A list of tables (``[[data.sources]]``; from ``--set``: a JSON list of objects) as ``cls`` instances, each
    field coerced and range-checked; errors name the item, 1-based: ``data.sources[2].format``. JSON text (from
    ``--set``) is parsed once, and its items then carry JSON's types as a file's do: ``{"iterations": "2"}`` is
    refused like ``iterations = "2"`` in a file."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(dotted, f"expected a JSON list of tables: {exc.msg} at column {exc.colno}",
                              source) from None
        text = False
    if not isinstance(value, list):
        raise ConfigError(dotted, f"expected a list of tables ([[{dotted}]]), got {value!r}", source)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    items = []
    for index, item in enumerate(value, start=1):
        where = f"{dotted}[{index}]"
        if dataclasses.is_dataclass(item):
            item = dataclasses.asdict(item)
        if not isinstance(item, dict):
            raise ConfigError(where, f"expected a table of fields, got {item!r}", source)
        values = {}
        for name, raw in item.items():
            if name not in fields:
                raise unknown_field(name, list(fields), f"{where}.{name}", source)
            values[name] = coerce(raw, hints[name], f"{where}.{name}", source, text,
                                  fields[name].metadata.get("choices"))
            check_field(values[name], dict(fields[name].metadata), f"{where}.{name}", source)
        items.append(cls(**values))
    return items


def unknown_field(name: Any, known: list[str], dotted: str, source: str | None) -> ConfigError:
    """The error for a key that names no field (``known``: the fields, in the order listed). A key-shaped name
    (``api_key``, ``hf_token``) is refused as a secret, unless it is one slip away from a field: ``max_new_token`` is
    a typo of ``max_new_tokens``, not a key (neither message echoes the value)."""
    if KEY_FIELD.search(str(name)) and not difflib.get_close_matches(str(name), known, n=1, cutoff=TYPO_RATIO):
        return ConfigError(dotted, USE_KEY_ENV, source)
    return ConfigError(dotted, f"unknown field{suggest(name, known)} (known: {', '.join(known)})", source)


def suggest(name: Any, known: Any) -> str:
    """``; did you mean 'k'?`` for a misspelt name, else nothing."""
    close = difflib.get_close_matches(str(name), sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
