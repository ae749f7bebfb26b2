"""TRL training on tiny models: LoRA DPO (reference = adapter off), precomputed reference log-probs, LoRA SFT,
the stop flag, and every log line reaching the sink. Each trains for two steps; assertions can fail."""

from __future__ import annotations

import copy

import pytest
import torch

from engine import prompts
from engine.config import DPOSettings, TrainSettings
from engine.training import dpo_train, micro_batch_args, sft_train

pytestmark = pytest.mark.slow  # trains tiny models: `pytest -m "not slow"` leaves these out

ROWS = [
    {"prompt": "<|user|>\nPlan for task one\n<|assistant|>\n", "chosen": "Subgoal 1: Add 2 and 3.",
     "rejected": "Subgoal 1: Find it."},
    {"prompt": "<|user|>\nPlan for task two\n<|assistant|>\n", "chosen": "Subgoal 1: Multiply 4 by 5.",
     "rejected": "Subgoal 1: Update the count."},
]


def _changed(before, after) -> int:
    old = dict(before.named_parameters())
    return sum(not torch.equal(old[n], p) for n, p in after.named_parameters())


def _grounder_rows(demo_tasks, n: int = 8) -> list[dict[str, str]]:
    rows = []
    for task in demo_tasks[:n]:
        prompt, completion = prompts.prompt_and_completion(
            prompts.grounder_messages(task, task.gold_subgoals, task.gold_actions))
        rows.append({"prompt": prompt, "completion": completion.removesuffix("</s>")})
    return rows


@pytest.mark.parametrize("variant", ["lora", "precompute"])
def test_dpo_variants_train_and_log(tiny_agents, variant):
    planner, _ = tiny_agents
    start = copy.deepcopy(planner.model)
    settings = DPOSettings(learning_rate=5e-3, max_steps=2, batch_size=2, max_length=128, logging_steps=1,
                           lora=variant == "lora", lora_r=4, lora_alpha=8, save_adapter=False,
                           precompute_ref_log_probs=variant == "precompute")
    logs = []
    trained, history = dpo_train(planner.model, planner.tokenizer, ROWS, settings, on_log=logs.append)
    assert type(trained).__name__ == "LlamaForCausalLM"  # save_adapter = false: LoRA merged into plain weights
    assert _changed(start, trained) > 0
    assert any("rewards/margins" in line for line in logs) and len(logs) >= 2
    assert history[-1]["step"] == 2


def test_lora_sft_merges_and_stop_flag_ends_training(tiny_agents, demo_tasks):
    _, grounder = tiny_agents
    rows = _grounder_rows(demo_tasks)
    start = copy.deepcopy(grounder.model)
    settings = TrainSettings(learning_rate=5e-3, max_steps=5, batch_size=2, max_length=256, lora=True, lora_r=4,
                             lora_alpha=8, logging_steps=1, save_adapter=False)
    calls = {"n": 0}

    def stop_after_two() -> bool:
        calls["n"] += 1
        return calls["n"] >= 2

    trained, history = sft_train(grounder.model, grounder.tokenizer, rows, settings, should_stop=stop_after_two)
    assert _changed(start, trained) > 0
    assert max(h["step"] for h in history) == 2  # stopped after the second optimizer step, not at max_steps=5


def test_dpo_sft_weight_adds_a_scaled_nll_term_on_the_chosen_plan(tiny_agents):
    """``dpo.sft_weight`` combines TRL's sigmoid and sft losses: at the first step the policy equals its reference,
    so plain DPO logs exactly ln 2, and the NLL term adds an excess that scales with the weight."""
    planner, _ = tiny_agents
    first_loss = {}
    for weight in (0.0, 1.0, 2.0):
        settings = DPOSettings(learning_rate=1e-9, max_steps=1, batch_size=2, max_length=128, logging_steps=1,
                               sft_weight=weight)
        _, history = dpo_train(copy.deepcopy(planner.model), planner.tokenizer, ROWS, settings)
        first_loss[weight] = next(h["loss"] for h in history if "loss" in h)
    assert first_loss[0.0] == pytest.approx(0.6931, abs=1e-3)
    excess_1, excess_2 = first_loss[1.0] - first_loss[0.0], first_loss[2.0] - first_loss[0.0]
    assert excess_1 > 0.1  # an untrained model's NLL per token is far above zero
    assert excess_2 == pytest.approx(2 * excess_1, rel=1e-2)


def test_dpo_ld_alpha_discounts_the_longer_plans_extra_tokens(tiny_agents):
    """``dpo.ld_alpha`` (TRL's LD-DPO): the log-probability of the longer plan counts its tokens past the shorter
    plan's length with weight alpha. At the first step (before any update) the logged log-prob of the longer
    (rejected) plans is therefore linear in alpha, and alpha = 0 leaves only the shared length."""
    planner, _ = tiny_agents
    rows = [dict(r, rejected=r["chosen"] + " Subgoal 2: Add the result to itself again.") for r in ROWS]
    logged = {}
    for alpha in (0.0, 0.5, 1.0):
        settings = DPOSettings(learning_rate=1e-9, max_steps=1, batch_size=2, max_length=128, logging_steps=1,
                               ld_alpha=alpha)
        _, history = dpo_train(copy.deepcopy(planner.model), planner.tokenizer, rows, settings)
        first = next(h for h in history if "logps/rejected" in h)
        logged[alpha] = (first["logps/chosen"], first["logps/rejected"])
    assert logged[0.0][0] == pytest.approx(logged[1.0][0], abs=1e-4)  # the shorter plan is all shared length
    assert logged[0.0][1] > logged[1.0][1] + 1.0  # the extra subgoal's tokens no longer count
    assert logged[0.5][1] == pytest.approx((logged[0.0][1] + logged[1.0][1]) / 2, abs=1e-3)


def test_lora_keeps_the_adapter_unmerged_when_it_is_what_gets_saved(tiny_agents):
    """``save_adapter`` (the default): the caller gets the ``PeftModel``; merging it changes the weights."""
    planner, _ = tiny_agents
    start = copy.deepcopy(planner.model)
    settings = DPOSettings(learning_rate=5e-3, max_steps=2, batch_size=2, max_length=128, lora=True, lora_r=4,
                           lora_alpha=8)
    trained, _ = dpo_train(copy.deepcopy(planner.model), planner.tokenizer, ROWS, settings)
    assert hasattr(trained, "peft_config") and settings.save_adapter
    assert _changed(start, trained.merge_and_unload()) > 0


@pytest.mark.parametrize("objective", ["sft", "dpo"])
def test_loss_tokens_only_scores_the_loss_tokens_and_trains_the_same(tiny_agents, demo_tasks, monkeypatch,
                                                                    objective):
    """``loss_tokens_only``: TRL's fused LM head scores only the positions with a label (fewer rows than the batch's
    positions, which include prompt and padding), the logged losses equal TRL's own path's up to rounding, and the
    switch is undone after training (also after a failed one)."""
    import trl.trainer.utils as trl_utils

    planner, grounder = tiny_agents
    original_switch = trl_utils._use_triton
    real_apply = trl_utils._ChunkedLogProbFunction.apply
    scored: list[tuple[int, int]] = []  # (rows scored, label positions) per call

    class Spy:
        @staticmethod
        def apply(hidden, weight, bias, targets, *rest):
            scored.append((hidden.shape[0], int((targets != -100).sum())))
            return real_apply(hidden, weight, bias, targets, *rest)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Spy)
    losses, rows_scored = {}, {}
    for tokens_only in (False, True):
        scored.clear()
        if objective == "sft":
            settings = TrainSettings(learning_rate=1e-3, max_steps=3, batch_size=4, max_length=256, logging_steps=1,
                                     loss_tokens_only=tokens_only)
            _, history = sft_train(copy.deepcopy(grounder.model), grounder.tokenizer, _grounder_rows(demo_tasks),
                                   settings)
        else:
            settings = DPOSettings(learning_rate=1e-3, max_steps=3, batch_size=2, max_length=128, logging_steps=1,
                                   loss_tokens_only=tokens_only)
            _, history = dpo_train(copy.deepcopy(planner.model), planner.tokenizer, ROWS, settings)
        losses[tokens_only] = [h["loss"] for h in history if "loss" in h]
        rows_scored[tokens_only] = sum(n for n, _ in scored)
        assert trl_utils._use_triton is original_switch  # restored after training
    assert scored and all(n == labels for n, labels in scored)  # tokens only: every scored row has a label
    assert rows_scored[True] < rows_scored[False]  # TRL's CPU path scores prompt and padding positions too
    assert len(losses[True]) == len(losses[False]) == 3
    assert losses[True] == pytest.approx(losses[False], abs=1e-4)

    def fail() -> bool:
        raise RuntimeError("stopped by the test")

    settings = TrainSettings(max_steps=2, batch_size=2, max_length=256, loss_tokens_only=True)
    with pytest.raises(RuntimeError, match="stopped by the test"):
        sft_train(copy.deepcopy(grounder.model), grounder.tokenizer, _grounder_rows(demo_tasks, 2), settings,
                  should_stop=fail)
    assert trl_utils._use_triton is original_switch


def test_loss_tokens_only_refuses_a_trl_without_the_switch(monkeypatch):
    import trl.trainer.utils as trl_utils

    from engine.training import loss_tokens_only

    monkeypatch.delattr(trl_utils, "_use_triton")
    with pytest.raises(RuntimeError, match="loss_tokens_only = false"), loss_tokens_only(True):
        pass
    with loss_tokens_only(False):  # off: TRL's own path, nothing to switch
        pass


def _forwards(model) -> list[torch.Tensor]:
    """Every training forward's ``input_ids`` (a hook on the model: what the CPU really computes, padding included)."""
    seen: list[torch.Tensor] = []

    def hook(module, args, kwargs):
        if torch.is_grad_enabled():
            seen.append(kwargs["input_ids"].detach().clone())

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def test_micro_batches_take_the_steps_of_one_batch_with_less_padding(tiny_agents, demo_tasks):
    """``micro_batches``: each random batch is cut into micro-batches of similar length whose gradients accumulate,
    and TRL divides by the whole batch's token count, so every step's loss, gradient norm and weights are one
    padded batch's up to float rounding, while fewer padding positions are computed. With 8 rows and a batch of 8
    every step sees every row, so the two runs take comparable steps."""
    _, grounder = tiny_agents
    rows = _grounder_rows(demo_tasks, 8)
    settings = TrainSettings(learning_rate=1e-3, max_steps=3, batch_size=8, max_length=256, logging_steps=1,
                             loss_tokens_only=True, bf16="false")
    runs = {}
    for micro in (1, 4):
        model = copy.deepcopy(grounder.model)
        forwards = _forwards(model)
        trained, history = sft_train(model, grounder.tokenizer, rows, settings, micro_batches=micro)
        logged = [(h["loss"], h["grad_norm"]) for h in history if "loss" in h]
        runs[micro] = {"logged": logged, "forwards": forwards, "weights": dict(trained.named_parameters())}
    one, micro = runs[1], runs[4]
    assert len(one["forwards"]) == 3 and len(micro["forwards"]) == 12  # 4 accumulated micro-batches a step
    assert sum(f.shape[0] for f in micro["forwards"][:4]) == 8  # the whole batch, once
    assert sum(f.numel() for f in micro["forwards"]) < sum(f.numel() for f in one["forwards"])
    assert [x for pair in micro["logged"] for x in pair] == pytest.approx([x for pair in one["logged"] for x in pair],
                                                                          rel=1e-5)
    assert max((micro["weights"][n] - p).abs().max().item() for n, p in one["weights"].items()) < 1e-5


def test_micro_batches_shuffle_with_the_run_seed_and_refuse_what_cannot_be_cut(tiny_agents, demo_tasks):
    """transformers' rebalancing sampler shuffles with its own default seed; ``sft_train`` gives it the run's, so a
    step cut into micro-batches draws the very rows an uncut step of the same seed draws, and two seeds differ."""
    _, grounder = tiny_agents
    rows = _grounder_rows(demo_tasks, 16)

    def first_batch(seed: int, micro_batches: int) -> set[tuple[int, ...]]:
        model = copy.deepcopy(grounder.model)
        forwards = _forwards(model)
        settings = TrainSettings(learning_rate=1e-3, max_steps=1, batch_size=8, max_length=256, seed=seed,
                                 bf16="false")
        sft_train(model, grounder.tokenizer, rows, settings, micro_batches=micro_batches)
        pad = grounder.tokenizer.pad_token_id
        return {tuple(t for t in row.tolist() if t != pad) for batch in forwards for row in batch}

    assert len(first_batch(0, 2)) == 8
    assert first_batch(0, 2) == first_batch(0, 1)
    assert first_batch(1, 2) == first_batch(1, 1)
    assert first_batch(0, 2) != first_batch(1, 2)
    with pytest.raises(ValueError, match="micro_batches 3: expected a divisor of batch_size 8"):
        sft_train(copy.deepcopy(grounder.model), grounder.tokenizer, rows, TrainSettings(batch_size=8),
                  micro_batches=3)
    with pytest.raises(ValueError, match="micro_batches 0: expected a divisor of batch_size 8"):
        micro_batch_args(TrainSettings(batch_size=8), 0)
    with pytest.raises(ValueError, match="cannot be combined with group_by_length"):
        sft_train(copy.deepcopy(grounder.model), grounder.tokenizer, rows, TrainSettings(batch_size=8),
                  sampling="group_by_length", micro_batches=2)
