"""Maths expressions from model text, built as sympy objects from a whitelisted syntax tree, under limits.

Contract: model text never reaches Python's evaluator or sympy's string parser (both run code): it is normalised,
parsed by ``ast.parse`` in expression mode and walked, and only numbers, names, ``+ - * / ** // %``, comparisons,
lists/tuples and calls to ``FUNCTIONS`` are turned into sympy objects. Sizes are checked before anything is built
(text length, node count, nesting, integer size, exponents, factorials, ``exp`` arguments) and every built number is
kept under ``2**MAX_BITS`` in magnitude and every built value under ``MAX_VALUE_NODES`` nodes, so forcing digits out
of it (``floor``, ``sin``, rendering) stays cheap;
``Rk(a, b)`` substitution re-checks each rebuilt node. ``evaluate`` gives a ``MathValue`` (or an ``Equation``, see
below); bad input raises ``ToolError``.

Equations as values: ``build_equations`` turns ``lhs = rhs`` into an ``Equation`` (two built sides), which
SetEquation keeps as a variable's value. A name bound to an equation stands for that equation wherever a formula
may hold one, as Lumos substitutes it: alone (``SolveEquation(R1)``; a name bound to several equations stands for
all of them), in ``+ - * / ** // %`` and unary minus, applied side by side (``R1 - R2`` with ``R1: a = b`` and
``R2: c = d`` is ``a - c = b - d``; ``2*R1`` is ``2*a = 2*b``), and called as ``Rk(a, b)`` (both sides substituted).
Anywhere else (a function argument, a comparison, a list, one side of another ``=``) it is a ``ToolError``. An
``Equation`` is no sympy object and cannot become one (``CantSympify``), so it never reaches sympy's text fallback.

Normalisation: ``^`` -> ``**``, ``×``/``÷``; ``$`` and thousands separators (``1,000``) removed; a ``%`` right after
a number that is not followed by an operand is a percent (``15 / 25%`` = 60, ``141 % 2`` is modulo); a number
directly followed by a name or ``(`` multiplies (``2x``, ``3(x+1)``), as does ``)(``. A multi-letter unknown name
whose letters are all single-letter symbols of the same input (or of referenced values) is a product (``xy`` =
``x*y`` next to ``x`` and ``y``); otherwise it is one symbol. ``Rk(a, b)`` substitutes ``a, b`` for the free
symbols of ``Rk`` in sorted name order.

The values themselves (``MathValue``, ``Equation``) and their rendering live in ``engine.tools.math_values``.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

import sympy

from engine.tools.base import ToolError
from engine.tools.math_values import Equation, MathValue, is_system

MAX_TEXT = 2000  # characters of one formula
MAX_NODES = 600  # syntax-tree nodes of one formula
MAX_DEPTH = 60  # nesting of the syntax tree
MAX_INT_DIGITS = 60  # digits of one integer literal
MAX_EXPONENT = 1000  # |exponent| of a power
# Bits of an exact numerator/denominator: about 4,200 digits, under Python's limit on writing an int out as text
# (4,300 digits by default), so every value renders (1000! is 8,530 bits).
MAX_BITS = 14_000
MAX_FACTORIAL = 1000
MAX_EXP_ARG = 9_000  # |x| in exp(x): e**9000 is about 2**12984, under MAX_BITS
# Nodes of one built value, counted as a walk over it meets them (a subexpression used twice counts twice): what
# rendering and every sympy traversal cost. Symbols do not combine, so "R2 = R1*R1 + R1" doubles R1 at each step:
# thirteen such steps took 11 s and 400 KB of text before this bound.
MAX_VALUE_NODES = 2_000

# What sympy raises when asked for something meaningless (a tuple minus a symbol, a comparison of non-reals, an
# unsupported operator): for the user these are bad formulas, reported like any other ToolError.
SYMPY_ERRORS = (TypeError, ValueError, ArithmeticError, AttributeError, NotImplementedError, KeyError,
                sympy.SympifyError, sympy.PolynomialError)


# ---------------------------------------------------------------- normalisation and parsing

_PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*%(?!\s*[\w(.])")
_THOUSANDS = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\d,])")
_NUM_THEN_NAME = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![eE][+-]?\d)(?=[A-Za-z_(])")
EQUALS = re.compile(r"(?<![<>=!])=(?!=)")


def normalise(text: str) -> str:
    """Rewrite model-style maths into Python expression syntax (see the module docstring)."""
    text = text.replace("$", "").replace("×", "*").replace("÷", "/").replace("−", "-").replace("^", "**")
    text = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text)
    text = _PERCENT.sub(r"(\1*0.01)", text)  # a decimal literal: percents render as decimals
    text = _NUM_THEN_NAME.sub(r"\1*", text)
    return text.replace(")(", ")*(")


def _parse_tree(text: str) -> ast.expr:
    if len(text) > MAX_TEXT:
        raise ToolError(f"formula too long ({len(text)} characters; limit {MAX_TEXT})")
    source = normalise(text.strip())
    if not source:
        raise ToolError("empty formula")
    try:
        tree = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ToolError(f"cannot parse formula {text.strip()[:80]!r}") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise ToolError(f"formula too large ({nodes} syntax nodes; limit {MAX_NODES})")
    return tree


# ---------------------------------------------------------------- building sympy objects


def _rational_arg(a: Any, b: Any = 1) -> Any:
    return sympy.Rational(a, b) if all(getattr(x, "is_Rational", False) for x in (a, b)) else a / b


def _round(x: Any, places: Any = 0) -> Any:
    if not (x.is_number and getattr(places, "is_Integer", False)) or abs(int(places)) > 50:
        raise ToolError("round needs a number and an integer number of places")
    scale = sympy.Integer(10) ** int(places)
    return sympy.floor(x * scale + sympy.Rational(1, 2)) / scale


def _factorial(n: Any) -> Any:
    if not getattr(n, "is_Integer", False) or n < 0 or n > MAX_FACTORIAL:
        raise ToolError(f"factorial needs an integer from 0 to {MAX_FACTORIAL}")
    return sympy.factorial(n)


def _binomial(n: Any, k: Any) -> Any:
    if not all(getattr(x, "is_Integer", False) and 0 <= x <= 10_000 for x in (n, k)):
        raise ToolError("binomial needs integers from 0 to 10000")
    return sympy.binomial(n, k)


def _exp(x: Any) -> Any:
    # exp of a big number is cheap to build but not to use: floor(exp(10**10)) asks for 4e9 digits.
    if getattr(x, "is_number", False) and not _within(sympy.re(x), MAX_EXP_ARG):
        raise ToolError(f"exp argument too large (limit {MAX_EXP_ARG})")
    return sympy.exp(x)


def _within(x: Any, limit: float) -> bool:
    """``|x| <= limit`` for a real number, judged on a 15-digit evaluation (non-numbers pass)."""
    try:
        return abs(float(sympy.N(x, 15))) <= limit
    except (TypeError, ValueError):  # not a real number after all (a symbol slipped in)
        return True


def _fold(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return lambda *args: functools.reduce(fn, args)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": sympy.sqrt,
    "cbrt": sympy.cbrt,
    "abs": sympy.Abs,
    "Abs": sympy.Abs,
    "floor": sympy.floor,
    "ceil": sympy.ceiling,
    "ceiling": sympy.ceiling,
    "round": _round,
    "min": sympy.Min,
    "max": sympy.Max,
    "exp": _exp,
    "log": sympy.log,
    "ln": sympy.log,
    "sin": sympy.sin,
    "cos": sympy.cos,
    "tan": sympy.tan,
    "factorial": _factorial,
    "binomial": _binomial,
    "gcd": _fold(sympy.gcd),
    "lcm": _fold(sympy.lcm),
    "Rational": _rational_arg,
    "frac": _rational_arg,
}
CONSTANTS = {"pi": sympy.pi}
_REFERENCE = re.compile(r"R\d+\Z")
_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: sympy.floor(a / b),
    ast.Mod: lambda a, b: sympy.Mod(a, b),
}
_COMPARE = {
    ast.Gt: sympy.Gt,
    ast.Lt: sympy.Lt,
    ast.GtE: sympy.Ge,
    ast.LtE: sympy.Le,
    ast.Eq: lambda a, b: sympy.Eq(a, b),
    ast.NotEq: lambda a, b: sympy.Ne(a, b),
}


class _Builder:
    """Turns whitelisted syntax trees into sympy objects, resolving names against ``env``."""

    def __init__(self, env: Mapping[str, Any], trees: Sequence[ast.expr]):
        self.env = env
        self.decimal = False
        self.letters = set()  # single-letter symbols in play, for reading "xy" as x*y
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Name):
                    if len(node.id) == 1:
                        self.letters.add(node.id)
                    elif node.id in env:
                        self.letters |= {s.name for s in free_symbols(env[node.id]) if len(s.name) == 1}

    def build(self, node: ast.expr, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ToolError("formula nested too deeply")
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise ToolError(f"unsupported syntax: {type(node).__name__}")
        try:
            result = method(node, depth + 1)
            _check_size(result)
        except SYMPY_ERRORS as exc:
            raise ToolError(f"cannot compute: {type(exc).__name__}: {exc}"[:300]) from None
        return result

    def _Constant(self, node: ast.Constant, depth: int) -> Any:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ToolError(f"unsupported literal {value!r}")
        if isinstance(value, float):
            self.decimal = True
            if not math.isfinite(value):
                raise ToolError("number out of range")
            fraction = Fraction(repr(value))  # the shortest repr is the literal as written
            return sympy.Rational(fraction.numerator, fraction.denominator)
        if len(str(abs(value))) > MAX_INT_DIGITS:
            raise ToolError(f"integer literal longer than {MAX_INT_DIGITS} digits")
        return sympy.Integer(value)

    def _Name(self, node: ast.Name, depth: int) -> Any:
        name = node.id
        if name in self.env:
            return self._reference(name)
        if name in CONSTANTS:
            return CONSTANTS[name]
        if _REFERENCE.match(name):
            raise ToolError(f"undefined variable {name}")
        if len(name) > 1 and name.isalpha() and set(name) <= self.letters:
            return sympy.Mul(*(sympy.Symbol(ch) for ch in name))
        return sympy.Symbol(name)

    def _reference(self, name: str) -> Any:
        value = self.env[name]
        if isinstance(value, MathValue):
            self.decimal = self.decimal or value.decimal
            return value.value
        if isinstance(value, Equation):  # the equation itself, as Lumos substitutes it (module docstring)
            self.decimal = self.decimal or value.decimal
            return value
        if is_system(value):
            self.decimal = self.decimal or any(e.decimal for e in value)
            return value
        if isinstance(value, str):
            parsed = parse_number_text(value)
            if parsed is None:
                raise ToolError(f"{name} is not a number: {value[:60]!r}")
            self.decimal = self.decimal or parsed.decimal
            return parsed.value
        if isinstance(value, (sympy.Basic, bool)):
            return value
        raise ToolError(f"{name} is not a number")

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> Any:
        operand = self.build(node.operand, depth)
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise ToolError(f"unsupported operator {type(node.op).__name__}")
        if isinstance(operand, Equation):
            return Equation(-operand.lhs, -operand.rhs) if isinstance(node.op, ast.USub) else operand
        _plain(operand)
        return -operand if isinstance(node.op, ast.USub) else operand

    def _BinOp(self, node: ast.BinOp, depth: int) -> Any:
        left, right = self.build(node.left, depth), self.build(node.right, depth)
        _plain(left, several_only=True)
        _plain(right, several_only=True)
        if isinstance(left, Equation) or isinstance(right, Equation):
            # a = b with c = d gives a op c = b op d, and with a plain x, a op x = b op x: each side stays true
            # when both get the same operation, which is what Lumos does with "R1 - R2" on two equations.
            one = left if isinstance(left, Equation) else Equation(left, left)
            two = right if isinstance(right, Equation) else Equation(right, right)
            sides = (_binary(node.op, one.lhs, two.lhs), _binary(node.op, one.rhs, two.rhs))
            for side in sides:
                _check_size(side)  # build() checks only what it returns, and an Equation is no number
            return Equation(*sides)
        return _binary(node.op, left, right)

    def _Compare(self, node: ast.Compare, depth: int) -> Any:
        items = [self.build(node.left, depth)] + [self.build(c, depth) for c in node.comparators]
        for item in items:
            _plain(item)
        parts = [_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, items, items[1:])]
        return sympy.And(*parts) if len(parts) > 1 else parts[0]

    def _Call(self, node: ast.Call, depth: int) -> Any:
        if not isinstance(node.func, ast.Name) or node.keywords:
            raise ToolError("only plain calls such as sqrt(x) are allowed")
        name = node.func.id
        if name not in self.env and name not in FUNCTIONS:
            raise ToolError(f"unknown function {name}")
        args = [self.build(a, depth) for a in node.args]
        for arg in args:
            _plain(arg)
        if name in self.env:  # Rk(a, b): substitute into the free symbols of Rk
            return _substitute(name, self._reference(name), args)
        try:
            return FUNCTIONS[name](*args)
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise ToolError(f"{name}: {exc}") from None

    def _List(self, node: ast.List, depth: int) -> Any:
        items = [self.build(e, depth) for e in node.elts]
        for item in items:
            _plain(item)
        return sympy.Tuple(*items)

    _Tuple = _List

    def _Starred(self, node: ast.AST, depth: int) -> Any:
        raise ToolError("unsupported syntax: *")


def _plain(value: Any, several_only: bool = False) -> None:
    """Refuse an equation where only a number or expression fits (a function argument, a comparison, a list).

    ``several_only``: refuse only a name bound to several equations (arithmetic takes one equation, not several).
    """
    if is_system(value):
        raise ToolError(f"a name holding {len(value)} equations can only be solved or set as a whole")
    if isinstance(value, Equation) and not several_only:
        raise ToolError("an equation can be solved, set, or combined with + - * / ** (both sides alike); "
                        "it cannot be a function argument, compared, or put in a list")


def _binary(op: ast.operator, left: Any, right: Any) -> Any:
    if isinstance(op, ast.Pow):
        return _power(left, right)
    function = _BINOPS.get(type(op))
    if function is None:
        raise ToolError(f"unsupported operator {type(op).__name__}")
    try:
        return function(left, right)
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise ToolError(f"cannot compute: {exc}") from None


def free_symbols(value: Any) -> set[sympy.Symbol]:
    """The unknowns of a value: a sympy object, a ``MathValue``, an ``Equation`` (both sides) or a tuple of them."""
    if isinstance(value, Equation):
        return free_symbols(value.lhs) | free_symbols(value.rhs)
    if isinstance(value, (tuple, list)):
        return set().union(*(free_symbols(v) for v in value))
    inner = value.value if isinstance(value, MathValue) else value
    return set(inner.free_symbols) if isinstance(inner, sympy.Basic) else set()


def _substitute(name: str, expr: Any, args: list[Any]) -> Any:
    _plain(expr, several_only=True)
    symbols = sorted(free_symbols(expr), key=lambda s: s.name)
    if len(args) > len(symbols):
        raise ToolError(f"{name} has {len(symbols)} unknown(s), called with {len(args)} value(s)")
    mapping = dict(zip(symbols, args))
    if isinstance(expr, Equation):  # both sides get the same values, keyed on the unknowns of the whole equation
        return Equation(_substituted(expr.lhs, mapping), _substituted(expr.rhs, mapping))
    return _substituted(expr, mapping)


def _substituted(expr: Any, mapping: dict[Any, Any]) -> Any:
    if not isinstance(expr, sympy.Basic):  # a plain bool from a comparison: nothing to substitute
        return expr
    # Substitute without evaluating, then rebuild bottom-up under the same limits as a typed formula: a plain
    # subs would evaluate 2**x at x = 10**9 or floor(exp(x)) at x = 10**10 before any check could run.
    with sympy.evaluate(False):
        unevaluated = expr.subs(mapping)
    return _rebuild(unevaluated)


def _rebuild(expr: Any) -> Any:
    if not isinstance(expr, sympy.Basic) or not expr.args:
        return expr
    args = [_rebuild(a) for a in expr.args]
    if isinstance(expr, sympy.Pow):
        result = _power(*args)
    elif isinstance(expr, sympy.exp):
        result = _exp(*args)
    else:
        try:
            result = expr.func(*args)
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise ToolError(f"cannot compute: {exc}") from None
    _check_size(result)
    return result


def _bits(v: Any) -> int:
    return max(abs(int(v.p)).bit_length(), int(v.q).bit_length())


def _power(base: Any, exponent: Any) -> Any:
    if getattr(exponent, "is_number", False):
        if not exponent.is_real or abs(exponent) > MAX_EXPONENT:
            raise ToolError(f"exponent too large (limit {MAX_EXPONENT})")
        if getattr(base, "is_Rational", False) and exponent.is_Rational and _bits(base) * abs(exponent) > MAX_BITS:
            raise ToolError("power too large")
    elif not getattr(exponent, "free_symbols", None):
        raise ToolError("unsupported exponent")
    return base**exponent


def _check_size(value: Any) -> None:
    if getattr(value, "is_Rational", False):
        if _bits(value) > MAX_BITS:
            raise ToolError("number too large")
    elif getattr(value, "is_number", False) and _magnitude_bits(value) > MAX_BITS:
        raise ToolError("number too large")
    if isinstance(value, sympy.Basic):  # one walk, stopped at the bound (sympy's ``has`` walks it all)
        for count, node in enumerate(sympy.preorder_traversal(value), 1):
            if count > MAX_VALUE_NODES:
                raise ToolError(f"expression too large (over {MAX_VALUE_NODES} terms)")
            if node is sympy.zoo or node is sympy.nan:
                raise ToolError("division by zero or undefined result")
            if node.is_Rational and _bits(node) > MAX_BITS:  # a coefficient inside an expression: 10**999*x, squared
                raise ToolError("number too large")


def _magnitude_bits(value: Any) -> int:
    """About log2 of the larger of |re| and |im| of an irrational number, from a 15-digit evaluation (0 if none)."""
    approx = sympy.N(value, 15)
    bits = 0
    for part in approx.as_real_imag():
        if isinstance(part, sympy.Float) and part != 0:
            if not part.is_finite:
                return MAX_BITS + 1
            _, _, exponent, bit_count = part._mpf_
            bits = max(bits, exponent + bit_count)
    return bits


def evaluate(text: str, env: Mapping[str, Any]) -> MathValue | Equation | tuple[Equation, ...]:
    """Evaluate one formula against earlier values; raise ``ToolError`` on anything outside the whitelist.

    A formula on equations (``R1``, ``R1 - R2``) gives an ``Equation``; a name bound to several gives them all.
    """
    tree = _parse_tree(text)
    builder = _Builder(env, [tree])
    value = builder.build(tree)
    if isinstance(value, Equation):
        return replace(value, decimal=value.decimal or builder.decimal)
    if is_system(value):
        return value
    return MathValue(value, builder.decimal)


def parse_number_text(text: str) -> MathValue | None:
    """A QA answer such as ``"75,000"``, ``"$3.50"``, ``"16"`` or ``"True"`` as a value; None if not numeric."""
    cleaned = text.strip().rstrip(".").replace("$", "").replace(",", "")
    if cleaned.lower() in ("true", "yes"):
        return MathValue(sympy.true)
    if cleaned.lower() in ("false", "no"):
        return MathValue(sympy.false)
    match = re.fullmatch(r"-?\d{1,60}(\.\d{1,30})?", cleaned)
    if match is None:
        return None
    fraction = Fraction(cleaned)
    return MathValue(sympy.Rational(fraction.numerator, fraction.denominator), match.group(1) is not None)


def _sides(text: str) -> list[ast.expr]:
    """Syntax trees of the two sides of ``lhs = rhs`` (an expression alone means ``= 0``)."""
    sides = EQUALS.split(text)
    if len(sides) > 2:
        raise ToolError(f"more than one '=' in {text!r}")
    return [_parse_tree(side) for side in sides]


def build_equations(pieces: Sequence[str], env: Mapping[str, Any]) -> tuple[list[Any], bool]:
    """The formulas of ``pieces`` and whether any had a decimal.

    Each ``lhs = rhs`` is an ``Equation`` (``text``: the piece, when it names no earlier variable); a bare
    expression or relation is its sympy object; a piece that evaluates to an equation (``R1``, ``R1 - R2``) is that
    equation, or all of them when the name holds several.
    """
    sided = [_sides(p) for p in pieces]
    builder = _Builder(env, [t for trees in sided for t in trees])
    built: list[Any] = []
    for piece, trees in zip(pieces, sided):
        values = [builder.build(t) for t in trees]
        if len(values) == 2:
            for side in values:
                if isinstance(side, Equation) or is_system(side):
                    raise ToolError(f"an equation cannot be one side of another: {piece.strip()[:80]!r}")
            names_earlier = any(isinstance(n, ast.Name) and n.id in env for t in trees for n in ast.walk(t))
            built.append(Equation(values[0], values[1], text="" if names_earlier else piece.strip()))
        elif is_system(values[0]):
            built.extend(values[0])
        else:
            built.append(values[0])
    for formula in built:
        if isinstance(formula, Equation):
            try:  # here, so that a meaningless equation ("(1, 2) = x") fails at the step that wrote it
                _check_size(formula.expression)
            except SYMPY_ERRORS as exc:
                raise ToolError(f"not an equation: {type(exc).__name__}: {exc}"[:300]) from None
    decimal = builder.decimal
    return [replace(f, decimal=f.decimal or decimal) if isinstance(f, Equation) else f for f in built], decimal

