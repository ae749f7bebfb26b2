"""The precision a CUDA run picks for ``auto``, on simulated GPUs (no GPU here: ``torch.cuda`` is monkeypatched).

A GPU-path audit found three places that took bf16 for granted on CUDA:

- ``engine.precision`` asked ``torch.cuda.is_bf16_supported()``, which counts emulation and answers True on a V100
  (sm70) or T4 (sm75): ``auto`` trained and loaded weights in emulated bf16 there and logged "native bf16";
- ``engine.vllm_backend`` handed vLLM ``bfloat16`` for ``auto`` on every GPU, which vLLM refuses below sm80;
- ``engine.memory_check`` counted 2 bytes a cached value on every GPU, half the truth for fp32 weights.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from collections.abc import Callable

import pytest
import torch

from engine import memory_check, models, precision, vllm_backend
from engine.config import load_config
from engine.memory_check import sampling_memory_caution

GIB = 2**30
PRE_AMPERE = [(7, 0), (7, 5)]  # V100, T4: bf16 tensors can be made, but the arithmetic is emulated
AMPERE_ON = [(8, 0), (9, 0)]  # A100, H100


@pytest.fixture
def simulated_gpus(monkeypatch) -> Callable[..., None]:
    """``simulated_gpus((7, 0), (8, 0), memory=...)``: CUDA reports these devices (compute capabilities), device 0
    current, each with ``memory`` bytes; creating a bf16 tensor succeeds on all, as it does on a real V100 or T4."""

    def install(*capabilities: tuple[int, int], memory: int = 32 * GIB) -> None:
        devices = [types.SimpleNamespace(major=major, minor=minor, name=f"simulated sm{major}{minor}",
                                         total_memory=memory) for major, minor in capabilities]

        def properties(device: torch.device | str | int | None = None) -> types.SimpleNamespace:
            if isinstance(device, str):
                device = torch.device(device)
            if isinstance(device, torch.device):
                device = device.index
            return devices[0 if device is None else device]

        monkeypatch.setattr(torch.version, "hip", None)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(devices))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
        monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)

    return install


@pytest.mark.parametrize("capability", PRE_AMPERE)
def test_auto_on_a_pre_ampere_gpu_trains_and_loads_in_fp32_not_emulated_bf16(simulated_gpus, capability):
    simulated_gpus(capability)
    cuda = torch.device("cuda")
    assert torch.cuda.is_bf16_supported()  # the premise: torch's default answer counts emulation
    assert not precision.native_bf16(cuda)
    assert not precision.use_bf16("auto", cuda)
    assert precision.describe("auto", cuda) == "fp32 (auto: no native bf16 on this cuda)"
    assert models.resolve_dtype("auto", cuda) == torch.float32  # no fp16 guess for weights that may be trained
    assert precision.use_bf16("true", cuda)  # forcing it is still the user's call
    assert models.resolve_dtype("bfloat16", cuda) == torch.bfloat16


@pytest.mark.parametrize("capability", AMPERE_ON)
def test_auto_on_an_ampere_or_later_gpu_is_native_bf16(simulated_gpus, capability):
    simulated_gpus(capability)
    cuda = torch.device("cuda")
    assert precision.native_bf16(cuda) and precision.use_bf16("auto", cuda)
    assert precision.describe("auto", cuda) == "bf16 (auto: native bf16 on this cuda)"
    assert models.resolve_dtype("auto", cuda) == torch.bfloat16
    assert not precision.use_bf16("false", cuda)


def test_the_gpu_named_decides_not_the_current_one(simulated_gpus):
    simulated_gpus((7, 0), (8, 0))  # a V100 as device 0 (current), an A100 as device 1
    assert precision.native_bf16(torch.device("cuda:1"))
    assert not precision.native_bf16(torch.device("cuda:0"))
    assert not precision.native_bf16(torch.device("cuda"))  # no index: the current device, where .to("cuda") goes


def test_no_cuda_is_no_native_cuda_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not precision.native_bf16(torch.device("cuda"))


@pytest.mark.parametrize(("capability", "expected"), [(c, "float16") for c in PRE_AMPERE] +
                                                      [(c, "bfloat16") for c in AMPERE_ON])
def test_vllm_auto_dtype_is_bfloat16_only_where_native_else_float16(simulated_gpus, capability, expected):
    simulated_gpus(capability)
    assert vllm_backend._vllm_dtype("auto") == expected
    assert vllm_backend._vllm_dtype("float32") == "float32"  # a configured dtype is passed on as set


def test_the_vllm_engine_gets_float16_on_a_pre_ampere_gpu(simulated_gpus, monkeypatch):
    """Through ``VLLMGenerator``, with a stand-in ``vllm`` module (the backend imports without the real one)."""
    simulated_gpus((7, 5))
    built: list[dict] = []
    fake_vllm = types.ModuleType("vllm")
    fake_vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    fake_vllm.LLM = lambda **kwargs: built.append(kwargs)
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    vllm_backend.VLLMGenerator("/nowhere/planner", tokenizer=object())
    assert built[0]["dtype"] == "float16"


@pytest.fixture
def fp32_sized_planner(tmp_path):
    """``make(*overrides)``: the demo config on a planner ``config.json`` only (2 layers, 2 heads of 16 values: 256
    bytes of keys and values a token in 16-bit, 512 in fp32), sampling 8 prompts x 1000 samples of 160 tokens a
    call: 0.31 GiB of cache in 16-bit, 0.61 GiB in fp32, against half of a 1 GiB GPU."""
    planner = tmp_path / "planner"
    planner.mkdir()
    (planner / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 2,
                                                     "hidden_size": 32}), encoding="utf-8")

    def make(*overrides: str):
        return load_config("examples/demo.toml", [f"planner.path={planner}", "planner.device=cuda",
                                                  "sample.k=1000", "sample.batch_size=8", *overrides])
    return make


def test_a_planner_configured_in_float32_on_a_gpu_is_cautioned_at_4_bytes_a_value(simulated_gpus,
                                                                                  fp32_sized_planner):
    simulated_gpus((8, 0), memory=GIB)
    caution = sampling_memory_caution(fp32_sized_planner("planner.dtype=float32"))
    assert caution is not None and "needs at least 0.6 GiB" in caution and "1.0 GiB (GPU)" in caution
    assert caution.endswith("lower sample.batch_size (prompts per call) to 6")
    assert sampling_memory_caution(fp32_sized_planner("planner.dtype=bfloat16")) is None  # 0.31 GiB fits


@pytest.mark.parametrize(("capability", "cautioned"), [((7, 0), True), ((8, 0), False)])
def test_auto_sizes_the_cache_in_the_dtype_the_gpu_loads_weights_in(simulated_gpus, fp32_sized_planner, capability,
                                                                   cautioned):
    simulated_gpus(capability, memory=GIB)  # fp32 weights on a V100, bf16 on an A100
    assert (sampling_memory_caution(fp32_sized_planner()) is not None) is cautioned


def test_the_bytes_a_token_adds_follow_the_configured_dtype_on_a_cpu_too(fp32_sized_planner):
    path = fp32_sized_planner().planner.path
    assert memory_check._cache_bytes_per_token(path, "cpu") == 512  # auto: fp32 on a CPU
    assert memory_check._cache_bytes_per_token(path, "cpu", "bfloat16") == 256
    assert memory_check._cache_bytes_per_token(path, "gpu", "float16") == 256  # unparseable device: no crash here
