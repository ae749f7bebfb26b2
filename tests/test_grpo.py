"""Online group RL of the planner (stages.planner_objective = grpo): the named rewards, the advantages the rollout
book stores (pinned against TRL's own), training with each reward, and a loop iteration that stores its rollouts."""

from __future__ import annotations

import json
import math

import pytest
import torch

from engine import generation, scoring
from engine.config import GRPOSettings
from engine.rewards import (
    ExecutionReward,
    FormatReward,
    GapReward,
    RolloutBook,
    group_advantages,
    overlong_reward,
)
from engine.turns import Agent, grounder_prompt, planner_prompt


def _train_tasks(demo_tasks, n: int = 2):
    return [t for t in demo_tasks if t.split == "train" and t.domain == "maths" and t.gold_actions][:n]


def _gold_plan(task) -> str:
    from engine.prompts import format_subgoals

    return format_subgoals(list(task.gold_subgoals))  # the planner's own layout


def test_each_reward_scores_a_plan(tiny_agents, demo_tasks):
    _, grounder = tiny_agents
    task = _train_tasks(demo_tasks, 1)[0]
    tasks = {task.id: task}
    good, bad = _gold_plan(task), "no plan here at all"
    # format: a parsed plan scores 1, free text 0
    assert FormatReward()(prompts=["p", "p"], completions=[good, bad]) == [1.0, 0.0]
    # gap: minus the scorer's log-PPL of the gold actions given that plan (the score stage's number)
    gap = GapReward(grounder, tasks)(prompts=["p"], completions=[good], task_id=[task.id])
    want = scoring.score_targets(grounder.model, grounder.tokenizer,
                                 [grounder_prompt(grounder, task, list(task.gold_subgoals))], [task.actions_text])
    assert gap[0] == pytest.approx(-want[0], abs=1e-6)
    # execution: 1 when the grounded actions reach the gold answer (here a grounding that knows them), else 0
    def knows(tasks_, plans):
        return [t.actions_text if plan == list(t.gold_subgoals) else "R1 = Calculator(1+1)"
                for t, plan in zip(tasks_, plans)]

    execution = ExecutionReward(knows, tasks)(prompts=["p", "p"], completions=[good, bad], task_id=[task.id] * 2)
    assert execution == [1.0, 0.0]
    # overlong: TRL's soft punishment, under our name
    overlong = overlong_reward(10, 4)
    assert overlong.__name__ == "overlong" and overlong(completion_ids=[[1] * 5, [1] * 8, [1] * 12]) == [0.0, -0.5,
                                                                                                        -1.0]


def test_group_advantages_follow_trl_and_a_constant_reward_gives_zero():
    totals = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 2.0, 2.0, 2.0])
    advantages = group_advantages(totals, 4)
    first = totals[:4]
    assert torch.allclose(advantages[:4], (first - first.mean()) / (first.std() + 1e-4))
    assert torch.equal(advantages[4:], torch.zeros(4))  # a group whose reward is constant teaches nothing
    assert torch.allclose(group_advantages(totals, 4, "none")[:4], first - first.mean())
    with_nan = group_advantages(torch.tensor([1.0, float("nan"), 0.0, 1.0]), 2)
    assert with_nan[1] == 0 and not torch.isnan(with_nan).any()


def _grpo_settings(**overrides) -> GRPOSettings:
    values = dict(learning_rate=1e-3, num_generations=4, batch_size=4, max_steps=2, max_completion_length=24,
                  logging_steps=1, bf16="false", seed=3)
    values.update(overrides)
    return GRPOSettings(**values)


@pytest.mark.parametrize("reward", ["gap", "execution", "format"])
def test_grpo_trains_with_each_reward_and_the_book_keeps_trls_advantages(tiny_agents, demo_tasks, monkeypatch,
                                                                        reward):
    from trl import GRPOTrainer

    from engine.rewards import grounder_actions
    from engine.training import grpo_train

    planner, grounder = tiny_agents
    tasks = _train_tasks(demo_tasks, 2)
    by_id = {t.id: t for t in tasks}
    funcs = {"gap": lambda: GapReward(grounder, by_id),
             "execution": lambda: ExecutionReward(grounder_actions(grounder, max_new_tokens=24), by_id),
             "format": FormatReward}
    settings = _grpo_settings()
    book = RolloutBook([funcs[reward]()], [1.0], settings.num_generations)
    # TRL's own advantages, batch by batch, to compare with what the book stores
    seen: list[list[float]] = []
    original = GRPOTrainer._generate_and_score_completions

    def spy(self, inputs):
        out = original(self, inputs)
        seen.append(list(self._logs["advantages"]))
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", spy)
    before = [p.detach().clone() for p in planner.model.parameters()]
    rows = [{"prompt": planner_prompt(planner, t), "task_id": t.id} for t in tasks]
    model, history = grpo_train(planner.model, planner.tokenizer, rows, settings, book,
                                stop_token_ids=generation.stop_token_ids(planner.model, planner.tokenizer))
    assert len(book.rollouts) == settings.max_steps * settings.batch_size
    assert {r.task_id for r in book.rollouts} <= set(by_id)
    assert all(set(r.rewards) == {reward} for r in book.rollouts)
    stored = [[r.advantage for r in book.rollouts if r.batch == b] for b in range(settings.max_steps)]
    assert len(seen) == settings.max_steps
    for ours, theirs in zip(stored, seen):
        assert ours == pytest.approx(theirs[-len(ours):], abs=1e-5)
    for rollout in book.rollouts:  # the total is the weighted sum
        value = rollout.rewards[reward]
        assert (rollout.reward is None and value is None) or rollout.reward == pytest.approx(value)
    assert any(f"rewards/{reward}/mean" in line for line in history)
    changed = any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    spread = any(abs(r.advantage) > 0 for r in book.rollouts)
    assert changed == spread or changed  # no advantage anywhere: nothing to learn; else the weights moved
    assert all(math.isfinite(r.advantage) for r in book.rollouts)


GRPO_LOOP = ["stages.planner_objective=grpo", "grpo.num_generations=3", "grpo.batch_size=3", "grpo.max_steps=2",
             "grpo.max_completion_length=16", "grpo.learning_rate=1e-3", "grpo.bf16=false",
             "grpo.rewards=gap,format"]


def test_an_iteration_with_grpo_stores_its_rollouts_and_a_rerun_replaces_them(tmp_path, tiny_agents_dir, demo_tasks):
    from engine.config import load_config
    from engine.loop import create_run, run_loop, run_stage
    from engine.store import Store
    from engine.tasks import write_tasks
    from tests._tiny import tiny_overrides

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(demo_tasks, tasks_file)
    config = load_config(None, [*tiny_overrides(tmp_path, tiny_agents_dir, tasks_file), *GRPO_LOOP])
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, config)
        assert run_loop(store, run_id) == "done"
        state = store.stage_status(run_id, 1)["train_planner"]
        assert state["status"] == "done" and state["counts"]["objective"] == "grpo"
        rollouts = store.frame("rollouts", run_id, 1)
        assert len(rollouts) == 2 * 3 == state["counts"]["rollouts"]
        train_ids = {t.id for t in store.get_tasks(run_id, split="train")}
        assert set(rollouts["task_id"]) <= train_ids
        for row in rollouts.itertuples():
            rewards = json.loads(row.rewards_json)
            assert set(rewards) == {"gap", "format"}
            assert row.reward == pytest.approx(rewards["gap"] + 0.5 * rewards["format"])
        # each batch is one task's group: its advantages sum to ~0 (float32 over a small std) and rank as its rewards
        for _, group in rollouts.groupby("batch"):
            assert group["task_id"].nunique() == 1 and abs(group["advantage"].sum()) < 1e-2
            assert list(group.sort_values("reward")["n"]) == list(group.sort_values("advantage")["n"]) or \
                group["reward"].nunique() == 1
        assert store.checkpoint(run_id, 1, "planner")["kind"] == "full"
        logs = store.frame("train_logs", run_id, 1)
        assert any("rewards/gap/mean" in line for line in logs[logs.stage == "train_planner"]["logs_json"])
        # what the studio reads: the summary, and a task's group beside its DPO pair (best advantage first)
        from engine.rollouts import rollout_summary, task_group
        from studio.tab_pairs import pair_group

        summary = rollout_summary(store, run_id, 1)
        assert summary["rollouts"] == 6 and summary["groups"] == 2 and set(summary["reward_means"]) == {"gap",
                                                                                                      "format"}
        task = rollouts["task_id"].iloc[0]
        group = task_group(store, run_id, 1, task)
        assert [g["advantage"] for g in group] == sorted((g["advantage"] for g in group), reverse=True)
        view = pair_group(store, run_id, 1, f"{task}|0|0")
        assert "GRPO group of this task" in view and view.count("<tr>") == len(group) + 1
        assert pair_group(store, run_id, 0, f"{task}|0|0") == ""  # no rollouts: nothing drawn
        from studio.tab_run import stage_table

        table = stage_table(store, run_id)
        line = table[(table["iteration"] == 1) & (table["stage"] == "train_planner")]["summary"].iloc[0]
        assert line.startswith("GRPO on 4 tasks: 6 rollouts, mean reward ") and "(gap, format)" in line
                # the rollouts export as TRL-style prompt/completion rows with their rewards (datasets loads the file)
        from datasets import load_dataset

        from engine.export import export_rollouts

        out = tmp_path / "rollouts.jsonl"
        assert export_rollouts(store, run_id, 1, out) == 6
        loaded = load_dataset("json", data_files=str(out), split="train")
        questions = {t.id: t.question for t in store.get_tasks(run_id)}
        assert all(questions[row["task_id"]] in row["prompt"] for row in loaded)  # each rollout's planner prompt
        assert set(json.loads(loaded[0]["rewards"])) == {"gap", "format"}
        assert sorted(loaded["completion"]) == sorted(rollouts["text"])
        # a re-run of the stage starts over: the same number of rollouts, never twice as many
        assert run_stage(store, run_id, 1, "train_planner") == "done"
        assert store.count("rollouts", run_id, 1) == 6


@pytest.mark.parametrize("override, field, words", [
    (["grpo.batch_size=4"], "grpo.batch_size", "multiple of num_generations"),
    (["grpo.rewards=gap,gap"], "grpo.rewards", "named twice"),
    (["grpo.rewards=gap,overlong"], "grpo.overlong_cache", "ramp"),
    (["grpo.rewards=gap,speed"], "grpo.rewards", "speed"),
    (["sample.formulation=iterative"], "stages.planner_objective", "onetime"),
])
def test_grpo_settings_are_checked(override, field, words):
    from engine.config import load_config
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match=words) as info:
        load_config(None, ["stages.planner_objective=grpo", "grpo.num_generations=3", "grpo.batch_size=3",
                           *override])
    assert field in str(info.value)


GROUNDER_GRPO = ["stages.grounder_objective=grpo", "grpo_grounder.num_generations=3", "grpo_grounder.batch_size=3",
                 "grpo_grounder.max_steps=2", "grpo_grounder.max_completion_length=16",
                 "grpo_grounder.learning_rate=1e-3", "grpo_grounder.bf16=false"]


def test_each_grounder_reward_scores_an_action_sequence(demo_tasks):
    from engine.rewards import ActionExecutionReward, ActionFormatReward, RolloutBook

    task = _train_tasks(demo_tasks, 1)[0]
    wrong = "R1 = Calculator(1+1)"
    execution = ActionExecutionReward({task.id: task})
    assert execution(prompts=["p"] * 3, completions=[task.actions_text, wrong, "not an action"],
                     task_id=[task.id] * 3) == [1.0, 0.0, 0.0]
    assert ActionFormatReward()(prompts=["p"] * 3, completions=[task.actions_text, wrong, "R1 = ("]) == [1.0, 1.0,
                                                                                                         0.0]
    # a reward that does not vary within a group gives every completion of it zero advantage
    book = RolloutBook([ActionFormatReward()], [1.0], num_generations=3)
    book.funcs[0](prompts=["p"] * 3, completions=[wrong] * 3, task_id=[task.id] * 3)
    assert [r.advantage for r in book.rollouts] == [0.0, 0.0, 0.0]


def test_an_iteration_with_the_grounder_by_grpo_stores_its_rollouts_beside_the_planners(tmp_path, tiny_agents_dir,
                                                                                        demo_tasks):
    from engine.config import load_config
    from engine.export import export_rollouts
    from engine.loop import create_run, run_loop, run_stage
    from engine.rollouts import rollout_summary
    from engine.store import Store
    from engine.tasks import write_tasks
    from tests._tiny import tiny_overrides

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(demo_tasks, tasks_file)
    config = load_config(None, [*tiny_overrides(tmp_path, tiny_agents_dir, tasks_file), *GRPO_LOOP, *GROUNDER_GRPO])
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, config)
        assert run_loop(store, run_id) == "done"
        stages = store.stage_status(run_id, 1)
        assert stages["critique"]["status"] == "skipped" and "GRPO" in stages["critique"]["counts"]["note"]
        state = stages["train_grounder"]
        assert state["status"] == "done" and state["counts"]["objective"] == "grpo"
        rollouts = store.frame("rollouts", run_id, 1)
        assert set(rollouts["role"]) == {"planner", "grounder"}  # both roles' rollouts in one iteration
        mine = rollouts[rollouts.role == "grounder"]
        assert len(mine) == 2 * 3 == state["counts"]["rollouts"]
        grounded = set(store.frame("groundings", run_id, 1)["prompt"])
        assert set(mine["prompt"]) <= grounded  # rolled out on the prompts the ground stage grounded
        tasks = {t.id: t for t in store.get_tasks(run_id)}
        for row in mine.itertuples():
            rewards = json.loads(row.rewards_json)
            assert set(rewards) == {"execution", "format"}
            assert row.reward == pytest.approx(rewards["execution"] + 0.5 * rewards["format"])
            assert row.task_id in tasks
        assert store.checkpoint(run_id, 1, "grounder")["path"] != config.grounder.path
        logs = store.frame("train_logs", run_id, 1)
        assert any("rewards/execution/mean" in line for line in logs[logs.stage == "train_grounder"]["logs_json"])
        assert rollout_summary(store, run_id, 1, role="grounder")["rollouts"] == 6
        from studio.tab_plans import grounder_rollouts  # the Plans tab shows a task's groups under its plans

        task = mine["task_id"].iloc[0]
        view = grounder_rollouts(store, run_id, 1, task)
        mine_of_task = mine[mine.task_id == task]
        assert "GRPO groups of the grounder" in view
        assert view.count("<table") == mine_of_task["prompt"].nunique()
        assert view.count("<tr>") == len(mine_of_task) + mine_of_task["prompt"].nunique()
        assert grounder_rollouts(store, run_id, 0, task) == ""
        assert rollout_summary(store, run_id, 1)["rollouts"] == 6  # the planner's, unchanged
        out = tmp_path / "rollouts.jsonl"
        assert export_rollouts(store, run_id, 1, out) == 12
        assert {json.loads(line)["role"] for line in out.read_text().splitlines()} == {"planner", "grounder"}
        # a re-run of the grounder's stage replaces its own rollouts and leaves the planner's alone
        assert run_stage(store, run_id, 1, "train_grounder") == "done"
        again = store.frame("rollouts", run_id, 1)
        assert (again.role == "grounder").sum() == 6 and (again.role == "planner").sum() == 6


@pytest.mark.parametrize("override, field, words", [
    (["grpo_grounder.batch_size=4"], "grpo_grounder.batch_size", "multiple of num_generations"),
    (["grpo_grounder.rewards=gap"], "grpo_grounder.rewards", "gap"),
    (["grpo_grounder.rewards=execution,overlong"], "grpo_grounder.overlong_cache", "ramp"),
    (["sample.formulation=iterative"], "stages.grounder_objective", "onetime"),
])
def test_grounder_grpo_settings_are_checked(override, field, words):
    from engine.config import load_config
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match=words) as info:
        load_config(None, ["stages.grounder_objective=grpo", "grpo_grounder.num_generations=3",
                           "grpo_grounder.batch_size=3", *override])
    assert field in str(info.value)


def test_a_version_5_store_keeps_its_rollouts_as_the_planners(tmp_path):
    import duckdb

    from engine import schema
    from engine.store import Store

    path = tmp_path / "v5.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.DDL_V1)
    for version in range(1, 5):
        con.execute(schema.MIGRATIONS[version])
    con.execute("INSERT INTO schema_info VALUES (5)")
    con.execute("INSERT INTO rollouts VALUES ('r', 1, 0, 0, 't', 'p', 'plan', '{}', 1.0, 0.5)")
    con.close()
    with Store(path) as store:
        assert store.version == schema.SCHEMA_VERSION == 7
        frame = store.frame("rollouts", "r")
        assert frame[["role", "text", "advantage"]].values.tolist() == [["planner", "plan", 0.5]]
        store.write("rollouts", [{"run_id": "r", "iteration": 1, "role": "grounder", "batch": 0, "n": 0,
                                  "task_id": "t", "prompt": "g", "text": "R1 = Calculator(1)", "rewards_json": "{}",
                                  "reward": 0.0, "advantage": 0.0}])
        assert store.count("rollouts", "r", 1) == 2  # the same (batch, n) for both roles


def test_the_kl_reference_is_the_model_trained_not_the_weights_its_config_names(tiny_agents_dir, demo_tasks,
                                                                                 tmp_path):
    """With ``beta > 0`` TRL loads GRPO's reference again from ``config._name_or_path``. A role given as a path and a
    LoRA adapter is loaded merged (``engine.models.load_model``), and its config still names the base: the KL term
    was measured against the base, without the adapter. Before any update the policy and its reference are one
    model, so the first step's KL is 0."""
    from peft import LoraConfig, get_peft_model

    from engine import models
    from engine.training import grpo_train

    base = str(tiny_agents_dir / "planner")
    model, tokenizer = models.load_model(models.ModelSpec(base))
    adapted = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                               task_type="CAUSAL_LM"))
    with torch.no_grad():  # a fresh adapter is the identity (B = 0): give it something to change
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.copy_(0.5 * torch.randn_like(p))
    adapted.save_pretrained(tmp_path / "adapter")
    tokenizer.save_pretrained(tmp_path / "adapter")  # an adapter directory carries its tokenizer
    model, tokenizer = models.load_model(models.ModelSpec(base, adapter=str(tmp_path / "adapter")))
    assert model.config._name_or_path == base  # what TRL loads the reference from
    planner = Agent(model, tokenizer)
    tasks = _train_tasks(demo_tasks, 2)
    settings = _grpo_settings(learning_rate=1e-12, beta=0.1, max_steps=1)
    book = RolloutBook([FormatReward()], [1.0], settings.num_generations)
    rows = [{"prompt": planner_prompt(planner, t), "task_id": t.id} for t in tasks]
    _, history = grpo_train(model, tokenizer, rows, settings, book,
                            stop_token_ids=generation.stop_token_ids(model, tokenizer))
    assert history[0]["kl"] == pytest.approx(0.0, abs=1e-7), history[0]  # before: against the base, 5e-3 here
