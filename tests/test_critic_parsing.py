"""Critic reply parsing and critic prompts: hand-written replies in the forms real models produce."""

from __future__ import annotations

import re

import pytest

from engine.critics.base import Grounding
from engine.critics.parsing import parse_response, strip_reasoning
from engine.critics.prompts import critic_messages
from engine.tasks import Task

CORRECTION = ("Corrected Subgoals: Subgoal 1: Find the total cost.; Subgoal 2: Subtract it from 20.\n"
              "Corrected Actions: R1 = Calculator(3*4); R2 = Calculator(20-R1)")


@pytest.mark.parametrize("text", [
    "Final answer reached",
    "final answer reached.",
    "Final Answer Reached.",
    "  FINAL   ANSWER   REACHED!  ",
    "**Final answer reached**",
    "The subgoals and actions look right.\n\nFinal answer reached.",
    "```\nFinal answer reached\n```",
    "<think>Let me check R1 = 12... the sum is right.</think>\nFinal answer reached",
    "Okay, checking the arithmetic: 3*4 = 12.\n</think>\n\nFinal answer reached.",
    "Final answer reached.\nCorrected Subgoals: None\nCorrected Actions: None",
])
def test_accept_forms(text):
    fields = parse_response(text, "stop")
    assert fields["status"] == "accepted", fields
    assert fields["raw"] == text
    assert fields["corrected_actions"] is None and fields["corrected_subgoals"] is None


@pytest.mark.parametrize("text", [
    CORRECTION,
    "CORRECTED SUBGOALS:subgoal 1:Find the total cost.;  SUBGOAL 2 :  Subtract it from 20.\n"
    "corrected   actions :   R1 = Calculator(3*4);R2 = Calculator(20-R1)  ",
    "**Corrected Subgoals:** Subgoal 1: Find the total cost.; Subgoal 2: Subtract it from 20.\n"
    "**Corrected Actions:** R1 = Calculator(3*4); R2 = Calculator(20-R1)",
    "### Corrected Subgoals:\n- Subgoal 1: Find the total cost.\n- Subgoal 2: Subtract it from 20.\n\n"
    "### Corrected Actions:\n```\nR1 = Calculator(3*4)\nR2 = Calculator(20-R1)\n```\n",
    "Corrected  subgoals :\n1. **Subgoal 1:** Find the total cost.\n2. **Subgoal 2:** Subtract it from 20.\n"
    "Corrected actions:\n* `R1 = Calculator(3*4);`\n* `R2 = Calculator(20-R1).`\n\nThis fixes the subtraction.",
    "<think>The grounder multiplied wrongly. Corrected Actions: maybe R1 = ?</think>\n" + CORRECTION,
    "Final answer reached? No: the second step is wrong.\n" + CORRECTION,
    "Corrected Subgoals: Subgoal 1: Find the total cost.; Subgoal 2: Subtract it from 20.\n"
    "Corrected Actions:\nHere are the fixed actions:\nR1 = Calculator(3*4) = 12; R2 = Calculator(20-R1) = 8",
])
def test_correction_forms(text):
    fields = parse_response(text, "stop")
    assert fields["status"] == "corrected", fields
    assert fields["raw"] == text
    assert fields["corrected_subgoals"] == ["Find the total cost.", "Subtract it from 20."]
    assert fields["corrected_actions"] == "R1 = Calculator(3*4); R2 = Calculator(20-R1)"


def test_correction_without_subgoals_keeps_the_plan_and_multiline_code_survives():
    text = "Corrected Actions: R1 = Code(def f(x):\n    return x + 1\n); R2 = Calculator(R1 * 2)\nWhy: shorter."
    fields = parse_response(text, "stop")
    assert fields["status"] == "corrected" and fields["corrected_subgoals"] is None
    assert fields["corrected_actions"].startswith("R1 = Code(def f(x):") and "R2 = Calculator(R1 * 2)" in \
        fields["corrected_actions"]


@pytest.mark.parametrize("text, reason", [
    ("Corrected Subgoals: Subgoal 1: Add.\nCorrected Actions: R1 = Calculator(3*4", "corrected actions"),
    ("Corrected Subgoals: Subgoal 1: Add.\nCorrected Actions: R1 Calculator(3)", "corrected actions"),
    ("Corrected Subgoals: Subgoal 1: Add.\nCorrected Actions:", "corrected actions"),
    ("Corrected Subgoals: Subgoal 1: Add.; Subgoal 3: Oops.\nCorrected Actions: R1 = Calculator(1)",
     "corrected subgoals"),
    ("Corrected Subgoals: just add them\nCorrected Actions: R1 = Calculator(1)", "corrected subgoals"),
    ("Corrected Subgoals: Subgoal 1: Add.", "without corrected actions"),
    ("The answer looks plausible to me.", "neither"),
    ("The final answer reached by these actions is wrong.", "neither"),
    ("", "empty"),
    ("<think>Still thinking about whether R1 is right", "never closed"),
])
def test_unparsed_keeps_raw_and_says_why(text, reason):
    fields = parse_response(text, "stop")
    assert fields["status"] == "unparsed", fields
    assert fields["raw"] == text
    assert reason in fields["extra"]["parse_error"]
    assert fields["corrected_actions"] is None


def test_length_is_truncated_even_when_the_text_looks_whole():
    for text in ("Final answer reached", CORRECTION, "Corrected Actions: R1 = Calcul"):
        fields = parse_response(text, "length")
        assert fields["status"] == "truncated" and fields["raw"] == text and fields["finish_reason"] == "length"
        assert fields["corrected_actions"] is None


def test_none_text_and_content_filter():
    assert parse_response(None, "stop")["status"] == "unparsed"
    assert parse_response(None, "stop")["raw"] == ""
    assert parse_response("", "content_filter")["status"] == "error"


def _item(domain: str, question: str, execution: dict) -> Grounding:
    task = Task(id="t1", domain=domain, source="test", split="train", question=question, answer="GOLD-ANSWER")
    return Grounding(task, 0, 0, ["Find the total cost.", "Subtract it from 20."],
                     "R1 = Calculator(3*4); R2 = Calculator(20-R1)", execution, False)


@pytest.mark.parametrize("domain, tool", [("maths", "SolveEquation"), ("qa", "KnowledgeQuery"), ("web", "CLICK")])
def test_prompts_per_domain(domain, tool):
    execution = {"ok": True, "values": {"R1": "12", "R2": "x" * 1000}, "answer": "8", "error": None}
    messages = critic_messages(_item(domain, "Tom buys 3 pens at 4 dollars; he pays with 20.", execution))
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert tool in user and "Tom buys 3 pens" in user
    assert "Subgoal 1: Find the total cost.; Subgoal 2: Subtract it from 20." in user
    assert "R1 = Calculator(3*4); R2 = Calculator(20-R1)" in user and "R1 = 12" in user
    assert "Final answer reached" in user and "Corrected Subgoals:" in user and "Corrected Actions:" in user
    assert "x" * 400 not in user  # long values are shortened
    assert "GOLD-ANSWER" not in user  # the critic judges the work, it is not told the answer


def test_prompt_shows_execution_errors():
    execution = {"ok": False, "values": {}, "answer": None, "error": "R1 = Foo(1): unknown tool Foo"}
    user = critic_messages(_item("maths", "q?", execution))[1]["content"]
    assert "unknown tool Foo" in user


@pytest.mark.slow
def test_hf_critic_on_a_tiny_model_never_crashes(tiny_agents_dir):
    from engine.config import CriticSection
    from engine.critics import make_critic

    critic = make_critic(CriticSection(backend="hf", model=str(tiny_agents_dir / "grounder"), max_tokens=6,
                                       concurrency=2))
    execution = {"ok": True, "values": {"R1": "12"}, "answer": "12", "error": None}
    items = [_item(domain, "How much change from 20?", execution) for domain in ("maths", "qa", "web")]
    verdicts = critic.judge(items)
    assert len(verdicts) == 3
    for v in verdicts:
        assert v.backend == "hf" and v.model == str(tiny_agents_dir / "grounder")
        assert v.status in ("unparsed", "truncated"), v  # a tiny demo model writes no critique
        assert isinstance(v.raw, str) and v.prompt_tokens > 0 and v.latency_s >= 0
        assert v.finish_reason in ("length", "stop")
        assert (v.finish_reason == "length") == (v.completion_tokens >= 6)
    rendered = critic.render(critic_messages(items[0]))
    assert "How much change from 20?" in rendered and "Final answer reached" in rendered


def test_hf_critic_with_a_missing_model_gives_error_verdicts(tmp_path):
    from engine.config import CriticSection
    from engine.critics.hf import HFCritic

    execution = {"ok": True, "values": {}, "answer": "1", "error": None}
    verdicts = HFCritic(CriticSection(backend="hf", model=str(tmp_path / "nope"))).judge(
        [_item("maths", "q?", execution)])
    assert [v.status for v in verdicts] == ["error"] and verdicts[0].raw


def test_reasoning_blocks_are_dropped_in_one_pass_as_the_lazy_regex_dropped_them():
    """``strip_reasoning`` used ``<(think|...)>.*?</\\1>``, which rescans to the end of the reply from every opening
    tag that never closes: a reply of 20,000 ``<think>`` took about 17 s, 150,000 did not end. The one-pass scan
    drops exactly what the regex dropped (20,000 random replies of tags, near-tags and text, any case), and a
    reply of 150,000 unclosed tags is read once."""
    import random

    from engine.critics.parsing import _drop_closed_blocks

    lazy = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
    pieces = ["<think>", "</think>", "<THINK>", "</Think>", "<thinking>", "</thinking>", "<reasoning>",
              "</reasoning>", "<thin>", "</", "a", " b\n"]
    rng = random.Random(0)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert _drop_closed_blocks(text) == lazy.sub("", text), text
    reply = "<think> I am thinking about it. " * 150_000 + "Final answer reached"
    assert strip_reasoning(reply) == ("", "a reasoning block was opened and never closed")


def test_a_long_run_of_spaces_newlines_or_asterisks_is_read_in_linear_time():
    """The label pattern began with ``[*_\\s]*``, which a search tried again from every character of a run of spaces,
    newlines or asterisks, each time to the run's end: a reply of 30,000 such characters (a small model's padding, a
    markdown rule) took half a minute to read, 300,000 nearly an hour, while the critique stage waited. The label is
    found where it was (20,000 random replies of labels, markup and text), and such replies are read at once."""
    import random
    import time

    from engine.critics import parsing

    for old, new in ((r"[*_\s]*corrected[*_\s]+actions?[*_\s]*[:：][*_]*", parsing._ACTIONS_LABEL),
                     (r"[*_\s]*corrected[*_\s]+sub[-\s]?goals?[*_\s]*[:：][*_]*", parsing._SUBGOALS_LABEL)):
        before = re.compile(old, re.I)
        pieces = ["Corrected", "corrected", "actions", "subgoals", "sub-goal", ":", "：", "*", "**", "_", " ", "\n",
                  "\t", "x", "R1 = Calculator(1)"]
        rng = random.Random(0)
        for _ in range(20_000):
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
            assert [m.span() for m in new.finditer(text)] == [m.span() for m in before.finditer(text)], text
    for filler in (" ", "\n", "*", " \n*_\t"):
        reply = filler * (30_000 // len(filler)) + "\n" + CORRECTION
        start = time.perf_counter()
        fields = parse_response(reply, "stop")
        assert time.perf_counter() - start < 2.0, repr(filler)
        assert fields["status"] == "corrected" and fields["corrected_actions"] == \
            "R1 = Calculator(3*4); R2 = Calculator(20-R1)"
        start = time.perf_counter()
        assert parse_response(filler * 30_000, "stop")["status"] == "unparsed"
        assert time.perf_counter() - start < 2.0, repr(filler)


def test_a_loose_list_of_corrected_actions_is_read_whole():
    """A blank line ended the action block, so a loose markdown list (a blank line between its items, as chat models
    often write) became a "corrected" verdict holding the first action alone: the grounder was trained on a third of
    the correction. A new action after a blank line continues the block now; a restatement of the same actions, or
    prose that only starts like an assignment, still ends it."""
    loose = ("Corrected Subgoals:\n\n1. Subgoal 1: Find the total cost.\n\n2. Subgoal 2: Subtract it from 20.\n\n"
             "Corrected Actions:\n\n1. `R1 = Calculator(3*4)`\n\n2. `R2 = Calculator(20-R1)`\n\n3. `Answer = R2`\n\n"
             "This fixes the subtraction.")
    fields = parse_response(loose, "stop")
    assert fields["status"] == "corrected" and fields["corrected_subgoals"] == ["Find the total cost.",
                                                                                 "Subtract it from 20."]
    assert fields["corrected_actions"] == "R1 = Calculator(3*4); R2 = Calculator(20-R1); Answer = R2"
    for after in ("R1 = Calculator(3*4) = 12\nR2 = Calculator(20-R1) = 8",  # the same actions, with their values
                  "R2 = 12 is what the first action gives", "x = 5 because the sum was wrong"):
        fields = parse_response(CORRECTION + "\n\n" + after, "stop")
        assert fields["corrected_actions"] == "R1 = Calculator(3*4); R2 = Calculator(20-R1)", after
    spread = "Corrected Actions: R1, R2 = SolveEquation(x+y=3, x-y=1)\n\nR3 = Calculator(R1*R2)\n\nR2 = Calculator(1)"
    assert parse_response(spread, "stop")["corrected_actions"] == \
        "R1, R2 = SolveEquation(x+y=3, x-y=1); R3 = Calculator(R1*R2)"
