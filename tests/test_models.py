"""Model loading, batched PPL scoring (== one at a time) and generation on tiny models built from config."""

from __future__ import annotations

import math

import pytest
import torch

from engine import generation, models, scoring


def test_reduced_demo_build_loads_offline(tiny_agents_dir, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for role in ("planner", "grounder"):
        path = tiny_agents_dir / role
        assert (path / "model.safetensors").exists()
        model = AutoModelForCausalLM.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
        assert tokenizer.eos_token == "</s>" and tokenizer.pad_token == "<pad>"
        assert model.config.vocab_size == len(tokenizer)
    assert (tiny_agents_dir / "build.json").exists()


def test_batched_scores_equal_one_at_a_time(tiny_agents):
    _, grounder = tiny_agents
    prompts = ["<|user|>\nshort\n<|assistant|>\n", "<|user|>\na much longer prompt with many words in it\n"
               "<|assistant|>\n", "<|user|>\nmid size prompt\n<|assistant|>\n"]
    targets = ["R1 = Calculator(3 * 4)", "R1 = Calculator(1 + 2); R2 = Calculator(R1 * 7)", "x"]
    batched = scoring.score_targets(grounder.model, grounder.tokenizer, prompts, targets, batch_size=3)
    single = [scoring.score_targets(grounder.model, grounder.tokenizer, [p], [t], batch_size=1)[0]
              for p, t in zip(prompts, targets)]
    assert all(math.isfinite(v) and v > 0 for v in batched)
    assert batched == pytest.approx(single, abs=1e-4)


def test_score_is_mean_nll_of_target_plus_eos(tiny_agents):
    _, grounder = tiny_agents
    tok, model = grounder.tokenizer, grounder.model
    prompt, target = "<|user|>\nq\n<|assistant|>\n", "R1 = Calculator(2 + 2)"
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    t_ids = tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([p_ids + t_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    expected = -sum(logprobs[len(p_ids) - 1 + i, t].item() for i, t in enumerate(t_ids)) / len(t_ids)
    assert scoring.score_targets(model, tok, [prompt], [target])[0] == pytest.approx(expected, abs=1e-5)


def test_generate_shapes_and_seed(tiny_agents):
    planner, _ = tiny_agents
    config = generation.GenerationConfig(max_new_tokens=8, temperature=1.0, top_p=0.95, num_return_sequences=3,
                                         batch_size=2)
    prompts = ["<|user|>\nTask one\n<|assistant|>\n", "<|user|>\nTask two\n<|assistant|>\n", "<|user|>\nx\n"
               "<|assistant|>\n"]
    first = generation.generate(planner.model, planner.tokenizer, prompts, config, seed=1)
    again = generation.generate(planner.model, planner.tokenizer, prompts, config, seed=1)
    assert [len(o) for o in first] == [3, 3, 3]
    assert first == again


def test_greedy_generation_in_length_order_returns_the_callers_order(tiny_agents):
    """Greedy decoding batches the prompts longest first (engine.generation.generate_naive); each output still belongs
    to its own prompt and equals that prompt decoded alone."""
    planner, _ = tiny_agents
    noise = torch.Generator().manual_seed(0)  # the 3-step tiny planner stops at once: empty texts would prove nothing
    with torch.no_grad():
        for weight in planner.model.parameters():
            weight.add_(torch.randn(weight.shape, generator=noise) * 0.3)
    prompts = ["<|user|>\nx\n<|assistant|>\n", "<|user|>\na much longer task with many more words in it to plan\n"
               "<|assistant|>\n", "<|user|>\nmid size task here\n<|assistant|>\n", "<|user|>\ny\n<|assistant|>\n"]
    greedy = generation.GenerationConfig(max_new_tokens=8, temperature=0.0, batch_size=2)
    together = generation.generate(planner.model, planner.tokenizer, prompts, greedy)
    alone = [generation.generate(planner.model, planner.tokenizer, [p], greedy)[0] for p in prompts]
    assert together == alone and len({o[0] for o in together}) > 1  # distinct prompts, distinct continuations


def test_resolve_device_and_dtype():
    cpu = models.resolve_device("cpu")
    assert models.resolve_dtype("auto", cpu) == torch.float32
    assert models.resolve_dtype("bfloat16", cpu) == torch.bfloat16


def test_generation_stops_at_eos_and_the_templates_end_of_turn(tiny_agents):
    """Instruct checkpoints end a turn with their template's marker (``<|im_end|>``, ``<|eot_id|>``) and list several
    EOS ids in their generation config; generation must stop at all of them, not run on into a next turn."""
    import copy

    planner, _ = tiny_agents
    tokenizer = copy.deepcopy(planner.tokenizer)
    tokenizer.add_tokens(["<|im_end|>"])  # not "special", so the decoded text shows where generation stopped
    model = copy.deepcopy(planner.model)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, 7]
    ids = generation.stop_token_ids(model, tokenizer)
    assert tokenizer.eos_token_id in ids and 7 in ids and tokenizer.convert_tokens_to_ids("<|im_end|>") in ids
    assert generation.stop_token_ids(None, planner.tokenizer) == sorted(
        {planner.tokenizer.eos_token_id} | {planner.tokenizer.get_vocab()[m] for m in generation.END_OF_TURN
                                            if m in planner.tokenizer.get_vocab()})
    # what both generate paths hand to transformers' generate (which stops a row at any of these ids)
    kwargs = generation._sampling_kwargs(tokenizer, generation.GenerationConfig(max_new_tokens=4), model)
    assert kwargs["eos_token_id"] == ids


def test_device_map_loads_through_accelerate_and_generates(tiny_agents_dir):
    """``device = "map"``: accelerate's device_map="auto" places the layers (here, without a GPU, on the CPU); the
    model generates and scores like one loaded plainly."""
    spec = models.ModelSpec(str(tiny_agents_dir / "planner"), device="map")
    mapped, tokenizer = models.load_model(spec)
    plain, _ = models.load_model(models.ModelSpec(str(tiny_agents_dir / "planner"), device="cpu"))
    assert next(mapped.parameters()).device.type == "cpu"  # no GPU here: accelerate keeps every layer on the CPU
    greedy = generation.GenerationConfig(max_new_tokens=6, temperature=0.0)
    prompts = ["<|user|>\nplan 1 + 2\n<|assistant|>\n"]
    on_map = generation.generate(mapped, tokenizer, prompts, greedy)
    assert on_map == generation.generate(plain, tokenizer, prompts, greedy)
    assert scoring.score_targets(mapped, tokenizer, prompts, ["Subgoal 1: Add."]) == pytest.approx(
        scoring.score_targets(plain, tokenizer, prompts, ["Subgoal 1: Add."]), abs=1e-5)
