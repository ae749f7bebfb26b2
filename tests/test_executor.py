"""The executor end to end: exemplar chains, errors, aliases, the qa and web domains, and the CLI."""

from __future__ import annotations

import json

import pytest

from engine.__main__ import main
from engine.executor import ToolEnv, execute
from engine.tools.qa import Corpus

LEAH = "R1 = Calculator(28 * 1/7); R2 = Calculator(28 - R1); R3 = Calculator(R2 / 2)"


def test_leah_exemplar():
    result = execute(LEAH, "maths")
    assert result.ok and result.error is None
    assert result.values == {"R1": "4", "R2": "24", "R3": "12"}
    assert result.answer == "12"
    assert [s.values for s in result.steps] == [{"R1": "4"}, {"R2": "24"}, {"R3": "12"}]


def test_maths_exemplar_with_two_unknowns_and_output():
    actions = (
        "R1 = Calculator((x-y) - (x+y)); R2 = Calculator((x+y) + 2*R1); R3 = Calculator((x+y) + 3*R1); "
        "R4 = Calculator((x+y) + 4*R1); R5, R6 = SolveEquation(R2=xy, R3=x/y); Output = Calculator(R4(R5, R6))"
    )
    result = execute(actions, "maths", ToolEnv(time_limit_s=5))
    assert result.ok, result.error
    assert (result.values["R5"], result.values["R6"], result.answer) == ("-9/8", "-3/5", "123/40")


def test_percent_exemplar():
    result = execute("R1 = Calculator(15 / 25%); R2 = Calculator(1 - 25%); R3 = Calculator(R1 * R2)", "maths")
    assert result.values == {"R1": "60", "R2": "0.75", "R3": "45"}


def test_undefined_reference_stops_and_keeps_earlier_values():
    result = execute("R1 = Calculator(2 + 2); R2 = Calculator(R7 * 2); R3 = Calculator(1)", "maths")
    assert not result.ok
    assert result.error == "R2 = Calculator(R7 * 2): undefined variable R7"
    assert result.values == {"R1": "4"} and len(result.steps) == 2


def test_unknown_tool_and_code():
    assert execute("R1 = Foo(3)", "maths").error == "R1 = Foo(3): unknown tool Foo"
    assert "unsupported tool: Code" in execute("R1 = Code(If 1 > 0, 1, 0)", "maths").error


def test_alias_answer_and_output():
    result = execute("R1 = Calculator(6 * 7); Answer = R1; R2 = Calculator(1)", "maths")
    assert result.ok and result.answer == "42"
    assert execute("R1 = Calculator(2); Output = R1 + 1", "maths").answer == "3"
    assert execute("Answer = R4", "maths").error == "Answer = R4: undefined variable R4"


def test_parse_error_is_reported_with_span():
    result = execute("R1 = Calculator(3", "maths")
    assert not result.ok and result.steps == []
    assert result.error.startswith("parse error: unclosed '(' at 15-17")


def test_qa_domain_chain():
    corpus = Corpus.from_context(
        [
            "Julius Caesar: Julius Caesar was a Roman general. Caesar had 3 children.",
            "Genghis Khan: Genghis Khan founded the Mongol Empire. Genghis Khan had 16 children.",
        ]
    )
    actions = (
        "R1 = KnowledgeQuery(Julius Caesar); R2 = ParagraphRetrieve(R1, Query: How many children did Julius Caesar "
        "have?); R3 = QA([R2], Question: How many children did Julius Caesar have?); R4 = KnowledgeQuery(Genghis "
        "Khan); R5 = ParagraphRetrieve(R4, Query: How many children did Genghis Khan have?); R6 = QA([R5], "
        "Question: How many children did Genghis Khan have?); R7 = Calculator(R6 > R3)"
    )
    result = execute(actions, "qa", ToolEnv(corpus=corpus))
    assert result.ok, result.error
    assert (result.values["R3"], result.values["R6"], result.answer) == ("3", "16", "True")
    assert result.steps[2].note == "extractive fallback"
    assert "unknown tool SolveEquation" in execute("R1 = SolveEquation(x = 1)", "qa").error


def test_web_domain_is_parsed_not_run():
    result = execute("R1 = CLICK(Env, QUERY: Go); R2 = TYPE(R1, QUERY: Type city, TEXT: Atlanta)", "web")
    assert result.ok and result.answer is None
    assert result.values == {"R1": "Env, QUERY: Go", "R2": "R1, QUERY: Type city, TEXT: Atlanta"}


def test_to_dict_is_json():
    data = json.loads(json.dumps(execute(LEAH, "maths").to_dict()))
    assert data["answer"] == "12" and data["steps"][0]["action"] == "R1 = Calculator(28 * 1/7)"


def test_cli_execute(capsys):
    assert main(["execute", "--domain", "maths", "--actions", "R1 = Calculator(3*4); R2 = Calculator(R1+5)"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["values"] == {"R1": "12", "R2": "17"} and out["answer"] == "17" and out["error"] is None


def test_cli_failure_prints_the_json_and_exits_one(capsys):
    assert main(["execute", "--domain", "maths", "--actions", "R1 = Calculator(R9)"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert not out["ok"] and "undefined variable R9" in out["error"]


def test_a_failed_step_leaves_no_answer_but_keeps_the_values_bound_before_it(capsys):
    """The last good value was reported as ``answer`` after a later step failed, which read as the actions' answer."""
    actions = "R1 = Calculator(3*4); R2 = Calculator(R1+5); R3 = Calculator(R9)"
    result = execute(actions, "maths")
    assert not result.ok and result.answer is None and result.values == {"R1": "12", "R2": "17"}
    assert main(["execute", "--domain", "maths", "--actions", actions]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["answer"] is None and out["values"] == {"R1": "12", "R2": "17"} and "R9" in out["error"]


def test_cli_context_file(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"title": "Albany, Georgia", "text": "Albany has a population of 75,000."}) + "\n")
    actions = "R1 = KnowledgeQuery(Albany, Georgia); R2 = QA([R1], Question: What is the population of Albany?)"
    assert main(["execute", "--domain", "qa", "--actions", actions, "--context", str(corpus)]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == "75000"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": "x"}\n')
    assert main(["execute", "--domain", "qa", "--actions", actions, "--context", str(bad)]) == 2
    assert "bad.jsonl:1: text" in capsys.readouterr().err
    assert main(["execute", "--domain", "qa", "--actions", actions, "--context", str(tmp_path / "none.jsonl")]) == 2


def test_equation_variable_is_substituted_as_the_equation():
    """Issue 13: Lumos substitutes a variable holding an equation as that equation, so this gives 9."""
    result = execute("R1 = SetEquation(3*y - 7 = 20); R2 = SolveEquation(R1)", "maths")
    assert result.ok, result.error
    assert result.values == {"R1": "3*y - 7 = 20", "R2": "9"} and result.answer == "9"
    copied = execute("R1 = SetEquation(3*y - 7 = 20); R2 = R1; Answer = SolveEquation(R2)", "maths")
    assert copied.ok and copied.answer == "9"


def test_equation_variables_combine_and_solve_as_a_system():
    actions = ("R1, R2 = SetEquation(x + y = 10, x - y = 2); R3 = Calculator(R1 - R2); R4 = SolveEquation(R3); "
               "R5 = SetEquation(x + y = 10, x - y = 2); R6, R7 = SolveEquation(R5); Answer = R4")
    result = execute(actions, "maths")
    assert result.ok, result.error
    assert (result.values["R1"], result.values["R2"], result.values["R3"]) == ("x + y = 10", "x - y = 2", "2*y = 8")
    assert (result.values["R6"], result.values["R7"], result.answer) == ("6", "4", "4")


def test_expression_and_inequality_variables_are_arguments():
    result = execute("R1 = Define(2*x + 1); R2 = SolveEquation(R1 = 7); R3 = SetEquation(R1 > 7); "
                     "R4 = SolveInequality(R3)", "maths")
    assert result.ok, result.error
    assert (result.values["R2"], result.values["R4"]) == ("3", "x > 3")


def test_equation_variable_misused_is_a_step_error():
    result = execute("R1 = SetEquation(3*y - 7 = 20); R2 = Calculator(sqrt(R1))", "maths")
    assert not result.ok and result.values == {"R1": "3*y - 7 = 20"}
    assert result.error.startswith("R2 = Calculator(sqrt(R1)): an equation can be solved")


def _doubling_chain(steps: int) -> str:
    """``R1 = x+y+z+1`` and then ``Rk = R(k-1)*R(k-1) + R(k-1)``: symbols do not combine, so each step doubles it."""
    actions = ["R1 = Calculator(x+y+z+1)"]
    actions += [f"R{k} = Calculator(R{k - 1}*R{k - 1}+R{k - 1})" for k in range(2, steps + 1)]
    return "; ".join(actions)


@pytest.mark.parametrize(("actions", "stops_at", "message"), [
    # Results past Python's 4,300 digits of int-to-text: rendering raised ValueError out of execute (a stage's crash).
    ("R1 = Calculator(factorial(1000)*factorial(1000)*factorial(1000)*factorial(1000))", "R1", "number too large"),
    ("R1 = Calculator(10**999); R2 = Calculator(R1*R1*R1*R1*R1)", "R2", "number too large"),
    ("R1 = Calculator(floor(exp(19999)))", "R1", "exp argument too large"),
    # ... and inside a symbolic value, where only the value's own size was checked (a review found these three).
    ("R1 = Calculator(10**999*x); R2 = Calculator(R1**5)", "R2", "number too large"),
    ("R1 = Calculator(x/10**999); R2 = Calculator(R1*R1*R1*R1*R1)", "R2", "number too large"),
    ("R1 = Calculator(factorial(1000)); R2 = Calculator(R1*x*R1)", "R2", "number too large"),
    # Doubling symbolic expressions: 13 steps took 11 s and 400 KB of text, 17 did not end within 30 s.
    (_doubling_chain(17), "R10", "expression too large"),
])
def test_a_value_too_large_to_write_out_is_a_failed_step_not_a_crash(actions, stops_at, message):
    """Found by a fuzzing audit of real grounder-like output: every hostile action ends as ``ok: false`` with its
    reason, the values before it kept, and nothing raised."""
    result = execute(actions, "maths")
    assert not result.ok and result.answer is None
    assert result.error.startswith(f"{stops_at} = Calculator(") and message in result.error
    assert stops_at not in result.values and all(len(text) < 50_000 for text in result.values.values())


def test_a_long_exact_decimal_renders_to_twelve_digits():
    """1.5/2**900 is an exact terminating decimal of 900 places: written out whole it was a 900-digit string (and
    a slow one); past 40 places it renders as any irrational does."""
    result = execute("R1 = Calculator(1.5/2**900); R2 = Calculator(0.1 + 0.2)", "maths")
    assert result.values == {"R1": "1.77457827925e-271", "R2": "0.3"}
