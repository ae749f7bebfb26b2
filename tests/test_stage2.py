"""Stage 2 as the paper runs it: the reference critic fixes the actions *for the sampled plan*, the plans that are
grounded are the ones judged, 'w/o critic' trains on the raw groundings of the same plans, the original data mix,
iterative SFT records in the iterative layout, and the config fields that moved."""

from __future__ import annotations

import json

import pytest

from engine import prompts
from engine.config import RunConfig, config_from_dict, config_to_dict, load_config
from engine.critics.base import Grounding
from engine.critics.reference import ReferenceCritic, plan_is_sound
from engine.errors import ConfigError
from engine.loop import create_run, run_stage
from engine.ranking import Candidate, select
from engine.stages.train import grounder_sft_rows, mix_original
from engine.store import Store
from engine.turns import grounding_pair


def _maths_task(demo_tasks):
    return next(t for t in demo_tasks if t.domain == "maths" and t.split == "train" and len(t.gold_subgoals) >= 3)


def _item(task, subgoals, correct=False, step=0, k=0, actions="R1 = Calculator(1 + 1)"):
    execution = {"ok": True, "values": {}, "answer": "2", "error": None}
    return Grounding(task, step, k, subgoals, actions, execution, correct)


def test_reference_critic_keeps_a_sound_plan_and_fixes_only_the_actions(demo_tasks):
    task = _maths_task(demo_tasks)
    critic = ReferenceCritic()
    for style in ("concrete", "explicit", "vague"):
        plan = [r[("concrete", "explicit", "vague").index(style)] for r in task.meta["step_renderings"]]
        (verdict,) = critic.judge([_item(task, plan)])
        assert verdict.status == "corrected" and verdict.corrected_subgoals is None, style
        assert verdict.corrected_actions == task.actions_text
    (accepted,) = critic.judge([_item(task, task.meta["vague_subgoals"], correct=True)])
    assert accepted.status == "accepted" and accepted.corrected_actions is None


def test_reference_critic_corrects_the_subgoals_of_a_wrong_plan(demo_tasks):
    task = _maths_task(demo_tasks)
    swapped = [task.gold_subgoals[1], task.gold_subgoals[0], *task.gold_subgoals[2:]]
    dropped = task.gold_subgoals[:-1]
    for plan in (swapped, dropped, []):
        (verdict,) = ReferenceCritic().judge([_item(task, plan)])
        assert verdict.status == "corrected" and verdict.corrected_subgoals == task.gold_subgoals, plan
        assert verdict.corrected_actions == task.actions_text
    assert not plan_is_sound(task, 0, swapped) and plan_is_sound(task, 0, task.meta["explicit_subgoals"])
    # A task without renderings (a benchmark record): only the step count can be checked.
    bare = type(task)(**{**task.__dict__, "meta": {}})
    assert plan_is_sound(bare, 0, [f"step {i}." for i in range(len(task.gold_subgoals))])
    assert not plan_is_sound(bare, 0, ["only one."])
    # Iterative: the sampled subgoal of step 2 must be one of step 2's renderings.
    assert plan_is_sound(task, 2, [task.meta["vague_subgoals"][1]])
    (verdict,) = ReferenceCritic().judge([_item(task, [task.gold_subgoals[0]], step=2)])
    assert verdict.corrected_subgoals == [task.gold_subgoals[1]] and verdict.corrected_actions == task.gold_actions[1]


def test_a_critic_with_an_error_rate_errs_on_that_share_deterministically(demo_tasks):
    tasks = [t for t in demo_tasks if t.domain == "maths"]
    items = [_item(t, t.gold_subgoals, correct=i % 2 == 0, k=i % 3) for i, t in enumerate(tasks)]
    honest = ReferenceCritic().judge(items)
    noisy = ReferenceCritic(error_rate=0.3, seed=5).judge(items)
    assert noisy == ReferenceCritic(error_rate=0.3, seed=5).judge(items)
    wrong = [n for h, n in zip(honest, noisy) if n.extra.get("injected_error")]
    assert 0.15 < len(wrong) / len(items) < 0.45
    for item, h, n in zip(items, honest, noisy):
        if not n.extra.get("injected_error"):
            assert n == h
        elif item.correct:  # a right grounding "corrected" into wrong actions
            assert n.status == "corrected" and n.corrected_actions != item.task.actions_text
        else:  # a wrong grounding accepted
            assert n.status == "accepted"
    always = ReferenceCritic(error_rate=1.0).judge(items)
    assert all(v.extra.get("injected_error") for v in always)


def test_plan_selection_best_top_n_best_worst_all():
    plans = [Candidate(0, "a", 0.5), Candidate(1, "b", 0.2), Candidate(2, "a", 0.5), Candidate(3, "c", 0.9),
             Candidate(4, "d", 0.3)]
    assert [c.k for c in select(plans, "best")] == [1]
    assert [c.k for c in select(plans, "top_n", 3)] == [1, 4, 0]  # "a" twice: grounded once, under k=0
    assert [c.k for c in select(plans, "all")] == [1, 4, 0, 3]
    assert [c.k for c in select(plans, "best_worst")] == [1, 3]  # the lowest and the highest log-PPL
    assert [c.k for c in select(plans[:1], "best_worst")] == [0]  # one distinct plan: grounded once
    assert [c.k for c in select([plans[0], plans[2]], "best_worst")] == [0]
    with pytest.raises(ValueError, match="unknown plan selection"):
        select(plans, "some")


def test_original_data_mix():
    new, original = [("n", i) for i in range(4)], [("o", i) for i in range(10)]
    assert mix_original(new, original, -1, 0) == new + original  # -1: all the original data (paper)
    half = mix_original(new, original, 0.5, 0)
    assert half[:4] == new and len(half) == 6 and set(half[4:]) <= set(original)
    assert len(mix_original(new, original, 5.0, 0)) == 14  # capped at all of it
    assert mix_original(new, original, 0.0, 0) == new
    with pytest.raises(ConfigError, match="sft.original_ratio: must be -1"):
        load_config(None, ["sft.original_ratio=-0.5"])


def test_iterative_sft_records_use_the_iterative_layout(demo_tasks, tiny_agents):
    _, grounder = tiny_agents
    task = _maths_task(demo_tasks)
    from engine.outcome import gold_step_results

    results = gold_step_results(task)
    plan = [task.meta["vague_subgoals"][1]]
    (row,) = grounder_sft_rows(grounder, [(task, 2, plan, task.gold_actions[1])])
    prompt, target = grounding_pair(grounder, task, 2, plan, results)
    assert row["prompt"] == prompt and row["completion"] == target
    assert prompts.ITERATIVE_SUBGOAL + "Subgoal 2: " + plan[0] in row["prompt"]
    assert task.gold_actions[0] in row["prompt"]  # the gold history precedes the sampled subgoal
    (onetime,) = grounder_sft_rows(grounder, [(task, 0, task.gold_subgoals, task.actions_text)])
    assert prompts.ONETIME_SUBGOALS in onetime["prompt"] and onetime["completion"] == task.actions_text


def test_legacy_fields_move_to_their_new_homes():
    old = config_to_dict(RunConfig())
    old["critic"]["which"] = "best"
    old["ground"]["which"] = "all"
    old["stages"]["critic"] = False
    del old["stages"]["grounder_data"]
    config = config_from_dict(old)
    assert config.ground.which == "best" and config.stages.grounder_data == "executed"
    config = config_from_dict({"critic": {"which": "all"}, "stages": {"critic": "true"}})
    assert config.ground.which == "all" and config.stages.grounder_data == "critic"
    assert not hasattr(config.critic, "which")


def test_precision_follows_the_hardware(monkeypatch):
    import torch

    from engine import precision

    cpu = torch.device("cpu")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert not precision.use_bf16("auto", cpu) and precision.use_bf16("true", cpu)
    assert precision.describe("auto", cpu) == "fp32 (auto: no native bf16 on this cpu)"
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert precision.use_bf16("auto", cpu) and not precision.use_bf16("false", cpu)
    assert precision.describe("auto", cpu) == "bf16 (auto: native bf16 on this cpu)"
    assert precision.describe("false", cpu) == "fp32 (bf16 = false)"


@pytest.mark.slow
def test_stage2_grounds_what_is_judged_and_trains_on_the_sampled_plans(tmp_path, loop_config):
    loop_config.ground.which = "top_n"
    loop_config.ground.top_n = 2
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        for stage in ("sample", "score", "ground", "critique"):
            assert run_stage(store, run_id, 1, stage) == "done", stage
        plans = store.frame("plans", run_id, 1)
        distinct = plans.assign(t=plans.text.str.strip()).groupby("task_id").t.nunique()
        groundings = store.frame("groundings", run_id, 1)
        assert groundings.groupby("task_id").size().to_dict() == distinct.clip(upper=2).to_dict()
        verdicts = store.frame("verdicts", run_id, 1)
        assert len(verdicts) == len(groundings)
        # Every training record keeps the sampled plan unless the critic had to correct the plan itself.
        from engine.verdict_curation import effective_sft_records

        subgoals = {(r.task_id, r.k): json.loads(r.subgoals_json) for r in plans.itertuples()}
        for record, verdict in zip(effective_sft_records(store, run_id, 1), verdicts.itertuples()):
            if verdict.corrected_subgoals_json is None:
                assert record["subgoals"] == subgoals[(record["task_id"], record["k"])]
            else:
                assert record["subgoals"] == json.loads(verdict.corrected_subgoals_json)


@pytest.mark.slow
def test_without_a_critic_the_grounder_trains_on_its_raw_groundings_of_the_same_plans(tmp_path, loop_config):
    counts = {}
    for mode in ("critic", "raw", "executed"):
        loop_config.stages.grounder_data = mode
        with Store(tmp_path / f"{mode}.duckdb") as store:
            run_id = create_run(store, loop_config)
            for stage in ("sample", "score", "ground", "critique", "train_grounder"):
                run_stage(store, run_id, 1, stage)
            state = store.stage_status(run_id, 1)
            assert state["critique"]["status"] == ("done" if mode == "critic" else "skipped")
            counts[mode] = state["train_grounder"]["counts"]
            n_correct = int(store.frame("groundings", run_id, 1).correct.sum())
            n_groundings = store.count("groundings", run_id, 1)
    assert counts["raw"]["new_rows"] == counts["critic"]["new_rows"] == n_groundings
    assert counts["executed"].get("new_rows", 0) == n_correct
    assert counts["critic"]["precision"].startswith(("fp32", "bf16"))


@pytest.mark.slow
def test_stage2_sft_in_micro_batches_takes_the_same_steps(tmp_path, loop_config, monkeypatch):
    """``sft.micro_batches``: stage 2's SFT cuts each batch into micro-batches of similar length (less padding on a
    CPU) and takes the step the uncut batch takes: the same logged losses and the same grounder, up to float
    rounding. A count that does not divide the batch is refused by name before anything runs."""
    import torch

    from engine import training
    from engine.models import ModelSpec, load_model

    cut = []  # what the trainer was asked to cut each batch into (through to transformers' sampler)
    real = training.micro_batch_args
    monkeypatch.setattr(training, "micro_batch_args", lambda settings, n: cut.append(n) or real(settings, n))
    losses, weights = {}, {}
    for n in (1, 2):
        loop_config.sft.micro_batches = n
        with Store(tmp_path / f"micro{n}.duckdb") as store:
            run_id = create_run(store, loop_config)
            for stage in ("sample", "score", "ground", "critique", "train_grounder"):
                assert run_stage(store, run_id, 1, stage) == "done", stage
            logs = store.frame("train_logs", run_id, 1)
            losses[n] = list(logs[logs.stage == "train_grounder"].loss.dropna())
            model, _ = load_model(ModelSpec(store.checkpoint(run_id, 1, "grounder")["path"], dtype="float32"))
            weights[n] = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert cut == [1, 2] and real(loop_config.sft, 2)["gradient_accumulation_steps"] == 2
    assert losses[1] and losses[2] == pytest.approx(losses[1], rel=1e-3)
    assert torch.allclose(weights[1], weights[2], atol=1e-4)
    loop_config.sft.micro_batches = 3  # batch_size 2
    with pytest.raises(ConfigError, match="sft.micro_batches"):
        config_from_dict(config_to_dict(loop_config))
