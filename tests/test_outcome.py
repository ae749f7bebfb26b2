"""engine.outcome is the one judge: the ground stage, the evaluation and the demo gap all decide correctness the
same way, with the task's source (a HotpotQA yes/no gold is judged by EM, a StrategyQA one by yes/no accuracy)."""

from __future__ import annotations

import pytest

from engine.evaluate import _trace
from engine.outcome import gold_step_results, is_solved, judge_answer, run_actions, step_matches
from engine.stages.ground import judge
from engine.tasks import Task

QUESTION = "Is Brindleford a river town?"
ACTIONS = f"R1 = KnowledgeQuery(Brindleford); R2 = QA([R1], Question: {QUESTION})"


class AnswersTrue:
    """Stands in for the remote QA model (an OpenAI-compatible API): it always answers "True"."""

    def answer(self, context: str, question: str) -> str:
        return "True"


def _task(source: str) -> Task:
    return Task(id=f"{source}-1", domain="qa", source=source, split="held_in", question=QUESTION,
                context=["Brindleford: Brindleford is a town on the river Vel."], answer="yes",
                gold_subgoals=["Find Brindleford.", "Answer."], gold_actions=ACTIONS.split("; "))


@pytest.mark.parametrize(("source", "expected"), [("hotpotqa", False), ("strategyqa", True)])
def test_yes_no_gold_is_judged_by_the_source_everywhere(source, expected):
    task, qa = _task(source), AnswersTrue()
    assert judge_answer(task, "True")["correct"] is expected
    result = run_actions(task, ACTIONS, qa)
    assert result.ok and result.answer == "True"
    assert is_solved(task, result) is expected
    _, ground_correct = judge(task, 0, ACTIONS, [], qa)  # the ground stage's verdict
    trace = _trace(task, "plan", task.gold_subgoals, ACTIONS, qa)  # the evaluation's
    assert ground_correct is expected and trace.correct is expected


def test_iterative_steps_are_judged_numerically_for_maths_and_as_text_otherwise():
    maths = Task(id="m", domain="maths", source="demo:maths", split="train", question="q",
                 gold_subgoals=["a", "b"], gold_actions=["R1 = Calculator(3*4)", "R2 = Calculator(R1+5)"], answer="17")
    assert gold_step_results(maths) == ["12", "17"]
    assert step_matches(maths, "17.0", "17") and not step_matches(maths, "16", "17")
    qa = _task("hotpotqa")
    assert step_matches(qa, " Yes ", "yes") and not step_matches(qa, "yes.", "yes")
    _, correct = judge(maths, 2, "R2 = Calculator(R1+5)", ["12", "17"])
    assert correct
    _, wrong = judge(maths, 2, "R2 = Calculator(R1+4)", ["12", "17"])
    assert not wrong
