"""Findings of an audit of GRPO, the shared topology and curricula (README "Beyond MOAT"), each pinned here: a
shared-topology phase may not switch the run's LoRA layout (the run failed a phase later); ``grpo.max_length`` and
``grpo_grounder.max_length``, which TRL's GRPO has no use for, are refused rather than ignored; vLLM sampling or
grounding of a role trained by GRPO into adapter checkpoints is refused like DPO's and SFT's; ``critiques`` (whether
a run needs its critic) agrees with the loop's skip rules; and ``export --what sft`` on an iteration whose grounder
learned by GRPO is refused, pointing at its rollouts. No models are loaded: configs only, and a hand-made store."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from engine.config import config_from_dict, load_config
from engine.config_training import GrounderGRPOSettings, GRPOSettings
from engine.errors import ConfigError
from engine.schedule import critique_skip_reason, critiques
from engine.store import Store

SHARED = ["agents.topology=shared", "planner.path=assets/demo/grounder", "grounder.path=assets/demo/grounder"]
LORA = ["dpo.lora=true", "sft.lora=true"]
GRPO_BOTH = ["stages.planner_objective=grpo", "stages.grounder_objective=grpo"]


def _phases(*phase_sets: list[str]) -> str:
    """One one-iteration phase per argument, named ``p1``, ``p2``, ..., each setting what it is given."""
    phases = [{"name": f"p{i}", "iterations": 1, **({"set": s} if s else {})} for i, s in enumerate(phase_sets, 1)]
    return "schedule.phases=" + json.dumps(phases)


def _refusal(overrides: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)
    return caught.value


# -- 1. shared topology: a phase keeps the run's LoRA layout ----------------------------------------------------------

@pytest.mark.parametrize("run, phase_set, field", [
    ([], LORA, "dpo.lora"),  # the audit's repro: full weights, then adapters on them
    (LORA, ["dpo.lora=false", "sft.lora=false"], "dpo.lora"),  # adapters, then full weights
    (["stages.planner_objective=grpo", "stages.grounder_objective=grpo"],
     ["grpo.lora=true", "grpo_grounder.lora=true"], "grpo.lora"),
    ([], ["dpo.save_adapter=false"], "dpo.save_adapter"),  # harmless without LoRA, but a LoRA field all the same
])
def test_a_shared_phase_cannot_switch_lora(run, phase_set, field):
    error = _refusal(SHARED + run + [_phases([], phase_set)])
    assert error.field == "schedule.phases[2].set"
    assert error.message.startswith(f"{field}: agents.topology = shared: phase 'p2' sets it to ")
    assert "every phase must keep the run's LoRA settings" in error.message


def test_a_shared_phase_cannot_switch_lora_by_switching_objective():
    """No LoRA field set: the phase trains both roles by GRPO, whose sections have LoRA where the run's have none."""
    error = _refusal(SHARED + ["grpo.lora=true", "grpo_grounder.lora=true", _phases([], GRPO_BOTH)])
    assert error.field == "schedule.phases[2].set"
    assert error.message.startswith("stages.planner_objective: agents.topology = shared: phase 'p2' sets it to grpo, "
                                    "whose grpo.lora is True where the run's dpo.lora is False")


def test_a_shared_phase_that_keeps_the_layout_is_accepted():
    load_config(None, SHARED + LORA + [_phases([], ["sft.epochs=2", "dpo.lora_r=8"])])
    load_config(None, SHARED + [_phases([], GRPO_BOTH)])  # full weights in every phase, by DPO/SFT then by GRPO
    load_config(None, [_phases([], LORA)])  # separate models: each checkpoint names its own base, a switch is fine


# -- 2. GRPO has no max_length ----------------------------------------------------------------------------------------

def test_trl_grpo_has_no_total_or_prompt_length():
    """What the refusal below and the field's help rest on: TRL's GRPOConfig bounds completions only."""
    from trl import GRPOConfig

    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert "max_completion_length" in names
    assert not names & {"max_length", "max_prompt_length"}


@pytest.mark.parametrize("section", ["grpo", "grpo_grounder"])
def test_grpo_max_length_is_refused_and_says_it_has_no_effect(section):
    error = _refusal([f"{section}.max_length=1024"])
    assert error.field == f"{section}.max_length"
    assert error.message == (f"has no effect for GRPO (got 1024): TRL bounds each rollout by "
                             f"{section}.max_completion_length and does not truncate prompts; leave it at 512")
    load_config(None, [f"{section}.max_length=512"])  # the default, which a saved config writes out, loads


def test_a_phase_setting_grpo_max_length_is_refused_too():
    error = _refusal([_phases([], ["grpo.max_length=256"])])
    assert error.field == "schedule.phases[2].set" and error.message.startswith("grpo.max_length: has no effect")


@pytest.mark.parametrize("settings", [GRPOSettings, GrounderGRPOSettings])
def test_grpo_max_length_help_says_it_is_unused(settings):
    help_text = next(f for f in dataclasses.fields(settings) if f.name == "max_length").metadata["help"]
    assert help_text.startswith("not used by GRPO") and "max_completion_length" in help_text
    assert "prompts are not truncated" in help_text


def test_grpo_beta_help_names_no_single_role():
    help_text = next(f for f in dataclasses.fields(GrounderGRPOSettings) if f.name == "beta").metadata["help"]
    assert "starting planner" not in help_text and "[grpo_grounder]" in help_text


# -- 3. vLLM loads full weights: the section that trains the role decides -------------------------------------------

@pytest.mark.parametrize("overrides, field", [
    (["sample.backend=vllm", "stages.planner_objective=grpo", "grpo.lora=true"], "grpo.save_adapter"),
    (["ground.backend=vllm", "stages.grounder_objective=grpo", "grpo_grounder.lora=true"],
     "grpo_grounder.save_adapter"),
    (["sample.backend=vllm", "dpo.lora=true"], "dpo.save_adapter"),  # as before
])
def test_vllm_refuses_adapter_checkpoints_of_the_training_section(overrides, field):
    error = _refusal(overrides)
    assert error.field == field and "checkpoints must be full weights" in error.message


def test_vllm_ignores_the_lora_of_a_section_that_does_not_train():
    load_config(None, ["ground.backend=vllm", "stages.grounder_objective=grpo", "sft.lora=true"])
    load_config(None, ["sample.backend=vllm", "stages.planner_objective=grpo", "grpo.lora=true",
                       "grpo.save_adapter=false"])


# -- 4. critiques(): whether any iteration critiques, by the loop's own rules ---------------------------------------

@pytest.mark.parametrize("overrides, expected", [
    ([], True),
    (["stages.grounder_objective=grpo"], False),
    (["stages.grounder_data=raw"], False),
    (["stages.grounder_data=executed"], False),
    (["stages.stage2=false"], False),
    ([_phases(["stages.grounder_objective=grpo"], [])], True),  # the second phase critiques
    ([_phases(["stages.grounder_objective=grpo"], ["stages.grounder_data=raw"])], False),
    ([_phases(["stages.grounder_data=executed"]), "run.iterations=3"], False),  # the last phase repeats
])
def test_critiques_agrees_with_the_loop(overrides, expected):
    from engine.loop import is_skipped
    from engine.schedule import iteration_config

    config = load_config(None, overrides)
    assert critiques(config) is expected
    loop_says = [is_skipped("critique", iteration_config(config, t), t) is None
                 for t in range(1, config.run.iterations + 1)]
    assert any(loop_says) is expected
    for t in range(1, config.run.iterations + 1):  # the same reasons, word for word, where the phase runs critique
        if (reason := critique_skip_reason(iteration_config(config, t))) is not None:
            assert is_skipped("critique", iteration_config(config, t), t) == reason


def test_a_run_without_critique_does_not_probe_the_critic_server(monkeypatch):
    """The audit's symptom: a caution about an unreachable critic that no stage of the run would ask."""
    import engine.critics.openai_backend as openai_backend
    from engine.preflight import preflight

    probed: list[str] = []
    monkeypatch.setattr(openai_backend, "probe_caution", lambda critic: probed.append(critic.base_url) or None)
    critic = ["critic.backend=openai", "critic.base_url=http://127.0.0.1:9/v1", "critic.model=m"]
    preflight(load_config(None, critic + ["stages.grounder_objective=grpo"]), probe_critic=True)
    assert probed == []
    preflight(load_config(None, critic), probe_critic=True)
    assert probed == ["http://127.0.0.1:9/v1"]


# -- 5. export --what sft of a GRPO grounder's iteration -------------------------------------------------------------

GROUNDER_GRPO = "grounder-grpo-run"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A run whose iteration 1 grounded a plan (a groundings row: the ground stage runs under GRPO too), skipped its
    critique and trained the grounder by GRPO."""
    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        store.write("runs", [{"run_id": GROUNDER_GRPO, "name": GROUNDER_GRPO, "run_dir": str(tmp_path / "runs"),
                              "config_json": {"stages": {"grounder_objective": "grpo"}}}])
        store.write("groundings", [{"run_id": GROUNDER_GRPO, "iteration": 1, "task_id": "m1", "step": 0, "k": 0,
                                    "prompt": "p", "actions": "R1 = Calculator(3*4)", "values_json": {},
                                    "answer": None, "error": None, "ok": True, "correct": False}])
        store.set_stage(GROUNDER_GRPO, 0, "evaluate", "done")
        for stage, status in (("ground", "done"), ("critique", "skipped"), ("train_grounder", "done")):
            store.set_stage(GROUNDER_GRPO, 1, stage, status)
    return path


def test_export_sft_of_a_grpo_grounder_iteration_is_refused(db, tmp_path, capsys):
    from engine.__main__ import main

    out = tmp_path / "out" / "sft.jsonl"
    out.parent.mkdir()
    code = main(["export", "--db", str(db), "--run", GROUNDER_GRPO, "--iteration", "1", "--what", "sft",
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2, captured.err  # was 0, an empty file and a note blaming the stage's filter
    assert captured.err == ("error: --iteration 1 --what sft: iteration 1 trained its grounder by GRPO "
                            "(stages.grounder_objective), so it has no SFT records: its grounder's training data are "
                            "its GRPO rollouts (try --what rollouts); nothing written\n")
    assert list(out.parent.iterdir()) == []


def test_the_studio_is_told_the_same_without_a_cli_flag(db):
    from engine.export_empty import empty_reason

    with Store(db) as store:
        reason = empty_reason(store, GROUNDER_GRPO, 1, "sft", studio=True)
    assert reason is not None and reason.endswith("its grounder's training data are its GRPO rollouts")


def test_a_run_stored_with_a_grpo_max_length_still_loads():
    """The field never had an effect and is refused in new configs; a run created before keeps loading (status,
    export, resume, the studio), reading as it computed."""
    from engine.config import config_to_dict
    from engine.stored_config import stored_config

    data = config_to_dict(load_config(None, []))
    data["grpo"]["max_length"], data["grpo_grounder"]["max_length"] = 256, 2048
    config = stored_config(data)
    assert config.grpo.max_length == config.grpo_grounder.max_length == 512
    with pytest.raises(ConfigError, match=r"grpo\.max_length: has no effect for GRPO"):
        config_from_dict(data)
