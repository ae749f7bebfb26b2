"""One base model in two roles (``agents.topology = shared``): the roles are LoRA adapter chains on one base held
once in memory; each role's outputs equal its chain merged into the base; each role's adapter changes only when that
role trains, and the base never changes; checkpoints, merge and exports work as with two separate models."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from engine import models
from engine.__main__ import main
from engine.config import load_config
from engine.errors import CheckpointError, ConfigError
from engine.loop import create_run, run_loop
from engine.store import Store
from engine.topology import SharedBase
from studio.stage_text import stage_summary
from tests._tiny import tiny_overrides


def _adapter(base_dir: Path, out: Path, seed: int, base: Path | None = None) -> Path:
    """A LoRA adapter with random (non-zero) weights on ``base`` (default: ``base_dir``), saved as a run would."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    model, tokenizer = models.load_model(models.ModelSpec(str(base or base_dir), device="cpu"))
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    models.save_adapter_checkpoint(peft, tokenizer, out, str(base or base_dir))
    return out


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_shared_views_equal_their_merged_chains_and_hold_the_base_once(tmp_path, tiny_agents_dir):
    base_dir = tiny_agents_dir / "grounder"
    planner_1 = _adapter(base_dir, tmp_path / "p1", seed=1)
    planner_2 = _adapter(base_dir, tmp_path / "p2", seed=2, base=planner_1)  # a chain of two, as after 2 iterations
    grounder_1 = _adapter(base_dir, tmp_path / "g1", seed=3)
    shared = SharedBase(models.ModelSpec(str(base_dir), device="cpu"))
    base_bytes = shared.parameter_bytes()
    before = {n: p.detach().clone() for n, p in shared.model.named_parameters()}
    planner, _ = shared.role_model("planner", str(planner_2))
    grounder, _ = shared.role_model("grounder", str(grounder_1))
    plain, _ = shared.role_model("grounder", str(base_dir))  # a role still at the configured base
    ids = torch.randint(3, 50, (2, 9))
    expected = {name: _logits(models.load_model(models.ModelSpec(str(path), device="cpu"))[0], ids)
                for name, path in (("planner", planner_2), ("grounder", grounder_1), ("plain", base_dir))}
    # Alternate the roles: each call switches to its own chain, whatever ran before.
    for name, view in (("planner", planner), ("grounder", grounder), ("plain", plain), ("planner", planner)):
        assert torch.allclose(_logits(view, ids), expected[name], atol=1e-5), name
    assert not torch.allclose(expected["planner"], expected["grounder"], atol=1e-3)  # the roles really differ
    # One base in memory: three adapters add a little, a second copy would double it.
    assert shared.parameter_bytes() < 1.2 * base_bytes
    assert all(not p.requires_grad for p in shared.model.parameters())
    after = {n.replace(".base_layer", ""): p for n, p in shared.model.named_parameters() if "lora_" not in n}
    assert all(torch.equal(before[n], after[n]) for n in before)  # the base weights never change
    other = _adapter(tiny_agents_dir / "planner", tmp_path / "other", seed=4)
    with pytest.raises(CheckpointError, match="planner.path.*not to the shared base"):
        shared.role_model("planner", str(other))


def _shared_config(tmp_path, tiny_agents_dir, demo_tasks, extra: list[str] = ()):
    from engine.tasks import write_tasks

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(demo_tasks, tasks_file)
    base = tiny_agents_dir / "grounder"
    overrides = tiny_overrides(tmp_path, tiny_agents_dir, tasks_file) + [
        f"planner.path={base}", f"grounder.path={base}", "agents.topology=shared", "dpo.lora=true", "dpo.lora_r=4",
        "dpo.lora_alpha=8", "sft.lora=true", "sft.lora_r=4", "sft.lora_alpha=8", *extra]
    return load_config(None, overrides)


def test_shared_topology_needs_one_base_and_lora_on_both_roles_or_neither(tmp_path, tiny_agents_dir, demo_tasks):
    with pytest.raises(ConfigError, match="grounder.path"):
        _shared_config(tmp_path, tiny_agents_dir, demo_tasks, [f"planner.path={tiny_agents_dir / 'planner'}"])
    with pytest.raises(ConfigError, match="sft.lora.*must be equal"):
        _shared_config(tmp_path, tiny_agents_dir, demo_tasks, ["sft.lora=false"])
    with pytest.raises(ConfigError, match="dpo.save_adapter"):
        _shared_config(tmp_path, tiny_agents_dir, demo_tasks, ["dpo.save_adapter=false"])
    with pytest.raises(ConfigError, match="warm_start.enabled"):
        _shared_config(tmp_path, tiny_agents_dir, demo_tasks, ["warm_start.enabled=true"])
    assert _shared_config(tmp_path, tiny_agents_dir, demo_tasks, ["dpo.lora=false", "sft.lora=false"])


def _digest(path: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(path.glob("*.safetensors")))).hexdigest()


@pytest.mark.slow
def test_a_shared_run_trains_each_role_adapter_only_in_its_own_stage(tmp_path, tiny_agents_dir, demo_tasks, capsys):
    config = _shared_config(tmp_path, tiny_agents_dir, demo_tasks, ["run.iterations=2"])
    base = tiny_agents_dir / "grounder"
    base_digest = _digest(base)
    seen: list[tuple[int, str, dict[str, str]]] = []  # after each stage: role -> digest of its checkpoint
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        run_id = create_run(store, config)

        def snapshot(iteration: int, stage: str, status: str) -> None:
            found = {role: store.checkpoint(run_id, iteration, role) for role in ("planner", "grounder")}
            seen.append((iteration, stage, {r: _digest(Path(c["path"])) for r, c in found.items() if c}))

        assert run_loop(store, run_id, on_stage=snapshot) == "done"
        checkpoints = {(t, role): store.checkpoint(run_id, t, role)
                       for t in (1, 2) for role in ("planner", "grounder")}
        assert store.get_run(run_id)["config"]["agents"]["topology"] == "shared"  # the store records which
        evaluated = store.stage_status(run_id, 2)["evaluate"]["counts"]["agents"]
        line = stage_summary(store, run_id, 2, "evaluate", "done", store.stage_status(run_id, 2)["evaluate"]["counts"])
        metrics = store.count("metrics", run_id)
    assert evaluated.startswith("one base in both roles") and "4 LoRA adapter(s)" in evaluated  # 2 per role
    assert "tasks evaluated" in line and line.endswith(f"; {evaluated}")  # the Run tab says so
    assert metrics > 0  # the evaluation ran both roles on the shared base
    assert _digest(base) == base_digest  # the base never changes
    for (t, _role), found in checkpoints.items():
        path = Path(found["path"])
        assert found["kind"] == "lora-adapter" and not (path / "model.safetensors").exists()
        root, chain = models.adapter_chain(path)
        assert root.path == str(base) and len(chain) == t  # every role is a chain of adapters on the one base
    for iteration in (1, 2):
        stages = {stage: digests for t, stage, digests in seen if t == iteration}
        # The planner's adapter appears when the planner trains and stays the same through the grounder's stages.
        assert "grounder" not in stages["train_planner"]
        assert stages["train_planner"]["planner"] == stages["train_grounder"]["planner"]
        assert "grounder" in stages["train_grounder"]
    # Exports and merge work as with separate models.
    out = tmp_path / "pairs.jsonl"
    assert main(["export", "--db", str(db), "--run", run_id, "--iteration", "1", "--what", "pairs",
                 "--out", str(out)]) == 0
    assert out.read_text().strip()
    merged = tmp_path / "merged"
    assert main(["merge", "--db", str(db), "--run", run_id, "--iteration", "2", "--role", "grounder",
                 "--out", str(merged)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["adapters"] == 2


@pytest.mark.slow
def test_a_shared_run_with_the_planner_by_grpo(tmp_path, tiny_agents_dir, demo_tasks):
    from tests.test_grpo import GRPO_LOOP

    config = _shared_config(tmp_path, tiny_agents_dir, demo_tasks,
                            [*GRPO_LOOP, "grpo.lora=true", "grpo.lora_r=4", "grpo.lora_alpha=8"])
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, config)
        assert run_loop(store, run_id) == "done"
        planner = store.checkpoint(run_id, 1, "planner")
        rollouts = store.count("rollouts", run_id)
    assert planner["kind"] == "lora-adapter"
    assert models.adapter_chain(planner["path"])[0].path == str(tiny_agents_dir / "grounder")
    assert rollouts > 0  # the gap reward ran the grounder's view of the shared base


@pytest.mark.slow
def test_one_set_of_weights_trains_in_both_roles_in_turn(tmp_path, tiny_agents_dir, demo_tasks):
    """Shared without LoRA: DPO writes the planner's weights, the grounder's stages of the same iteration run (and
    SFT trains) those weights, and the next iteration starts both roles from what SFT wrote; one copy in memory."""
    from engine.stages.context import StageContext

    config = _shared_config(tmp_path, tiny_agents_dir, demo_tasks,
                            ["run.iterations=2", "dpo.lora=false", "sft.lora=false"])
    base = tiny_agents_dir / "grounder"
    base_digest = _digest(base)
    starts: dict[tuple[int, str], dict[str, str]] = {}
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, config)
        ctx = StageContext(store, run_id, 0, config, tmp_path)

        def record(iteration: int, stage: str, status: str) -> None:  # what a stage would load, once it is done
            ctx.iteration, ctx.stage = iteration, stage
            starts[(iteration, stage)] = {role: ctx.agent_path(role, iteration) for role in ("planner", "grounder")}

        assert run_loop(store, run_id, on_stage=record) == "done"
        found = {(t, role): store.checkpoint(run_id, t, role) for t in (1, 2) for role in ("planner", "grounder")}
        evaluated = store.stage_status(run_id, 2)["evaluate"]["counts"]["agents"]
        ctx.iteration, ctx.stage = 2, "evaluate"
        same = ctx.agent("planner", 3) is ctx.agent("grounder", 3)
        # the swap table's "after iteration 0" is the base even from iteration 1's context (no stage running)
        from engine.swap import agent_after

        ctx.iteration, ctx.stage = 1, ""
        after_0, after_1 = agent_after(ctx, "planner", 0), agent_after(ctx, "grounder", 1)
        metrics = store.count("metrics", run_id, 2)
    assert all(c["kind"] == "full" for c in found.values())
    p1, g1, p2, g2 = (found[k]["path"] for k in ((1, "planner"), (1, "grounder"), (2, "planner"), (2, "grounder")))
    assert len({p1, g1, p2, g2, str(base)}) == 5  # every training stage wrote new weights
    assert starts[(1, "train_planner")] == {"planner": str(base), "grounder": str(base)}  # it started from the base
    assert starts[(1, "ground")] == {"planner": p1, "grounder": p1}  # DPO's output serves both roles ...
    assert starts[(1, "critique")] == {"planner": p1, "grounder": p1}  # (the grounder's stages ground with it)
    assert starts[(1, "train_grounder")] == {"planner": g1, "grounder": g1}  # ... until SFT, trained from it, wrote
    assert starts[(2, "sample")] == {"planner": g1, "grounder": g1}  # the next iteration starts from SFT's weights
    assert starts[(2, "evaluate")] == {"planner": g2, "grounder": g2}
    assert same  # one model in memory for both roles
    assert (after_0, after_1) == (str(base), g1)
    assert evaluated.startswith("one set of weights in both roles") and metrics > 0
    assert _digest(base) == base_digest
