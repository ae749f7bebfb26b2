"""The committed demo agents (assets/demo): offline loading, size, well-formed output, the built-in capability gap,
and the eval CLI on a few tasks. The assets are committed: when one is absent every test here fails, naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import generation, models
from engine.tasks import load_tasks
from engine.turns import Agent, planner_prompt, read_plan

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "assets" / "demo"
ASSETS = (*(DEMO / role / name for role in ("planner", "grounder")
             for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")),
          DEMO / "build.json", ROOT / "examples" / "demo" / "tasks.jsonl")


@pytest.fixture(scope="module", autouse=True)
def _assets_present():
    # A fail, not a skip: a checkout without the committed agents (say, a partial clone) must not pass while testing
    # less. Module scope, so it runs before the module-scoped loaders would trip over the gap with a vaguer error.
    missing = [str(path.relative_to(ROOT)) for path in ASSETS if not path.is_file()]
    if missing:
        pytest.fail(f"committed demo assets missing: {', '.join(missing)}", pytrace=False)


@pytest.fixture(scope="module")
def demo_agents():
    loaded = []
    for role in ("planner", "grounder"):
        model, tokenizer = models.load_model(models.ModelSpec(str(DEMO / role), device="cpu"))
        loaded.append(Agent(model, tokenizer))
    return tuple(loaded)


@pytest.fixture(scope="module")
def suite():
    return list(load_tasks(ROOT / "examples" / "demo" / "tasks.jsonl"))


def test_committed_agents_are_small_and_load_offline(monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    size = sum(p.stat().st_size for p in DEMO.rglob("*") if p.is_file())
    assert size <= 20 * 2**20, f"assets/demo is {size / 2**20:.1f} MB"
    for role in ("planner", "grounder"):
        AutoModelForCausalLM.from_pretrained(DEMO / role)
        AutoTokenizer.from_pretrained(DEMO / role)
    build = json.loads((DEMO / "build.json").read_text())
    assert build["planner"]["parameters"] > 1_000_000


def test_planner_writes_well_formed_plans(demo_agents, suite):
    planner, _ = demo_agents
    tasks = [t for t in suite if t.split == "held_in"][:12]
    plans = generation.generate(planner.model, planner.tokenizer, [planner_prompt(planner, t) for t in tasks],
                                generation.GenerationConfig(max_new_tokens=96, temperature=0.0, batch_size=12))
    well_formed = [read_plan(p[0])[1] for p in plans]
    assert sum(well_formed) >= 11, plans


def test_concrete_plans_beat_vague_plans_on_a_fixed_sample(demo_agents, suite):
    """The capability gap by construction: the grounder fits concrete plans far better than vague ones."""
    from engine.demo.gap import plan_style_gap

    _, grounder = demo_agents
    sample = [t for t in suite if t.split == "held_in" and t.domain == "maths"][:24]
    gap = plan_style_gap(grounder, sample, batch_size=24)
    assert gap["logppl_gap"] > 0.2, gap
    assert gap["accuracy_gap"] > 0.3, gap


def test_the_planner_words_share_steps_its_own_way_and_the_grounder_has_not_learned_it(demo_agents, suite):
    """The gap stage 2 has to close: sampled plans of share tasks use the planner's paraphrase ("Split the ...") and
    never the grounder's wording ("Divide the ..."), and the starting grounder, given that paraphrase in otherwise
    gold plans, solves far fewer of those tasks than given the gold plans."""
    from engine.demo.gap import plan_style_gap

    planner, grounder = demo_agents
    tasks = [t for t in suite if t.split == "held_in" and t.meta["template"].endswith("share")][:16]
    plans = generation.generate(planner.model, planner.tokenizer, [planner_prompt(planner, t) for t in tasks],
                                generation.GenerationConfig(max_new_tokens=96, temperature=1.0, top_p=0.95,
                                                            num_return_sequences=4, batch_size=16), seed=0)
    texts = [text for group in plans for text in group]
    assert not [t for t in texts if "Divide the" in t], texts
    assert sum("Split the" in t for t in texts) >= 8, texts
    gap = plan_style_gap(grounder, tasks, batch_size=16)
    assert gap["concrete_accuracy"] - gap["paraphrased_accuracy"] >= 0.4, gap


def test_every_split_and_domain_is_solvable_by_the_warm_start_grounder_given_gold_plans(demo_agents, suite):
    """A fair world: on every split and domain the demo reports, the starting grounder executes gold plans to the
    right answer clearly more often than never (held-out tasks are unseen, not impossible)."""
    from engine.demo.gap import plan_style_gap

    _, grounder = demo_agents
    for split in ("dev", "held_in", "held_out"):
        for domain in ("maths", "qa"):
            sample = [t for t in suite if t.split == split and t.domain == domain][:20]
            gap = plan_style_gap(grounder, sample, batch_size=20)
            assert gap["concrete_accuracy"] >= 0.25, (split, domain, gap)


def test_eval_cli_runs_on_both_splits(capsys):
    from engine.__main__ import main

    assert main(["eval", "--config", str(ROOT / "examples" / "demo.toml"), "--limit", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"] == {"held_in": 4, "held_out": 4}
    assert {"held_in", "held_out"} <= set(out["metrics"])
    assert "gap_logppl" in out["metrics"]["held_in"]["all"]


def test_a_joint_agent_starts_from_an_agent_and_learns_both_roles_rows(tmp_path, tiny_agents_dir, demo_tasks):
    """``demo-models --joint-from``: one model for the shared topology without LoRA, trained further from an agent
    on both roles' warm-start rows, keeping that agent's tokenizer (tiny agents, two steps)."""
    from engine.demo.agents import AgentBuildConfig, build_joint_agent, grounder_rows, planner_rows

    start = tiny_agents_dir / "grounder"
    config = AgentBuildConfig(joint_steps=2, batch_size=4, max_train_tasks=8)
    report = build_joint_agent(demo_tasks, tmp_path / "joint", start, config, log=lambda *_: None)
    train = [t for t in demo_tasks if t.split == "train"]
    import random

    sample = random.Random(0).sample(train, min(8, len(train)))
    assert report["rows"] == len(planner_rows(sample, 0)) + len(grounder_rows(sample)) > 0
    assert report["steps"] == 2 and report["start"] == str(start)
    joint, tokenizer = models.load_model(models.ModelSpec(str(tmp_path / "joint")))
    before, start_tokenizer = models.load_model(models.ModelSpec(str(start)))
    assert tokenizer.get_vocab() == start_tokenizer.get_vocab()
    changed = [n for n, p in joint.named_parameters() if not (p == dict(before.named_parameters())[n]).all()]
    assert changed  # it trained
    assert json.loads((tmp_path / "joint" / "build.json").read_text())["steps"] == 2


def test_one_agent_is_rebuilt_against_its_partners_tokenizer(tmp_path, tiny_agents_dir, demo_tasks):
    """``demo-models --roles planner --tokenizer-from DIR --planner-styles ...``: only the planner is trained, with
    the given tokenizer (the partner's token ids), on the given style mix; one agent without a tokenizer to share is
    refused before anything is written."""
    from engine.demo.agents import AgentBuildConfig, build_demo_agents

    config = AgentBuildConfig(hidden_size=32, layers=2, heads=2, intermediate_size=64, planner_steps=2,
                              batch_size=4, max_train_tasks=8, roles="planner",
                              tokenizer_from=str(tiny_agents_dir / "grounder"),
                              planner_styles="explicit=0.6,vague=0.4", bf16="false")
    report = build_demo_agents(demo_tasks, tmp_path / "out", config, log=lambda *_: None)
    assert report["precision"] == "fp32 (bf16 = false)"  # forced fp32, whatever this CPU computes natively
    assert (tmp_path / "out" / "planner" / "model.safetensors").is_file()
    assert not (tmp_path / "out" / "grounder").exists() and "grounder" not in report
    _, tokenizer = models.load_model(models.ModelSpec(str(tmp_path / "out" / "planner")))
    _, partner = models.load_model(models.ModelSpec(str(tiny_agents_dir / "grounder")))
    assert tokenizer.get_vocab() == partner.get_vocab()
    assert json.loads((tmp_path / "out" / "build.json").read_text())["config"]["planner_styles"] == \
        "explicit=0.6,vague=0.4"
    # Rebuilt in place beside its partner, the partner's record stays in build.json, marked as kept.
    import shutil

    shutil.copytree(tiny_agents_dir, tmp_path / "pair")
    build_demo_agents(demo_tasks, tmp_path / "pair", config, log=lambda *_: None)
    both = json.loads((tmp_path / "pair" / "build.json").read_text())
    before = json.loads((tiny_agents_dir / "build.json").read_text())
    assert both["grounder"] == {**before["grounder"], "kept": True, "config": before["config"]}
    assert both["planner"]["config"]["planner_styles"] == "explicit=0.6,vague=0.4"
    with pytest.raises(ValueError, match="tokenizer_from"):
        build_demo_agents(demo_tasks, tmp_path / "refused", AgentBuildConfig(roles="planner"), log=lambda *_: None)
    with pytest.raises(ValueError, match="roles"):
        build_demo_agents(demo_tasks, tmp_path / "refused", AgentBuildConfig(roles="critic"), log=lambda *_: None)
    with pytest.raises(ValueError, match="bf16 'maybe'"):
        build_demo_agents(demo_tasks, tmp_path / "refused", AgentBuildConfig(bf16="maybe"), log=lambda *_: None)
    assert not (tmp_path / "refused").exists()


def test_demo_models_refuses_a_bad_style_mix_before_writing(tmp_path):
    from engine.__main__ import main

    with pytest.raises(SystemExit, match="--planner-styles: plan style 'concise'"):
        main(["demo-models", "--out", str(tmp_path / "out"), "--planner-styles", "concise=1"])
    with pytest.raises(SystemExit):  # argparse: invalid choice, exit 2
        main(["demo-models", "--out", str(tmp_path / "out"), "--bf16", "maybe"])
    with pytest.raises(SystemExit, match="micro_batches 5: expected a divisor of batch_size 32"):
        main(["demo-models", "--out", str(tmp_path / "out"), "--micro-batches", "5"])
    with pytest.raises(SystemExit, match="set micro_batches to 1 to group by length"):
        main(["demo-models", "--out", str(tmp_path / "out"), "--group-by-length"])
    assert not (tmp_path / "out").exists()


def test_the_tokenizer_does_not_depend_on_the_style_mix_and_a_one_role_build_equals_a_full_one(tmp_path, demo_tasks):
    """The tokenizer's planner rows use the first planner's mix whatever ``planner_styles`` says, so agents of two
    mixes share token ids, and the planner rebuilt alone against a full build's grounder is that build's planner, bit
    for bit (how the committed planner was built beside the committed grounder)."""
    from safetensors.torch import load_file

    from engine.demo.agents import AgentBuildConfig, build_demo_agents

    tiny = dict(hidden_size=32, layers=2, heads=2, intermediate_size=64, planner_steps=2, grounder_steps=2,
                batch_size=4, max_train_tasks=8, bf16="false")
    build_demo_agents(demo_tasks, tmp_path / "full", AgentBuildConfig(**tiny), log=lambda *_: None)
    build_demo_agents(demo_tasks, tmp_path / "other", AgentBuildConfig(**tiny, planner_styles="explicit=1"),
                      log=lambda *_: None)
    _, full = models.load_model(models.ModelSpec(str(tmp_path / "full" / "grounder")))
    _, other = models.load_model(models.ModelSpec(str(tmp_path / "other" / "grounder")))
    assert full.get_vocab() == other.get_vocab()
    build_demo_agents(demo_tasks, tmp_path / "alone",
                      AgentBuildConfig(**tiny, roles="planner", tokenizer_from=str(tmp_path / "full" / "grounder")),
                      log=lambda *_: None)
    weights = [load_file(tmp_path / d / "planner" / "model.safetensors") for d in ("full", "alone")]
    assert weights[0].keys() == weights[1].keys()
    assert all((weights[0][k] == weights[1][k]).all() for k in weights[0])
    other_planner = load_file(tmp_path / "other" / "planner" / "model.safetensors")
    assert any((weights[0][k] != other_planner[k]).any() for k in weights[0])  # the mix does change the planner
