"""Property-based: arbitrary and near-valid action text never escapes the parser and executor as an exception,
never reaches Python's or sympy's string evaluators, and each call ends in bounded time and memory.

Strategies: ``st.text()`` plus a grammar that writes near-valid actions (``R1 = Calculator(...)``) from random
operators, huge numbers and exponents, deep nesting, unicode and dunder names, keyword arguments and the real tool
names. Every call runs with ``eval``/``exec``/``sympy.sympify``/``parse_expr`` replaced by a spy that records any
call with source text (to a file, so a forked solver's call is seen too) and raises; only sympy's internal code
generation from its own fixed templates is let through.
"""

from __future__ import annotations

import builtins
import os
import sys
import time
import tracemalloc
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import pytest
import sympy
import sympy.parsing.sympy_parser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.actions import ParsedActions, keyword_args, parse_actions, split_args
from engine.executor import ExecutionResult, ToolEnv, execute
from engine.tools.maths import FUNCTIONS
from engine.tools.qa import Corpus

# Per call: the executor kills a solver after env.time_limit_s (0.5 s a step); a call of two solver steps took over
# 2 s on a loaded 2-core CI machine (a CI run of 2026-12-07), while a solver left running would take minutes.
MAX_SECONDS = 8.0
MAX_PEAK_BYTES = 50 * 1024 * 1024  # per call, traced Python allocations
TIME_LIMIT_S = 0.5
EXAMPLES = 250

CORPUS = Corpus.from_context([
    "Paris: Paris is the capital of France. It has 2,100,000 inhabitants.",
    "France: France is a country in Western Europe. Its population is 68 million.",
    "Eiffel Tower: The Eiffel Tower was completed in 1889 and is 330 metres tall.",
])
ENV = ToolEnv(corpus=CORPUS, time_limit_s=TIME_LIMIT_S)

TOOLS = ["Calculator", "SetEquation", "SolveEquation", "SolveInequality", "Count", "Define", "Code",
         "KnowledgeQuery", "ParagraphRetrieve", "QA", "Foo", "__import__", "eval", "exec", "getattr", "__class__",
         "Calculator.__globals__", "Solve\u0415quation"]  # the last has a Cyrillic E
NAMES = ["x", "y", "z", "n", "R1", "R2", "R3", "R99", "pi", "xy", "xyz", "Output", "Answer", "__builtins__",
         "__import__", "__class__", "__subclasses__", "os", "sys", "self", "\u210c", "\u03b1", "caf\u00e9", "_", "E",
         "I", "oo", "nan", "True", "None", "lambda"]
CALLS = sorted(FUNCTIONS) + ["eval", "exec", "open", "__import__", "getattr", "type", "compile", "globals", "R1",
                             "print", "sympify", "S", "Symbol"]
OPERATORS = ["+", "-", "*", "/", "**", "^", "//", "%", "==", "!=", "<", ">", "<=", ">=", "=", "&", "|", "@", "<<",
             ">>", " and ", " or ", " if ", " else ", "\u00d7", "\u00f7", "\u2212", ",", ".", ":", " for x in ",
             " Query: ", " Question: "]
NUMBERS = ["0", "1", "-1", "0.5", "1e308", "1e-308", "1e400", "9**9**9", "10**1000", "2**10000", "$1,000", "15%",
           "2x", "3(x+1)", "1_000", "0x1F", "0b101", "1j", "inf", "nan", "1,2,3", "99999999999999999999999",
           "factorial(1000)", "exp(exp(exp(10)))", "10**60", "0.1**500", "sqrt(-1)", "1/0", "log(0)", "x**1000",
           "(1+sqrt(2))**1000", "binomial(10000, 5000)", "10.0**300"]

numbers = st.one_of(
    st.sampled_from(NUMBERS),
    st.integers(-(10**80), 10**80).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
plain_text = st.text(alphabet=st.characters(exclude_characters="()[]{};\n"), max_size=6)
atoms = st.one_of(numbers, numbers, st.sampled_from(NAMES), st.sampled_from(NAMES), st.text(max_size=6), plain_text,
                  plain_text.map(repr))


def _grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, st.sampled_from(OPERATORS), inner).map(lambda t: f"{t[0]}{t[1]}{t[2]}"),
        st.tuples(st.sampled_from(["-", "+", "~", "not ", "*", "**"]), inner).map("".join),
        st.tuples(st.sampled_from(CALLS), st.lists(inner, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
        inner.map(lambda e: f"({e})"),
        inner.map(lambda e: f"[{e}]"),
        inner.map(lambda e: f"{{{e}}}"),
        st.tuples(inner, st.sampled_from(["__class__", "real", "__dict__", "__globals__"])).map(".".join),
        st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(inner, st.sampled_from(["^", "**"]), st.integers(-(10**9), 10**9)).map(
            lambda t: f"{t[0]}{t[1]}{t[2]}"),
    )


expressions = st.recursive(atoms, _grow, max_leaves=20)
nested = st.tuples(st.integers(1, 2000), st.sampled_from(["(", "[", "sqrt(", "-(", "R1("])).map(
    lambda t: t[1] * t[0] + "1" + ("]" if t[1] == "[" else ")") * t[0])
good_outputs = st.lists(st.sampled_from(["R1", "R2", "R3", "R4", "Output", "Answer"]), min_size=1, max_size=2)
bad_outputs = st.lists(st.sampled_from(["R1", "__x__", "1R", "", "R1.x", "\u03b1"]), min_size=1, max_size=3)
outputs = st.sampled_from([good_outputs] * 5 + [bad_outputs]).flatmap(lambda s: s).map(", ".join)
# Mostly the real maths tools, so most examples get past the parser into sympy.
tools = st.sampled_from(["Calculator", "SolveEquation", "SetEquation", "SolveInequality", "Define", "Count"] * 3
                        + TOOLS)
action = st.one_of(
    st.tuples(outputs, tools, expressions).map(lambda t: f"{t[0]} = {t[1]}({t[2]})"),
    st.tuples(outputs, tools, nested).map(lambda t: f"{t[0]} = {t[1]}({t[2]})"),
    st.tuples(outputs, st.sampled_from(["SolveEquation", "SolveInequality", "SetEquation"]), expressions,
              st.sampled_from(["=", "<", ">=", ","]), expressions).map(
        lambda t: f"{t[0]} = {t[1]}({t[2]} {t[3]} {t[4]})"),
    st.tuples(outputs, st.one_of(expressions, nested)).map(lambda t: f"{t[0]} = {t[1]}"),
    st.tuples(outputs, st.sampled_from(["KnowledgeQuery", "ParagraphRetrieve", "QA"]), expressions).map(
        lambda t: f"{t[0]} = {t[1]}(R1, Query: {t[2]}, Question: {t[2]})"),
)
action_texts = st.tuples(st.lists(action, min_size=1, max_size=4), st.sampled_from(["; ", "\n", ";", " ; \n"])).map(
    lambda t: t[1].join(t[0]))
any_text = st.one_of(st.text(), st.text(alphabet=st.characters(codec="utf-8"), max_size=300), action_texts)


class EvaluatorCalled(RuntimeError):
    """A string evaluator was reached; must never happen."""


@pytest.fixture
def spy_log(tmp_path) -> Path:
    return tmp_path / "evaluator_calls.log"


def bounded(spy_log: Path, fn, *args):
    """Call ``fn(*args)`` with the evaluators replaced by a recording spy; return (result, seconds, peak bytes)."""

    def spy(name, original):
        def called(*a, **kw):
            # Only source text is evaluation. Code objects are how importlib runs a lazily imported sympy module,
            # and sympy passes its own objects through sympify internally; both go to the real function. So does
            # sympy's own code generation (polys/monomials.py execs a fixed template), which sees no input text;
            # sympy's string parser (sympy/parsing) is always caught.
            caller = sys._getframe(1).f_code.co_filename
            internal = f"{os.sep}sympy{os.sep}" in caller and f"{os.sep}parsing{os.sep}" not in caller
            if not a or not isinstance(a[0], (str, bytes)) or (internal and name in ("eval", "exec")):
                return original(*a, **kw)
            with open(spy_log, "a", encoding="utf-8") as log:  # a file: a forked solver's call lands here too
                log.write(f"{name}({str(a[:1])[:200]})\n")
            raise EvaluatorCalled(name)
        return called

    spy_log.write_text("", encoding="utf-8")  # per call: hypothesis replays examples while shrinking
    with ExitStack() as stack:
        for target, name in ((builtins, "eval"), (builtins, "exec"), (sympy, "sympify"), (sympy, "parse_expr"),
                             (sympy.parsing.sympy_parser, "parse_expr")):
            stack.enter_context(mock.patch.object(target, name, spy(name, getattr(target, name))))
        tracemalloc.start()
        started = time.perf_counter()
        try:
            result = fn(*args)
            seconds = time.perf_counter() - started
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    return result, seconds, peak


def check_bounds(spy_log: Path, text: str, seconds: float, peak: int) -> None:
    calls = spy_log.read_text(encoding="utf-8") if spy_log.exists() else ""
    assert calls == "", f"string evaluator called for {text!r}: {calls}"
    assert seconds < MAX_SECONDS, f"{seconds:.2f} s for {text[:200]!r}"
    assert peak < MAX_PEAK_BYTES, f"{peak / 2**20:.1f} MB for {text[:200]!r}"


FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.function_scoped_fixture])


@FUZZ
@given(text=any_text)
def test_parser_never_raises(spy_log, text):
    parsed, seconds, peak = bounded(spy_log, parse_actions, text)
    assert isinstance(parsed, ParsedActions)
    assert parsed.ok == (parsed.error is None)
    for act in parsed.actions:
        assert 0 <= act.span[0] <= act.span[1] <= len(text)
        split_args(act.arg_text)
        keyword_args(act.arg_text, ["Query", "Question"])
    check_bounds(spy_log, text, seconds, peak)


@FUZZ
@given(text=any_text, domain=st.sampled_from(["maths", "qa", "web"]))
def test_executor_never_raises_evaluates_or_runs_away(spy_log, text, domain):
    result, seconds, peak = bounded(spy_log, execute, text, domain, ENV)
    assert isinstance(result, ExecutionResult)
    assert result.ok == (result.error is None)
    assert all(isinstance(v, str) for v in result.values.values())
    result.to_dict()
    check_bounds(spy_log, text, seconds, peak)


@pytest.mark.parametrize("text", [
    "R1 = Calculator(__import__('os').system('echo pwned'))",
    "R1 = Calculator(().__class__.__bases__[0].__subclasses__())",
    "R1 = SolveEquation(x**1000 - 1 = 0)",
    "R1 = Calculator(exp(exp(exp(10))))",
    "R1 = Calculator(sin(exp(exp(100))))",
    "R1 = Calculator(floor(exp(10**10)))",
    "R1 = Calculator((1+sqrt(2))**1000)",
    "R1 = Calculator(" + "(" * 3000 + "1" + ")" * 3000 + ")",
    "R1 = Calculator(factorial(1000)); R2 = Calculator(R1**1000)",
    "R1 = Calculator(2**x); R2 = Calculator(R1(10**9))",
    "R1 = Calculator(floor(exp(x))); R2 = Calculator(R1(10**10))",
    "R1 = Calculator(sin(2**39999)); R2 = Calculator(exp(20000) % pi)",
    "R1 = Calculator(exp(20000) - exp(20000) + 1/10**59 > 0)",
    "R1 = Calculator(factorial(1000)*factorial(1000)*factorial(1000)*factorial(1000))",
    "R1 = Calculator(10**999); R2 = Calculator(R1*R1*R1*R1*R1); R3 = Calculator(1.5/2**13000)",
    "; ".join(["R1 = Calculator(x+y+z+1)"] + [f"R{k} = Calculator(R{k - 1}*R{k - 1}+R{k - 1})" for k in range(2, 20)]),
    "R1 = SolveEquation(x**1000 + x = 5); R2 = SolveInequality(x**999 - x > 3)",
    "R1 = Count(" + "1, " * 50_000 + ")",
    "R1 = KnowledgeQuery(" + "France " * 5000 + ")",
    "R1 = QA([R1], Question: " + "x" * 100_000 + ")",
])
def test_known_hostile_inputs(spy_log, text):
    for domain in ("maths", "qa"):
        result, seconds, peak = bounded(spy_log, execute, text, domain, ENV)
        assert isinstance(result, ExecutionResult)
        check_bounds(spy_log, text, seconds, peak)


def test_the_spy_sees_an_evaluator_call(spy_log):
    """The harness is not vacuous: a call to sympy's string parser is recorded and raises."""
    for call, logged in ((lambda: sympy.sympify("1+1"), "sympify(('1+1',))"), (lambda: eval("1+1"), "eval(('1+1',))"),
                         (lambda: exec("x = 1"), "exec(('x = 1',))")):
        with pytest.raises(EvaluatorCalled):
            bounded(spy_log, call)
        assert spy_log.read_text(encoding="utf-8") == logged + "\n"


EQUATIONS = ("R1 = SetEquation(3*y - 7 = 20); R2, R3 = SetEquation(x + y = 10, x - y = 2); "
             "R4 = SetEquation(x = 1, y = 2); ")


@pytest.mark.parametrize("tail", [
    "R9 = Calculator(abs(R1))", "R9 = Calculator(sqrt(R1) + floor(R2))", "R9 = Calculator(Abs(R1) > R2)",
    "R9 = Calculator([R1, R2])", "R9 = Calculator(max(R1, R2))", "R9 = Calculator(gcd(R1, 2))",
    "R9 = Calculator(R1(R2))", "R9 = Calculator(R4(1))", "R9 = Calculator(R4 * 2)", "R9 = Calculator(R1 ** R2)",
    "R9 = Calculator(2 ** R1 % R2 // R3)", "R9 = SolveEquation(R1 = R2)", "R9 = SolveInequality(R1, R4)",
    "R9 = Count(R4)", "R9 = SetEquation(R4, R1 - R2); R10 = SolveEquation()", "R9 = Calculator(R1(10**9))",
    "R9 = Calculator(R1 ** 1000 ** 1000)", "R9 = Calculator(exp(exp(R1)))",
])
def test_equation_values_never_reach_a_string_evaluator(spy_log, tail):
    """A variable holding equations (issue 13) is no sympy object: misused, it fails as a step, never as text."""
    text = EQUATIONS + tail
    result, seconds, peak = bounded(spy_log, execute, text, "maths", ENV)
    assert isinstance(result, ExecutionResult) and result.values["R1"] == "3*y - 7 = 20"
    check_bounds(spy_log, text, seconds, peak)
