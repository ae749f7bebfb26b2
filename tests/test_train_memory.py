"""The caution for a full fine-tuning that cannot fit its device (``engine.train_memory``): a 7B planner's DPO on one
80 GB GPU (examples/paper.toml's setting) is cautioned before the run; LoRA, an accelerate launch, the demo agents
and a device that holds it are not."""

from __future__ import annotations

import json

import pytest

from engine import memory_check, train_memory
from engine.config import load_config

LLAMA_7B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
            "intermediate_size": 11008, "vocab_size": 32000, "tie_word_embeddings": False}


def test_the_parameter_count_of_a_llama_config():
    assert train_memory.parameters_of(LLAMA_7B) == 6_738_415_616  # Llama-2-7B's own count
    assert train_memory.parameters_of({"hidden_size": 4}) is None


@pytest.fixture
def seven_b(tmp_path, monkeypatch):
    model = tmp_path / "llama-7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA_7B), encoding="utf-8")
    monkeypatch.setattr(memory_check, "_device_memory", lambda device: 80 * 2**30)  # one 80 GB GPU
    return str(model)


def _config(path: str, *more: str):
    return load_config(None, [f"planner.path={path}", f"grounder.path={path}", "planner.dtype=bfloat16",
                              "grounder.dtype=bfloat16", *more])


def test_a_7b_planners_full_dpo_on_one_80_gb_gpu_is_cautioned(seven_b):
    caution = train_memory.training_memory_caution(_config(seven_b), "planner")
    assert caution.startswith("dpo.lora = false: full fine-tuning of the planner (about 6.74B parameters) needs at "
                              "least 126 GiB") and "and a frozen reference" in caution and "dpo.lora = true" in caution
    grounder = train_memory.training_memory_caution(_config(seven_b), "grounder")
    assert grounder.startswith("sft.lora = false:") and "at least 100 GiB" in grounder and "reference" not in grounder


@pytest.mark.parametrize("setting", ["dpo.lora=true", "launch.mode=accelerate", "stages.stage1=false"])
def test_no_caution_where_the_state_is_not_held_in_full_in_this_process(seven_b, setting):
    assert train_memory.training_memory_caution(_config(seven_b, setting), "planner") is None


def test_the_demo_agents_and_a_large_enough_device_draw_none(seven_b, monkeypatch):
    assert train_memory.training_memory_caution(load_config(None, []), "planner") is None  # 3.9M parameters
    monkeypatch.setattr(memory_check, "_device_memory", lambda device: 160 * 2**30)
    assert train_memory.training_memory_caution(_config(seven_b), "planner") is None


def test_the_run_is_cautioned_before_it_starts(seven_b, monkeypatch):
    """Through ``engine.preflight`` (a run's creation, a resume, the studio's Validate): the caution is printed and
    returned with the others."""
    from engine import preflight as checks

    monkeypatch.setattr(checks, "check_model", lambda *a, **k: [])  # a config.json alone: no weights to check
    preflight = checks.preflight
    config = _config(seven_b)
    cautions = [c for c in preflight(config) if "full fine-tuning" in c]
    assert [c.split(":")[0] for c in cautions] == ["dpo.lora = false", "sft.lora = false"]
