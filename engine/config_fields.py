"""How a config field is declared: ``setting(default, help, ...)`` is a dataclass field carrying its help text and
the values it accepts, which ``engine.config_checks.validate`` enforces and the studio's config editor shows. Also the
bounds and choices more than one config module shares.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal, get_args

SEED_MAX = 2**32 - 1  # numpy's seed range; torch and random accept it too
# bf16's type: "auto" or an explicit on/off. Typed as its choices, not as str, so the value check
# (engine.config_values.coerce) knows it is a tri-state and reads a file's boolean (bf16 = false) as "false".
Bf16 = Literal["auto", "true", "false"]
BF16: tuple[str, ...] = get_args(Bf16)


def setting(default: Any, help: str, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
       lt: float | None = None, choices: tuple[str, ...] | None = None, why: str = "") -> Any:
    """A dataclass field carrying its help text and what values it accepts.

    ``ge``/``gt``/``le``/``lt`` bound a number; ``choices`` lists the allowed strings (for a list field: the
    allowed items); ``why`` is added to the range error.
    ``engine.config_checks.validate`` reads them, the studio's config editor shows ``help``.
    """
    meta = {"help": help, "ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "why": why}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)
