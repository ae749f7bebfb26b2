"""Shared pytest fixtures. Other engineers add their fixtures here; keep each one small and documented."""

from __future__ import annotations

from pathlib import Path

import pytest

# Real-data samples carried with the tests (provenance and the records kept: tests/data/SOURCES.md). They live
# inside tests/ so a fresh clone anywhere tests exactly as much as this one does.
SAMPLES_DIR = Path(__file__).parent / "data" / "samples"
SAMPLE_FILES = (
    "gsm8k_test.jsonl",
    "gsm8k_train.jsonl",
    "svamp.jsonl",
    "hotpotqa_dev_simplified.jsonl",
    "strategyqa_lumos_eval.jsonl",
    "strategyqa_train_full.jsonl",
    "strategyqa_bigbench.jsonl",
    "lumos_incontext_exemplars.jsonl",
    *(f"lumos_derived_{dataset}_{role}_{formulation}.jsonl"
      for dataset in ("maths", "complex_qa", "web_agent")
      for role in ("plan", "ground")
      for formulation in ("iterative", "onetime")),
)


@pytest.fixture
def samples_dir() -> Path:
    """The carried real-data samples (``tests/data/samples``). Fails, naming every missing file, when one is absent:
    a skip here would let an incomplete checkout pass while testing less."""
    missing = [name for name in SAMPLE_FILES if not (SAMPLES_DIR / name).is_file()]
    if missing:
        pytest.fail(f"test data missing from {SAMPLES_DIR}: {', '.join(missing)} (see tests/data/SOURCES.md)",
                    pytrace=False)
    return SAMPLES_DIR


@pytest.fixture(scope="session")
def demo_tasks():
    """The demo world at a small size (seeded, generated in memory)."""
    from engine.demo.world import WorldConfig, generate_suite

    return generate_suite(WorldConfig.small())


@pytest.fixture(scope="session")
def tiny_agents_dir(tmp_path_factory, demo_tasks):
    """A reduced demo-agent build (tiny Llama planner + grounder, a few SFT steps) on disk, built once."""
    from engine.demo.agents import AgentBuildConfig, build_demo_agents

    out = tmp_path_factory.mktemp("tiny_agents")
    config = AgentBuildConfig(hidden_size=32, layers=2, heads=2, intermediate_size=64, planner_steps=3,
                              grounder_steps=3, batch_size=8, max_train_tasks=24)
    build_demo_agents(demo_tasks, out, config, log=lambda *_: None)
    return out


@pytest.fixture
def tiny_agents(tiny_agents_dir):
    """Fresh in-memory copies of the tiny planner and grounder (tests may train them)."""
    from engine import models
    from engine.turns import Agent

    agents = []
    for role in ("planner", "grounder"):
        model, tokenizer = models.load_model(models.ModelSpec(str(tiny_agents_dir / role)))
        agents.append(Agent(model, tokenizer))
    return tuple(agents)


@pytest.fixture
def loop_config(tmp_path, tiny_agents_dir, demo_tasks):
    """A one-iteration loop on the tiny agents and the small demo world: every stage runs in seconds."""
    from engine.config import load_config
    from engine.tasks import write_tasks
    from tests._tiny import tiny_overrides

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(demo_tasks, tasks_file)
    overrides = tiny_overrides(tmp_path, tiny_agents_dir, tasks_file)
    return load_config(None, overrides)


@pytest.fixture
def tiny_run(tmp_path, tiny_agents_dir, demo_tasks):
    """A factory for a run on the tiny agents and the small demo world (3 training tasks, 2 eval tasks, K=2, short
    samples), shared by tests that drive stages one by one (test_critic_openai.py, test_step_order.py).
    ``tiny_run(*overrides, stages=())`` writes the tasks to ``tmp_path/tasks.jsonl``, creates the run in
    ``tmp_path/s.duckdb`` with ``overrides`` added to the common ``--set`` ones, runs ``stages`` of iteration 1 in
    order (each must end "done") and returns ``(db, run_id)``."""
    from engine.config import load_config
    from engine.loop import create_run, run_stage
    from engine.store import Store
    from engine.tasks import write_tasks

    def make(*overrides: str, stages: tuple[str, ...] = ()) -> tuple[Path, str]:
        tasks_file = tmp_path / "tasks.jsonl"
        write_tasks(demo_tasks, tasks_file)
        config = load_config(None, [
            f"data.tasks={tasks_file}", "data.train_limit=3", "data.eval_limit=2", f"run.workdir={tmp_path / 'runs'}",
            f"planner.path={tiny_agents_dir / 'planner'}", f"grounder.path={tiny_agents_dir / 'grounder'}",
            "sample.k=2", "sample.max_new_tokens=16", "sample.batch_size=4", *overrides,
        ])
        db = tmp_path / "s.duckdb"
        with Store(db) as store:
            run_id = create_run(store, config)
            for stage in stages:
                assert run_stage(store, run_id, 1, stage) == "done"
        return db, run_id

    return make
