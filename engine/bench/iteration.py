"""``bench iteration``: wall time per stage of one MOAT iteration (plus the iteration-0 evaluation) on a tmp store.

``default``: ``examples/demo.toml`` as is, with the committed demo agents (``assets/demo``) -- their absence is
reported and the tiny agents are used instead, sizes unchanged. ``tiny``: the test suite's loop sizes (4 tasks, K=3,
16 new tokens, 2 optimizer steps) on the tiny agents. No variants: this is a regression tracker.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.bench import common

DEMO_CONFIG = common.REPO / "examples" / "demo.toml"

TINY = ["data.train_limit=4", "data.eval_limit=2", "sample.k=3", "sample.max_new_tokens=16", "sample.batch_size=2",
        "score.batch_size=4", "ground.max_new_tokens=16", "ground.batch_size=4", "evaluate.plan_max_new_tokens=12",
        "evaluate.ground_max_new_tokens=12", "evaluate.batch_size=4", "pairs.min_gap=0.0", "dpo.max_steps=2",
        "dpo.batch_size=2", "dpo.max_length=160", "sft.max_steps=2", "sft.batch_size=2", "sft.max_length=256"]


@dataclass
class LoopResult:
    """One pass of the workload: the run's status, seconds per ``"iteration:stage"`` (in the order they ran), the
    loop's wall time, the config it ran, and its evaluation metrics (``{"iteration/split/domain/name": value}``)."""

    status: str
    stages_s: dict[str, float]
    total_s: float
    config: object
    metrics: dict[str, float] = field(default_factory=dict)


def run_workload(size: str, device: str, on_stage: Callable[[int, str, str], None] | None = None) -> LoopResult:
    """The iteration-0 evaluation and one MOAT iteration on a fresh temporary store; ``on_stage`` is called after
    each stage, as ``run_loop`` calls it (``bench floor`` reads its FLOP counter there)."""
    from engine.config import load_config
    from engine.demo.world import WorldConfig, generate_suite
    from engine.loop import create_run, run_loop
    from engine.store import Store
    from engine.tasks import write_tasks

    agents = common.agents_dir(size)
    with tempfile.TemporaryDirectory(prefix="moat-bench-iter-") as tmp:
        # evaluate.reuse = false: a benchmark times the evaluation, never a copy of one (engine.eval_cache)
        overrides = [f"run.workdir={Path(tmp) / 'runs'}", "run.iterations=1", f"planner.path={agents / 'planner'}",
                     f"grounder.path={agents / 'grounder'}", f"planner.device={device}", f"grounder.device={device}",
                     "evaluate.reuse=false"]
        path = DEMO_CONFIG
        if size == "tiny":
            tasks_file = Path(tmp) / "tasks.jsonl"
            write_tasks(generate_suite(WorldConfig.small()), tasks_file)
            overrides += [f"data.tasks={tasks_file}", *TINY]
            path = None
        else:
            overrides.append(f"data.tasks={common.REPO / 'examples' / 'demo' / 'tasks.jsonl'}")
        config = load_config(path, overrides)
        stages: dict[str, float] = {}
        with Store(Path(tmp) / "bench.duckdb") as store:
            run_id = create_run(store, config)
            mark = [time.perf_counter()]

            def timed(iteration: int, stage: str, status: str) -> None:
                now = time.perf_counter()
                stages[f"{iteration}:{stage}"] = round(now - mark[0], 3)
                mark[0] = now
                if on_stage is not None:
                    on_stage(iteration, stage, status)

            started = time.perf_counter()
            status = run_loop(store, run_id, on_stage=timed)
            total = time.perf_counter() - started
            rows = store.query("SELECT iteration, split, domain, name, value FROM metrics WHERE run_id = ?", [run_id])
            metrics = {f"{r.iteration}/{r.split}/{r.domain}/{r.name}": float(r.value) for r in rows.itertuples()}
    return LoopResult(status, stages, total, config, metrics)


def run(size: str, repeats: int, device: str) -> dict:
    from engine.precision import describe

    agents = common.agents_dir(size)
    result = run_workload(size, device)
    config, stages, status, total = result.config, result.stages_s, result.status, result.total_s
    path = DEMO_CONFIG if size != "tiny" else None
    iteration1 = sum(v for k, v in stages.items() if k.startswith("1:"))
    return {
        "sizes": {"config": str(path) if path else "tiny overrides", "agents": str(agents),
                  "demo_agents_present": agents == common.DEMO_AGENTS, "train_limit": config.data.train_limit,
                  "k": config.sample.k},
        # fp32 or bf16, and why (the demo forces fp32, so its figures do not depend on the CPU's bf16 support)
        "training_precision": {"dpo": describe(config.dpo.bf16, torch.device(device)),
                               "sft": describe(config.sft.bf16, torch.device(device))},
        "stages_s": stages,
        "iteration_s": round(iteration1, 2),
        "total_s": round(total, 2),
        "ratios": {},
        "correct": {"status": status, "ok": status == "done"},
    }
