"""The values maths tools return, and the text the planner sees for them.

``MathValue`` is an exact sympy value plus whether its input had decimals; ``Equation`` is ``lhs = rhs`` held as a
value between steps (SetEquation's result; ``engine.tools.expressions`` explains where one may stand in a formula).
An ``Equation`` is no sympy object and cannot become one (``CantSympify``), so it never reaches sympy's text fallback.

Rendering (``value_to_text``): integers as ``18``; a non-integer rational as a decimal (``0.75``) when the input
that produced it had a decimal literal or a percent, else as ``p/q`` (``7/2``); irrational numbers to 12
significant digits; booleans as ``True``/``False``; expressions with ``^`` for powers; tuples comma-joined; an
equation as written when it names no earlier variable, else as ``lhs = rhs`` from its built sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
from sympy.core.sympify import CantSympify

from engine.tools.base import ToolError

MAX_DECIMAL_PLACES = 40  # an exact decimal longer than this renders to 12 significant digits


@dataclass(frozen=True)
class MathValue:
    """An exact sympy value plus how to render it (``decimal``: the input had decimals or percents)."""

    value: Any
    decimal: bool = False

    def __str__(self) -> str:
        return value_to_text(self)


@dataclass(frozen=True)
class Equation(CantSympify):
    """``lhs = rhs`` held as a value between steps (SetEquation's result; arithmetic on one keeps it an equation).

    ``text`` is the equation as the model wrote it and is what it renders as; it is empty when the written form named
    earlier variables or the equation was derived (``R1 - R2``), and the built sides render instead. CantSympify: a
    path that handed it to sympy would fail there instead of falling back to parsing ``str(value)``.
    """

    lhs: Any
    rhs: Any
    decimal: bool = False
    text: str = ""

    def __str__(self) -> str:
        return value_to_text(self)

    @property
    def expression(self) -> Any:
        """``lhs - rhs``: what a solver sets to zero."""
        return self.lhs - self.rhs


def is_system(value: Any) -> bool:
    """Several equations bound to one name (``R1 = SetEquation(x + y = 10, x - y = 2)``)."""
    return isinstance(value, tuple) and bool(value) and all(isinstance(v, Equation) for v in value)



# ---------------------------------------------------------------- rendering


def value_to_text(value: Any) -> str:
    """Render a tool value as the text the planner sees (see the module docstring for the rules)."""
    if isinstance(value, MathValue):
        return render(value.value, value.decimal)
    if isinstance(value, Equation):
        return value.text or f"{render(value.lhs, value.decimal)} = {render(value.rhs, value.decimal)}"
    if isinstance(value, (tuple, list)):
        return ", ".join(value_to_text(v) for v in value)
    if isinstance(value, sympy.Basic):
        return render(value, False)
    return str(value)


def render(v: Any, decimal: bool) -> str:
    if isinstance(v, bool) or v in (sympy.true, sympy.false):
        return "True" if bool(v) else "False"
    if isinstance(v, (tuple, list, sympy.Tuple)):
        return ", ".join(render(x, decimal) for x in v)
    if not isinstance(v, sympy.Basic):
        return str(v)
    if v.is_Integer:
        return _digits(int(v))
    if v.is_Rational:
        return _decimal_text(v) if decimal else f"{_digits(v.p)}/{_digits(v.q)}"
    if v.is_number and v.is_real and v.is_finite:
        return _trim(sympy.N(v, 12))
    try:
        return sympy.sstr(v).replace("**", "^")
    except ValueError:  # an integer past Python's digit limit inside it (the builder's bounds should catch it first)
        raise ToolError("number too large to write out") from None


def _digits(n: int) -> str:
    """``n`` in decimal; a ``ToolError`` past Python's limit on converting an int to text (4,300 digits by default:
    ``engine.tools.expressions.MAX_BITS`` keeps every built number under it, this is the guard of last resort)."""
    try:
        return str(n)
    except ValueError:
        raise ToolError("number too large to write out") from None


def _decimal_text(v: sympy.Rational) -> str:
    # v * 10**k is whole exactly when 2**a * 5**b (q's only factors, for a terminating decimal) divides 10**k.
    q, counts = v.q, []
    for prime in (2, 5):
        count = 0
        while q % prime == 0:
            q, count = q // prime, count + 1
        counts.append(count)
    places = max(counts)
    # Not a terminating decimal, or one too long to be worth writing out (1/2**1000 has 1,000 places): 12 digits.
    if q != 1 or places > MAX_DECIMAL_PLACES:
        return _trim(sympy.N(v, 12))
    text = f"{abs(v.p) * 10**places // v.q:0{places + 1}d}"
    sign = "-" if v < 0 else ""
    return f"{sign}{text[:-places]}.{text[-places:]}" if places else f"{sign}{text}"


def _trim(number: Any) -> str:
    text = str(number)
    if "e" in text or "." not in text:
        return text
    return text.rstrip("0").rstrip(".")
