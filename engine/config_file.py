"""Reading a run config file into a dict of sections, before any field is checked (``engine.config.load_config``).

``read_config_file(path)`` reads TOML, or YAML for ``.yaml``/``.yml`` (with YAML 1.2's floats, so ``1e-6`` is a
number as a TRL or LLaMA-Factory YAML means it); a UTF-8 BOM is allowed. A file that cannot be read, is not UTF-8 or
does not parse raises ``ConfigError`` naming the file (``<file>``, ``<yaml>``, ``<toml>``), a TOML syntax error with
its line (``FILE:LINE``) as every other config error names it. A YAML mapping that gives one key twice is an error
at the second (TOML refuses it itself; PyYAML would keep the last silently).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from engine.errors import ConfigError


class DuplicateKey(Exception):
    """A YAML mapping names one key twice (``key``, the lines of its first and second use)."""

    def __init__(self, key: str, first: int, again: int):
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


def _yaml_loader() -> type:
    """PyYAML's safe loader with YAML 1.2's floats: YAML 1.1 reads ``1e-6`` (no dot) as a string, and a file's
    string for a number field is refused, so ``learning_rate: 1e-6`` -- the way a TRL or LLaMA-Factory YAML writes
    it -- would be an error the user never made. A subclass, so PyYAML's own SafeLoader is left as it is."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
            # PyYAML keeps the last of a key given twice, silently: a second [sample]-like block would replace the
            # first whole. Checked before merge keys ("<<") are flattened, which may be overridden on purpose.
            seen: dict[str, int] = {}
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in seen:
                        raise DuplicateKey(key.value, seen[key.value], key.start_mark.line + 1)
                    seen[key.value] = key.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    # Only what YAML 1.1 misses, a number with an exponent (1e-6, 2.5E3): "15" stays an int and "08" a string.
    Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                                 re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
                                 list("-+.0123456789"))
    return Loader


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The file's tables as a dict (``{}`` for an empty YAML file); unchecked, ``load_config`` validates them."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM from a Windows editor is not an error
    except UnicodeDecodeError as exc:
        raise ConfigError("<file>", f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})",
                          str(path)) from None
    except OSError as exc:
        raise ConfigError("<file>", f"cannot read: {exc.strerror}", str(path)) from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.load(text, Loader=_yaml_loader()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError("<yaml>", str(exc).replace("\n", " "), str(path)) from None
        except DuplicateKey as exc:
            raise ConfigError(exc.key, f"given twice (first on line {exc.first}); YAML would keep only the last and "
                                       "drop the first without a word", f"{path}:{exc.again}") from None
        return data
    import tomllib  # Python >= 3.11 (pyproject's requires-python)

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # "FILE:LINE: <toml>: what (column C)", the place every other error names (Python 3.11 gives the place
        # only in the message's tail, "(at line L, column C)").
        where = re.search(r"\s*\(at line (\d+), column (\d+)\)$", str(exc))
        if where is None:
            raise ConfigError("<toml>", str(exc), str(path)) from None
        message = f"{str(exc)[:where.start()]} (column {where.group(2)})"
        raise ConfigError("<toml>", message, f"{path}:{where.group(1)}") from None
