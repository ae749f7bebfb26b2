"""Prompt rendering: byte-for-byte round trips against the carried Lumos samples, chat layout,
prompt/completion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.formats.lumos import load_lumos
from engine.prompts import (
    format_subgoals,
    grounder_messages,
    planner_messages,
    prompt_and_completion,
    render_chat,
)
from engine.tasks import Task

DATASETS = ("maths", "complex_qa", "web_agent")
FORMULATIONS = ("onetime", "iterative")


def sample_messages(path: Path) -> dict[str, list[dict]]:
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return {row["id"]: row["messages"] for row in rows}


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("dataset", DATASETS)
def test_round_trip_reproduces_samples(samples_dir, dataset, formulation):
    plan = samples_dir / f"lumos_derived_{dataset}_plan_{formulation}.jsonl"
    ground = samples_dir / f"lumos_derived_{dataset}_ground_{formulation}.jsonl"
    plans, grounds = sample_messages(plan), sample_messages(ground)
    tasks = list(load_lumos(plan, ground))
    assert len(tasks) == len(plans)
    for task in tasks:
        results = task.meta.get("executed_results")
        rendered_plan = planner_messages(task, task.gold_subgoals, formulation, results)
        shown = task.meta.get("grounding_results")
        rendered_ground = grounder_messages(task, task.gold_subgoals, task.gold_actions, formulation, shown)
        # Whole message lists, so user turns (and the assistant targets) match byte for byte.
        assert rendered_plan == plans[task.id], task.id
        assert rendered_ground == grounds[task.id], task.id


def test_web_planner_feedback_derived_from_subgoals(samples_dir):
    plan = samples_dir / "lumos_derived_web_agent_plan_iterative.jsonl"
    task = next(iter(load_lumos(plan)))
    assert planner_messages(task, task.gold_subgoals, "iterative") == sample_messages(plan)[task.id]


def make_task(domain: str = "maths") -> Task:
    return Task(id="t", domain=domain, source="x", split="held_in", question="What is 2+3?")


def test_format_subgoals_keeps_periods():
    assert format_subgoals(["Calculate a.", "Add b."]) == "Subgoal 1: Calculate a.; Subgoal 2: Add b."


def test_planner_prompts():
    task = make_task()
    (only,) = planner_messages(task)
    assert only == {
        "role": "user",
        "content": "Please provide a reasonable subgoal-based plan to solve the given task.\n"
        "Task: What is 2+3?; Initial Environment Description: None.",
    }
    chat = planner_messages(task, ["Add.", "Check."], "iterative", results=["5."])
    # One result for two subgoals: the chat ends on subgoal 2, awaiting its result.
    assert [m["content"] for m in chat[1:]] == [
        "Subgoal 1: Add.",
        "The executed result for Subgoal 1 is 5. Should we stop planning?",
        "No, I will keep planning. Subgoal 2: Check.",
    ]
    done = planner_messages(task, ["Add."], "iterative", results=["5"])
    assert done[-1] == {"role": "assistant", "content": "Yes, I will stop planning."}
    with pytest.raises(ValueError):
        planner_messages(task, ["Add.", "Check."], "iterative")
    with pytest.raises(ValueError):
        planner_messages(task, ["Add."], "sometimes")


def test_grounder_iterative_scoring_prompt():
    task = make_task("qa")
    chat = grounder_messages(task, ["Find a.", "Find b."], ["R1 = QA(a)"], "iterative", results=["x."])
    assert [m["role"] for m in chat] == ["user", "assistant", "user"]
    assert chat[0]["content"].endswith("Task: What is 2+3? \nSubgoal to be grounded: Subgoal 1: Find a.\n")
    assert chat[2]["content"] == (
        "Subgoal to be grounded: Subgoal 2: Find b. The grounding could be based on the following results: "
        "The execution result for Subgoal 1 is x.\n"
    )
    onetime = grounder_messages(make_task("web"), ["Click."], None)
    assert len(onetime) == 1 and onetime[0]["content"].endswith("Subgoals to be grounded: Subgoal 1: Click.\n")
    with pytest.raises(ValueError):
        grounder_messages(make_task("code"), ["x"])


def test_qa_results_sorted_like_lumos():
    subgoals = [f"S{i}." for i in range(1, 12)]
    chat = grounder_messages(
        make_task("qa"),
        subgoals,
        [f"R{i} = QA(x)" for i in range(1, 11)],
        "iterative",
        results=[f"r{i}." for i in range(1, 11)],
    )
    last = chat[-1]["content"]
    # Lumos sorts "Subgoal i" keys as strings: 1, 10, 2, ...
    assert last.index("Subgoal 10 is r10.") < last.index("Subgoal 2 is r2.")


def test_render_chat_lumos_layout():
    messages = [
        {"role": "user", "content": "Q\n"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": " A2 "},
    ]
    assert render_chat(messages) == "<|user|>\nQ\n<|assistant|>\nA1</s>\n<|user|>\nmore\n<|assistant|>\nA2</s>"
    assert render_chat(messages[:1], add_generation_prompt=True) == "<|user|>\nQ\n<|assistant|>\n"
    with pytest.raises(ValueError):
        render_chat([{"role": "tool", "content": "x"}])
    with pytest.raises(ValueError):
        render_chat(messages, template="chatml")


def test_prompt_and_completion_split():
    messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    prompt, completion = prompt_and_completion(messages)
    assert prompt == "<|user|>\nQ\n<|assistant|>\n"
    assert completion == "A</s>"
    assert prompt + completion == render_chat(messages)
    with pytest.raises(ValueError):
        prompt_and_completion(messages[:1])


def test_prompt_and_completion_on_sample(samples_dir):
    ground = samples_dir / "lumos_derived_maths_ground_iterative.jsonl"
    task = next(iter(load_lumos(ground)))
    chat = grounder_messages(task, task.gold_subgoals[:2], task.gold_actions[:2], "iterative")
    prompt, completion = prompt_and_completion(chat)
    assert prompt.endswith(
        "Subgoal to be grounded: Subgoal 2: Calculate the third, fourth and fifth terms according "
        "to the calculated difference.\n<|assistant|>\n"
    )
    assert completion == task.gold_actions[1] + "</s>"


class FakeTokenizer:
    """Stands in for a HF tokenizer with a ChatML-like template."""

    eos_token = "<|im_end|>"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        assert tokenize is False
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def test_tokenizer_template():
    messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    tok = FakeTokenizer()
    prompt, completion = prompt_and_completion(messages, template="tokenizer", tokenizer=tok)
    assert prompt == "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    assert completion == "A<|im_end|>\n"
    # The lumos layout takes the eos string from a given tokenizer.
    assert render_chat(messages, tokenizer=tok).endswith("A<|im_end|>")
    with pytest.raises(ValueError):
        render_chat(messages, template="tokenizer")
