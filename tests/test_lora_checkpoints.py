"""LoRA runs save adapters, not full copies: each iteration's checkpoint is its adapter plus the model it was
trained on; loading it merges the chain in order (the same weights a merged save would have had), and
``python -m engine merge`` writes those merged weights as a plain model directory."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from engine import models
from engine.__main__ import main
from engine.loop import create_run, run_loop
from engine.store import Store

pytestmark = pytest.mark.slow  # two tiny iterations with LoRA training


def _params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_adapter_checkpoints_chain_across_iterations_and_merge(tmp_path, loop_config, tiny_agents_dir, capsys):
    for section in (loop_config.dpo, loop_config.sft):
        section.lora, section.lora_r, section.lora_alpha = True, 4, 8
        section.lora_target_modules = ["q_proj", "v_proj"]
    loop_config.run.iterations = 2
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        run_id = create_run(store, loop_config)
        assert run_loop(store, run_id) == "done"
        checkpoints = {(t, role): store.checkpoint(run_id, t, role)
                       for t in (1, 2) for role in ("planner", "grounder")}
    for (t, role), found in checkpoints.items():
        path = Path(found["path"])
        assert found["kind"] == "lora-adapter" and (path / "adapter_config.json").is_file()
        assert not (path / "model.safetensors").exists()  # no full copy of the weights
        base = json.loads((path / models.ADAPTER_BASE).read_text())["base"]
        assert base == (str(tiny_agents_dir / role) if t == 1 else checkpoints[(1, role)]["path"])
    # iteration 2's planner = the configured planner + adapter 1 + adapter 2, merged in that order
    from peft import PeftModel

    second = checkpoints[(2, "planner")]["path"]
    base, chain = models.adapter_chain(second)
    assert base.path == str(tiny_agents_dir / "planner") and chain == [checkpoints[(1, "planner")]["path"], second]
    by_hand, _ = models.load_model(models.ModelSpec(str(tiny_agents_dir / "planner"), device="cpu"))
    for adapter in chain:
        by_hand = PeftModel.from_pretrained(by_hand, adapter).merge_and_unload()
    with warnings.catch_warnings(record=True) as seen:  # every merge printed peft's use of a deprecated property
        warnings.simplefilter("always")
        loaded, _ = models.load_model(models.ModelSpec(second, device="cpu"))
    assert not [w for w in seen if "is_gradient_checkpointing" in str(w.message)]
    start = _params(models.load_model(models.ModelSpec(str(tiny_agents_dir / "planner"), device="cpu"))[0])
    expected, got = _params(by_hand), _params(loaded)
    assert all(torch.equal(expected[n], got[n]) for n in expected)
    assert any(not torch.equal(start[n], got[n]) for n in start)  # the adapters changed something
    out = tmp_path / "merged"
    assert main(["merge", "--db", str(db), "--run", run_id, "--iteration", "2", "--role", "planner",
                 "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["adapters"] == 2 and (out / "config.json").is_file() and not (out / models.ADAPTER_BASE).exists()
    merged = _params(models.load_model(models.ModelSpec(str(out), device="cpu"))[0])
    assert all(torch.allclose(merged[n], got[n]) for n in got)
    assert main(["merge", second, "--out", str(out)]) == 2  # never overwrites
    capsys.readouterr()
    assert main(["merge", "--db", str(db), "--run", run_id[:-1], "--iteration", "2", "--role", "planner",
                 "--out", str(tmp_path / "typo")]) == 2  # a mistyped run is named as such, not "has no checkpoint"
    assert f"no run {run_id[:-1]!r} in {db}; did you mean {run_id!r}?" in capsys.readouterr().err


def _adapter_on(base: Path, out: Path) -> Path:
    """A LoRA adapter directory for the model at ``base`` that changes it (a fresh adapter's B = 0 is the identity)."""
    from peft import LoraConfig, get_peft_model

    model, tokenizer = models.load_model(models.ModelSpec(str(base), device="cpu"))
    adapted = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                               task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.copy_(0.1 * torch.randn_like(p))
    adapted.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_roles_given_as_a_model_and_an_adapter_train_all_their_weights(tmp_path, loop_config, tiny_agents_dir):
    """``planner.adapter`` / ``grounder.adapter`` with full fine-tuning (the default): peft froze the base it merged
    the adapter into, and the iteration's first training failed with "element 0 of tensors does not require grad",
    after the sampling and scoring before it."""
    for role in ("planner", "grounder"):
        getattr(loop_config, role).adapter = str(_adapter_on(tiny_agents_dir / role, tmp_path / f"{role}-adapter"))
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        assert run_loop(store, run_id) == "done"
        for role in ("planner", "grounder"):
            found = store.checkpoint(run_id, 1, role)
            assert found["kind"] == "full", found
            start = _params(models.load_model(models.ModelSpec(str(tiny_agents_dir / role), adapter=getattr(
                loop_config, role).adapter, device="cpu"))[0])
            trained = _params(models.load_model(models.ModelSpec(found["path"], device="cpu"))[0])
            assert any(not torch.equal(start[n], trained[n]) for n in start), role  # the training moved them
