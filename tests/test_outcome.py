"""engine.outcome is the one judge: the ground stage, the evaluation and the demo gap all decide correctness the
same way, with the task's source (a HotpotQA yes/no gold is judged by EM, a StrategyQA one by yes/no accuracy)."""

from __future__ import annotations

import pytest

from engine.evaluate import _trace
from engine.outcome import (
    Toolbox,
    gold_step_results,
    is_solved,
    judge_answer,
    run_actions,
    step_matches,
    toolbox_for,
)
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
    task, qa = _task(source), Toolbox(qa_model=AnswersTrue())
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


def test_tasks_without_context_search_the_runs_corpus(tmp_path):
    """``tools.corpus``: a StrategyQA-like task brings no passages; KnowledgeQuery searches the run's corpus (a task
    with context keeps its own). Without a corpus the action fails, saying so."""
    from engine.config import ToolsSection

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"title": "Brindleford", "text": "Brindleford is a market town by the river Vel."}\n'
                      '{"title": "Vel", "text": "The Vel is a river."}\n', encoding="utf-8")
    task = Task(id="s1", domain="qa", source="strategyqa", split="held_in", question=QUESTION, answer="yes")
    actions = "R1 = KnowledgeQuery(Brindleford); R2 = QA([R1], Question: Is Brindleford on a river?)"
    offline = run_actions(task, actions)
    assert not offline.ok and "no corpus" in offline.error
    toolbox = toolbox_for(ToolsSection(corpus=str(corpus)))
    result = run_actions(task, actions, toolbox)
    assert result.ok and "market town" in result.values["R1"] and is_solved(task, result)
    assert toolbox_for(ToolsSection(corpus=str(corpus))).corpus is toolbox.corpus  # loaded once per file version
    own = _task("hotpotqa")  # has its own context: the run's corpus is not used
    assert "market" not in run_actions(own, "R1 = KnowledgeQuery(Brindleford)", toolbox).values["R1"]
