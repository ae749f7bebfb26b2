"""The Lumos action parser: real sample messages, the tricky argument forms, and located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.actions import Action, format_actions, keyword_args, parse_actions, split_args


def _assistant_messages(samples_dir: Path) -> list[str]:
    # The six grounder files by name, not a glob: a glob over an incomplete folder would quietly test fewer files.
    files = [samples_dir / f"lumos_derived_{dataset}_ground_{formulation}.jsonl"
             for dataset in ("maths", "complex_qa", "web_agent") for formulation in ("iterative", "onetime")]
    return [
        m["content"]
        for path in files
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
        for m in json.loads(line)["messages"]
        if m["role"] == "assistant"
    ]


def test_every_sample_assistant_message_parses(samples_dir):
    messages = _assistant_messages(samples_dir)
    assert messages
    for text in messages:
        parsed = parse_actions(text)
        assert parsed.ok, (text, parsed.error)
        assert parsed.actions and all(a.tool for a in parsed.actions)
        # spans point at the actions themselves
        for action in parsed.actions:
            assert text[action.span[0] : action.span[1]].startswith(action.outputs[0])


def test_basic_and_multi_output():
    text = "R1 = Calculator(3*4); R5, R6 = SolveEquation(R2=xy, R3=x/y)\nOutput = Calculator(R4(R5, R6))"
    parsed = parse_actions(text)
    assert parsed.ok
    assert [a.outputs for a in parsed.actions] == [("R1",), ("R5", "R6"), ("Output",)]
    assert [a.tool for a in parsed.actions] == ["Calculator", "SolveEquation", "Calculator"]
    assert parsed.actions[1].arg_text == "R2=xy, R3=x/y"
    assert parsed.actions[2].arg_text == "R4(R5, R6)"
    first = parsed.actions[0]
    assert text[first.span[0] : first.span[1]] == "R1 = Calculator(3*4)"


def test_commas_brackets_and_nested_parens_in_arguments():
    text = (
        "R1 = KnowledgeQuery(Albany, Georgia); R4 = CLICK(R3, QUERY: Choose the option Atlanta, GA (ATL)); "
        "R7 = QA([R3, R6], Question: Is dog's hearing better than Grey seal's?)"
    )
    parsed = parse_actions(text)
    assert parsed.ok
    assert [a.arg_text for a in parsed.actions] == [
        "Albany, Georgia",
        "R3, QUERY: Choose the option Atlanta, GA (ATL)",
        "[R3, R6], Question: Is dog's hearing better than Grey seal's?",
    ]


def test_annotations_trailing_dot_and_alias():
    parsed = parse_actions(
        "R1 = Calculator(2 - 0.5) = 1.5\n R2 = KnowledgeQuery(Julius Caesar) = WikipediaPage(Julius Caesar). \n"
        "Answer = R2."
    )
    assert parsed.ok
    assert parsed.actions[0].arg_text == "2 - 0.5"
    assert parsed.actions[1].arg_text == "Julius Caesar"
    assert parsed.actions[2] == Action(("Answer",), None, "R2", parsed.actions[2].span)
    assert format_actions(parsed.actions) == (
        "R1 = Calculator(2 - 0.5); R2 = KnowledgeQuery(Julius Caesar); Answer = R2"
    )


@pytest.mark.parametrize(
    "text, message, snippet",
    [
        ("", "empty action text", ""),
        ("   ;  ", "empty action text", "   ;  "),
        ("R1 = Calculator(3); Calculator(4)", "missing '='", "Calculator(4)"),
        ("R1 = Calculator(3; R2 = Calculator(4)", "unclosed '('", "(3; R2 = Calculator(4)"),
        ("R1 = Calculator(3))", "unbalanced ')'", ")"),
        ("1R = Calculator(3)", "bad variable name", "1R"),
        ("R1, R 2 = SolveEquation(x)", "bad variable name", "R 2"),
        ("R1 = Calculator(3) extra", "unexpected text", " extra"),
        ("R1 = ", "missing right-hand side", "R1 ="),
    ],
)
def test_errors_have_spans(text, message, snippet):
    parsed = parse_actions(text)
    assert not parsed.ok
    assert message in parsed.error.message
    start, end = parsed.error.span
    assert text[start:end] == parsed.error.snippet == snippet


def test_error_keeps_actions_before_it():
    parsed = parse_actions("R1 = Calculator(1); oops")
    assert [a.outputs for a in parsed.actions] == [("R1",)]
    assert parsed.error.span == (20, 24)


def test_split_args():
    assert split_args("2^0, 2^1 * 3, gcd(4, 6), [1, 2]") == ["2^0", "2^1 * 3", "gcd(4, 6)", "[1, 2]"]
    assert split_args("'a, b', \"c\"") == ["'a, b'", '"c"']
    assert split_args("dog's hearing, seal's") == ["dog's hearing", "seal's"]
    assert split_args("") == []


def test_keyword_args():
    assert keyword_args("R1, Query: text, with, commas", ["Query"]) == (["R1"], {"Query": "text, with, commas"})
    assert keyword_args("R2, QUERY: Type Atlanta, TEXT: Atlanta", ["Query", "Text"]) == (
        ["R2"],
        {"Query": "Type Atlanta", "Text": "Atlanta"},
    )
    assert keyword_args("[R2, R5], Question: What (a, b)?", ["Question"]) == (
        ["[R2, R5]"],
        {"Question": "What (a, b)?"},
    )
    assert keyword_args("a, b", ["Query"]) == (["a", "b"], {})


def test_tools_of_lists_each_called_tool_once_in_order():
    from engine.actions import tools_of

    text = "R1 = Calculator(2+3); R2 = SolveEquation(R1=x); R3 = Calculator(R2*2); Answer = R3"
    assert tools_of(text) == ["Calculator", "SolveEquation"]  # an alias names no tool
    assert tools_of("R1 = Ask(x); then compute it") == ["Ask"]  # the tools before a parse error
    assert tools_of("R1 = Ask(x); R2 = Calculator(3*(4") == []  # unbalanced brackets: nothing parses
    assert tools_of(None) == [] and tools_of("") == []
