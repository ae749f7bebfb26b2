"""``engine.memory_check``: a sampling call whose attention cache would not fit draws a caution before the run starts.

An audit set ``sample.k = 5000`` on a 135M model: the sample stage ran 75 s and the kernel killed it for 24 GB, with
nothing said before, leaving a run whose config cannot change. The caution is computed from the planner's
``config.json`` and the machine's memory (fixed here, so the figures are exact)."""

from __future__ import annotations

import json

import pytest

from engine import memory_check
from engine.config import load_config
from engine.memory_check import sampling_memory_caution

GIB = 2**30


@pytest.fixture
def config_at(tiny_agents_dir, monkeypatch):
    """``config_at(*overrides)``: the demo config on the tiny agents (2 layers, 2 heads of 16) with 1 GiB of RAM."""
    monkeypatch.setattr(memory_check, "_device_memory", lambda device: GIB)

    def make(*overrides: str):
        return load_config("examples/demo.toml", [f"planner.path={tiny_agents_dir / 'planner'}",
                                                  "planner.device=cpu", *overrides])
    return make


def test_the_bytes_a_token_adds_come_from_the_planners_config(tiny_agents_dir):
    found = json.loads((tiny_agents_dir / "planner" / "config.json").read_text(encoding="utf-8"))
    assert (found["num_hidden_layers"], found["num_attention_heads"], found["hidden_size"]) == (2, 2, 32)
    # keys and values x 2 layers x 2 heads x 16 values x 4 bytes (fp32 on a CPU)
    assert memory_check._cache_bytes_per_token(str(tiny_agents_dir / "planner"), "cpu") == 2 * 2 * 2 * 16 * 4


def test_a_call_that_fits_draws_none_and_one_that_does_not_names_the_batch_size_that_fits(config_at):
    assert sampling_memory_caution(config_at()) is None  # the demo's K = 15 x 16 prompts
    # 512 bytes a token x 160 tokens (the demo's 96 new + 64 prompt) = 80 KiB a row; half of 1 GiB holds 6,553 rows.
    caution = sampling_memory_caution(config_at("sample.k=1000", "sample.batch_size=16"))
    assert caution.startswith("sample.k = 1000 x sample.batch_size = 16: 16000 sequences in one generate call, "
                              "whose attention cache alone needs at least 1.2 GiB (160 tokens each")
    assert caution.endswith("over half of the planner's 1.0 GiB (RAM): the process may be killed for memory; lower "
                            "sample.batch_size (prompts per call) to 6")
    alone = sampling_memory_caution(config_at("sample.k=7000", "sample.batch_size=1"))
    assert alone.endswith("lower sample.k: the samples of one prompt alone do not fit")


def test_the_caution_reaches_the_runs_cautions_and_a_phase_with_other_settings_is_checked(config_at, capsys):
    from engine.preflight import preflight

    config = config_at("sample.k=1000")
    assert any(c.startswith("sample.k = 1000 x sample.batch_size = 16") for c in preflight(config))
    assert "warning: sample.k = 1000" in capsys.readouterr().err
    phased = config_at("run.iterations=2", 'schedule.phases=[{"name": "narrow", "iterations": 1}, '
                                           '{"name": "wide", "iterations": 1, "set": ["sample.k=1000"]}]')
    assert sampling_memory_caution(phased).startswith("sample.k = 1000 x sample.batch_size = 16")
    assert sampling_memory_caution(config_at("sample.k=1000", "sample.backend=vllm")) is None  # vLLM pages its own


def test_no_caution_when_the_planners_config_cannot_be_read(config_at, tmp_path):
    assert sampling_memory_caution(config_at("sample.k=100000", f"planner.path={tmp_path}")) is None
