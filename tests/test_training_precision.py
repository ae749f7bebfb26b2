"""Full fine-tuning of weights loaded in bf16 trains fp32 master weights (``engine.training.master_weights_dtype``):
the same training as on an fp32 copy, handed back in bf16; trained as loaded, an update under half a bf16 step was
lost. And an in-process DPO stage holds two models (the policy and its frozen reference), not four
(``StageContext.take_model``). Tiny models from a config; each trains for a few steps."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from engine.config import DPOSettings, TrainSettings
from engine.training import dpo_train, master_weights_dtype, sft_train
from tests.test_training import ROWS, _grounder_rows

pytestmark = pytest.mark.slow  # trains tiny models


def _train_sft(model, tokenizer, rows):
    settings = TrainSettings(learning_rate=2e-5, max_steps=3, batch_size=2, max_length=256, bf16="false", seed=0)
    return sft_train(model, tokenizer, rows, settings)[0]


def test_bf16_weights_train_as_the_fp32_copy_would_and_come_back_in_bf16(tiny_agents, demo_tasks):
    _, grounder = tiny_agents
    rows = _grounder_rows(demo_tasks, 4)
    loaded = copy.deepcopy(grounder.model).to(torch.bfloat16)
    as_fp32 = _train_sft(copy.deepcopy(loaded).float(), grounder.tokenizer, rows)
    trained = _train_sft(copy.deepcopy(loaded), grounder.tokenizer, rows)
    assert next(trained.parameters()).dtype == torch.bfloat16  # the checkpoint keeps its size
    expected = as_fp32.to(torch.bfloat16).state_dict()
    assert all(torch.equal(expected[name], value) for name, value in trained.state_dict().items())
    # Before: trained in bf16 itself (weights and AdamW's state), lr 2e-5 moved a different, smaller set of weights.
    old = dict(loaded.named_parameters())
    moved = sum(int((old[n] != p).sum()) for n, p in trained.named_parameters())
    assert moved > 0


def test_bf16_dpo_trains_fp32_master_weights_beside_a_frozen_reference(tiny_agents):
    planner, _ = tiny_agents
    loaded = copy.deepcopy(planner.model).to(torch.bfloat16)
    reference = copy.deepcopy(loaded).float().eval()
    settings = DPOSettings(learning_rate=4e-7, max_steps=2, batch_size=2, max_length=128, bf16="false", seed=0)
    as_fp32, _ = dpo_train(copy.deepcopy(loaded).float(), planner.tokenizer, ROWS, settings, ref_model=reference)
    trained, _ = dpo_train(copy.deepcopy(loaded), planner.tokenizer, ROWS, settings, ref_model=reference)
    expected = as_fp32.to(torch.bfloat16).state_dict()
    assert next(trained.parameters()).dtype == torch.bfloat16
    assert all(torch.equal(expected[name], value) for name, value in trained.state_dict().items())


def test_what_is_cast_and_what_is_not(tiny_agents):
    planner, _ = tiny_agents
    full, lora = TrainSettings(), TrainSettings(lora=True)
    assert master_weights_dtype(planner.model, full) is None  # fp32 already
    half = copy.deepcopy(planner.model).to(torch.float16)
    assert master_weights_dtype(half, full) is torch.float16
    assert master_weights_dtype(half, lora) is None  # peft keeps the adapters in fp32; the base is frozen


@pytest.mark.parametrize("flag", ["ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"])
def test_a_sharded_launch_is_left_as_configured(tiny_agents, monkeypatch, flag):
    """Under ``accelerate launch`` with DeepSpeed (its own fp32 master copy) or FSDP (a sharded, wrapped module) the
    weights are not cast: transformers' ZeRO-3 check would answer only once the trainer's arguments exist."""
    planner, _ = tiny_agents
    half = copy.deepcopy(planner.model).to(torch.bfloat16)
    monkeypatch.setenv(flag, "true")
    assert master_weights_dtype(half, TrainSettings()) is None


def test_an_in_process_dpo_stage_holds_the_policy_and_its_reference_only(tiny_run, monkeypatch):
    """The planner was trained on a deep copy beside its cached original, dpo_train copied it again for the
    reference, and the grounder stayed cached from the score stage: four models inside DPOTrainer.train (four 7B
    models in a DPO step of examples/paper.toml). Now the stage context caches nothing while it trains, and the
    trainer holds the taken policy and its frozen copy. (Counting every live model in the process failed in the
    whole suite, where other tests' models are alive: the cache and the trainer are what this stage holds.)"""
    import trl

    from engine.loop import run_config, run_directory, run_stage
    from engine.stages.context import StageContext
    from engine.store import Store

    seen: list[tuple[int, bool]] = []
    train = trl.DPOTrainer.train

    def watching(self, *args, **kwargs):
        seen.append((len(ctx._agents), self.ref_model is not None and self.ref_model is not self.model))
        return train(self, *args, **kwargs)

    monkeypatch.setattr(trl.DPOTrainer, "train", watching)
    db, run_id = tiny_run("pairs.min_gap=0.0", "dpo.max_steps=1", "dpo.batch_size=2", "dpo.reference=previous",
                          "dpo.lora=false")
    with Store(db) as store:
        ctx = StageContext(store, run_id, 1, run_config(store, run_id), run_directory(store, run_id))
        for stage in ("sample", "score", "pairs"):
            assert run_stage(store, run_id, 1, stage, context=ctx) == "done"
        assert run_stage(store, run_id, 1, "train_planner", context=ctx) == "done"
    assert seen == [(0, True)], seen  # before: (2, True), the planner and the grounder cached beside the copies


def _first_step_rewards(model, tokenizer, ref_model=None) -> dict[str, float]:
    settings = DPOSettings(learning_rate=1e-12, max_steps=1, batch_size=4, max_length=128, bf16="false", seed=0,
                           logging_steps=1)
    _, history = dpo_train(model, tokenizer, ROWS * 2, settings, ref_model=ref_model)
    return {key: history[0][key] for key in ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins")}


def test_a_bf16_policy_and_its_reference_agree_before_the_first_update(tiny_agents):
    """DPO's reward is the policy's log-prob minus the reference's: before any update it is 0 and the loss log 2.
    With the policy trained as fp32 master weights and the reference left in bf16 (the copy of the previous policy,
    or a given one such as the initial planner), the two rounded differently: the rewards started off zero."""
    planner, _ = tiny_agents
    loaded = copy.deepcopy(planner.model).to(torch.bfloat16)
    copied = _first_step_rewards(copy.deepcopy(loaded), planner.tokenizer)
    given_reference = copy.deepcopy(loaded).eval()
    given = _first_step_rewards(copy.deepcopy(loaded), planner.tokenizer, ref_model=given_reference)
    for logged in (copied, given):
        assert logged["loss"] == pytest.approx(math.log(2), abs=1e-6), logged
        assert logged["rewards/chosen"] == logged["rewards/rejected"] == logged["rewards/margins"] == 0.0, logged
    # The caller's reference comes back as it was given: in bf16, its values untouched.
    assert next(given_reference.parameters()).dtype == torch.bfloat16
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), given_reference.state_dict().values()))
