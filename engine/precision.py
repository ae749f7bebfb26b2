"""Which floating-point precision training uses, decided by what the hardware computes natively.

``use_bf16(setting, device)`` answers the ``bf16`` field of a training section: ``"true"``/``"false"`` force it;
``"auto"`` picks bf16 only where it is native -- a CUDA GPU of compute capability 8.0 or later (Ampere on), or a CPU
with AVX512-BF16 or AMX tiles -- and fp32 everywhere else. bf16 autocast on a CPU without native support is emulated
and measured 4.6x slower than fp32 (a DPO step of the demo agents on an AMD EPYC with AVX2: 37 s vs 8 s), so it is
never chosen by default there; nor on a GPU before Ampere (V100 sm70, T4 sm75), where torch's
``torch.cuda.is_bf16_supported()`` still answers True because it counts emulation.
The same answer decides the dtype ``"auto"`` weights load in (``engine.models.resolve_dtype``) and the vLLM backend's.
``describe`` is the one line the run's log and the training stages' counts carry, so a user can see which precision a
run trained in and why.
"""

from __future__ import annotations

import torch


def native_bf16(device: torch.device) -> bool:
    """True when ``device`` computes bf16 in hardware (not emulated)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and _cuda_native_bf16(device)
    if device.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)
    return False


def _cuda_native_bf16(device: torch.device) -> bool:
    # Not torch.cuda.is_bf16_supported(): by default it counts emulation (True on sm70/sm75, where bf16 is emulated
    # and vLLM refuses it), and it asks about the current device, not the one named ("cuda:1").
    if torch.version.hip:  # ROCm reports gfx versions, not CUDA capabilities: torch's own answer without emulation
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    major, _minor = torch.cuda.get_device_capability(device)  # index None: the current device, as the model's
    return major >= 8


def use_bf16(setting: str, device: torch.device) -> bool:
    """The ``bf16`` field's decision: forced by ``true``/``false``, by the hardware for ``auto``."""
    if setting in ("true", "false"):
        return setting == "true"
    return native_bf16(device)


def describe(setting: str, device: torch.device) -> str:
    """``"bf16 (auto: native bf16 on this cpu)"``, ``"fp32 (auto: no native bf16 on this cpu)"``, ``"fp32 (bf16 =
    false)"``: the precision and the reason, for the run's log."""
    chosen = "bf16" if use_bf16(setting, device) else "fp32"
    if setting != "auto":
        return f"{chosen} (bf16 = {setting})"
    native = "native bf16" if native_bf16(device) else "no native bf16"
    return f"{chosen} (auto: {native} on this {device.type})"
