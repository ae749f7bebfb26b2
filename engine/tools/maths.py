"""Maths tools of the Lumos action language (Calculator, SetEquation, SolveEquation, SolveInequality, ...).

Contract: each tool takes the raw argument text and the environment of earlier values and returns a
``ToolResult`` (one value per output) or raises ``ToolError`` with a message for the user. Expressions are built by
``engine.tools.expressions`` (a whitelisted syntax tree, never an evaluator; limits and rendering documented there).
SetEquation's value is its equations, one ``Equation`` per piece (a bare expression sets ``expression = 0``; an
inequality is kept as a ``MathValue`` relation), so a variable holding them is an argument wherever a formula is:
``SolveEquation(R1)``, ``SolveEquation(R1, R2)``, ``SolveEquation(R1 - R2)``, ``SolveInequality(R1)``,
``SetEquation(R1)``, ``Calculator(2*R1)`` (an equation again); a variable holding an expression already was one
(``SolveEquation(R1 = 7)``, ``SolveInequality(R1 > 7)``, ``Calculator(R1(3))``).
Equation/inequality solving runs in a forked process killed after ``time_limit_s`` and capped at ``SOLVER_MEMORY``
bytes more than the parent (sympy cannot be interrupted).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy
import sympy.physics.units  # noqa: F401 -- simplify() imports it lazily and it parse_exprs its unit names; now, not mid-solve

from engine.actions import split_args
from engine.tools.base import ToolError as ToolError  # re-exported: tools and callers import it from here
from engine.tools.base import ToolResult as ToolResult
from engine.tools.expressions import FUNCTIONS as FUNCTIONS
from engine.tools.expressions import build_equations, evaluate, free_symbols
from engine.tools.expressions import normalise as normalise
from engine.tools.math_values import Equation, render
from engine.tools.math_values import MathValue as MathValue
from engine.tools.math_values import value_to_text as value_to_text

SOLVER_MEMORY = 1 << 30  # address space a forked solver may add before sympy gets MemoryError


@dataclass
class MathsState:
    """What a maths session remembers between steps: the last ``SetEquation``, for an argument-less solve."""

    equations: list[Any] = field(default_factory=list)  # its formulas as built (build_equations), not its text
    decimal: bool = False  # they had a decimal literal or a percent



# ---------------------------------------------------------------- bounded solving


def _bounded(fn: Callable[..., Any], args: tuple[Any, ...], time_limit_s: float) -> Any:
    """Run ``fn(*args)`` in a forked process, killed after ``time_limit_s`` (sympy cannot be interrupted)."""
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:  # no fork on this platform: run inline, bounded only by the input checks
        return fn(*args)
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(sender, fn, args), daemon=True)
    process.start()
    sender.close()
    try:
        if not receiver.poll(time_limit_s):
            raise ToolError(f"timed out after {time_limit_s:g} s")
        status, payload = receiver.recv()
    except EOFError:
        raise ToolError("solver crashed") from None
    finally:
        process.kill()
        process.join()
        receiver.close()
    if status == "error":
        raise ToolError(payload)
    return payload


def _child(sender: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    _cap_memory(SOLVER_MEMORY)
    try:
        sender.send(("ok", fn(*args)))
    except ToolError as exc:
        sender.send(("error", str(exc)))
    except MemoryError:
        sender.send(("error", "the solver ran out of memory"))
    except Exception as exc:  # sympy raises many types (NotImplementedError, PolynomialError, ...)
        sender.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        sender.close()


def _cap_memory(extra: int) -> None:
    """Limit this (forked) process to its current address space plus ``extra`` bytes, where the OS allows it."""
    try:
        import resource

        with open("/proc/self/statm") as statm:
            current = int(statm.read().split()[0]) * resource.getpagesize()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = current + extra
        if hard == resource.RLIM_INFINITY or limit < hard:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError):  # not Linux: the time limit still bounds the solver
        pass


def _solve(equations: list[Any], symbols: list[sympy.Symbol]) -> list[dict[Any, Any]]:
    """Every solution, the real ones only when there are any. One equation in one unknown goes to sympy as itself:
    given as a system, a polynomial without radical roots (``x**5 - x + 1``) came back with none ("no solution"),
    while alone its roots come back as ``CRootOf``."""
    if len(equations) == 1 and len(symbols) == 1:
        solutions = sympy.solve(equations[0], symbols[0], dict=True)
    else:
        solutions = sympy.solve(equations, symbols, dict=True)
    real = []
    for solution in solutions:
        values = {symbol: _real_value(value) for symbol, value in solution.items()}
        if all(value is not None for value in values.values()):
            real.append(values)
    return real or solutions


def _real_value(value: Any) -> Any:
    """``value`` when it is real, else None. sympy cannot tell for Cardano's radicals (``is_real`` None: a cubic's
    two complex roots were kept beside its real one, and three real roots were written with ``I`` in them), so those
    are decided by their numeric value and kept as it (a float to 30 digits)."""
    if value.is_real is not None or value.free_symbols:  # known, or a parametric root (several unknowns)
        return value if value.is_real is not False else None
    real, imaginary = sympy.N(value, 30).as_real_imag()
    return real if abs(imaginary) <= sympy.Float("1e-20") * max(abs(real), 1) else None


def _solve_inequality(relations: list[Any], symbol: sympy.Symbol) -> Any:
    result = sympy.S.Reals
    for relation in relations:
        result = result.intersect(sympy.solve_univariate_inequality(relation, symbol, relational=False))
    return result



# ---------------------------------------------------------------- the tools


def _formulas(arg_text: str, env: Mapping[str, Any], state: MathsState) -> tuple[list[Any], bool]:
    """The argument's formulas (``build_equations``), or those of the last SetEquation when there is none."""
    if arg_text.strip():
        return build_equations(split_args(arg_text), env)
    if not state.equations:
        raise ToolError("no equation given and none set with SetEquation")
    return list(state.equations), state.decimal


def calculator(arg_text: str, env: Mapping[str, Any], state: MathsState, time_limit_s: float) -> ToolResult:
    """A number or expression; on equations (``R1 - R2``, ``2*R1``) an equation, both sides alike."""
    return ToolResult((evaluate(arg_text, env),))


def define(arg_text: str, env: Mapping[str, Any], state: MathsState, time_limit_s: float) -> ToolResult:
    return ToolResult((evaluate(arg_text, env),))


def set_equation(arg_text: str, env: Mapping[str, Any], state: MathsState, time_limit_s: float) -> ToolResult:
    """One value per formula (several into one output make a tuple); built now, so errors show at this step."""
    pieces = split_args(arg_text)
    if not pieces:
        raise ToolError("SetEquation needs an equation")
    formulas, decimal = build_equations(pieces, env)
    state.equations, state.decimal = formulas, decimal
    return ToolResult(tuple(_as_value(f, decimal) for f in formulas))


def _as_value(formula: Any, decimal: bool) -> Equation | MathValue:
    if isinstance(formula, Equation):
        return formula
    if isinstance(formula, sympy.Expr):  # a bare expression sets "expression = 0", as a solver reads it
        return Equation(formula, sympy.Integer(0), decimal)
    return MathValue(formula, decimal)  # an inequality (for SolveInequality), or a truth value


def solve_equation(arg_text: str, env: Mapping[str, Any], state: MathsState, time_limit_s: float) -> ToolResult:
    """Solve for every free symbol (sorted by name); one value per unknown, several roots as a tuple."""
    formulas, decimal = _formulas(arg_text, env, state)
    if any(isinstance(f, sympy.core.relational.Relational) for f in formulas):
        raise ToolError("use SolveInequality for inequalities")
    equations = [f.expression if isinstance(f, Equation) else f for f in formulas]
    symbols = sorted(set().union(*(free_symbols(e) for e in equations)), key=lambda s: s.name)
    if not symbols:
        if any(isinstance(f, Equation) for f in formulas):  # "x + 1 = x + 2": the unknown cancelled out
            raise ToolError("no solution" if any(e != 0 for e in equations) else "no unknown to solve for")
        return ToolResult(tuple(MathValue(e, decimal) for e in equations))  # "SolveEquation(R2 + R4)": the value
    solutions = _bounded(_solve, (equations, symbols), time_limit_s)
    if not solutions:
        raise ToolError("no solution")
    if len(symbols) == 1:
        roots = sorted({s[symbols[0]] for s in solutions if symbols[0] in s}, key=sympy.default_sort_key)
        value = roots[0] if len(roots) == 1 else sympy.Tuple(*roots)
        return ToolResult((MathValue(value, decimal),))
    first = solutions[0]
    values = tuple(MathValue(first.get(s, s), decimal) for s in symbols)
    note = f"{len(solutions)} solutions; the first is shown" if len(solutions) > 1 else None
    return ToolResult(values, note)


def solve_inequality(arg_text: str, env: Mapping[str, Any], state: MathsState, time_limit_s: float) -> ToolResult:
    relations, _ = _formulas(arg_text, env, state)
    if not all(isinstance(r, sympy.core.relational.Relational) for r in relations):
        raise ToolError("SolveInequality needs inequalities such as 2*x + 1 > 5")
    symbols = set().union(*(free_symbols(r) for r in relations))
    if len(symbols) != 1:
        raise ToolError(f"SolveInequality needs exactly one unknown, got {len(symbols)}")
    symbol = symbols.pop()
    solution = _bounded(_solve_inequality, (relations, symbol), time_limit_s)
    return ToolResult((_set_text(solution, symbol.name),))


def _set_text(solution: Any, name: str) -> str:
    """An interval set as text: ``x > 3``, ``-2 <= x < 5``; unions joined with `` or ``."""
    if isinstance(solution, sympy.Union):
        return " or ".join(_set_text(part, name) for part in solution.args)
    if solution == sympy.S.Reals:
        return "all real numbers"
    if solution is sympy.S.EmptySet:
        return "no solution"
    if isinstance(solution, sympy.Interval):
        low, high = render(solution.start, False), render(solution.end, False)
        lower = "" if solution.start == -sympy.oo else f"{low} {'<' if solution.left_open else '<='} "
        upper = "" if solution.end == sympy.oo else f" {'<' if solution.right_open else '<='} {high}"
        if not lower and upper:
            return f"{name}{upper}"
        if lower and not upper:
            return f"{name} {'>' if solution.left_open else '>='} {low}"
        return f"{lower}{name}{upper}"
    return render(solution, False)


def count(arg_text: str, env: Mapping[str, Any], state: MathsState, time_limit_s: float) -> ToolResult:
    """Count comma-separated items, or the elements of one list (``[a, b]``) or of one tuple-valued reference."""
    items = split_args(arg_text)
    if len(items) == 1:
        only = items[0]
        if only[:1] in "[(" and only[-1:] in "])":
            items = split_args(only[1:-1])
        elif only in env:
            value = env[only].value if isinstance(env[only], MathValue) else env[only]
            if isinstance(value, (sympy.Tuple, tuple, list)):
                return ToolResult((MathValue(sympy.Integer(len(value))),))
    return ToolResult((MathValue(sympy.Integer(len([i for i in items if i]))),))


def unsupported(name: str) -> Callable[..., ToolResult]:
    def tool(arg_text: str, env: Mapping[str, Any], state: MathsState, time_limit_s: float) -> ToolResult:
        raise ToolError(f"unsupported tool: {name}")

    return tool


MATHS_TOOLS: dict[str, Callable[[str, Mapping[str, Any], MathsState, float], ToolResult]] = {
    "Calculator": calculator,
    "SetEquation": set_equation,
    "SolveEquation": solve_equation,
    "SolveInequality": solve_inequality,
    "Count": count,
    "Define": define,
    "Code": unsupported("Code"),
}
