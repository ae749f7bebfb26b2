"""The ``vllm`` generation backend: a vLLM engine on a checkpoint directory, same contract as ``generation.generate``.

Chosen with ``sample.backend = "vllm"`` / ``ground.backend = "vllm"``; this module is imported only then, and vLLM
itself only inside ``VLLMGenerator`` (``pip install moat-studio[vllm]``, a CUDA GPU). Contract, shared with
``engine.generators.HFGenerator``:

- ``VLLMGenerator(path, dtype=..., tokenizer=..., options=...)`` loads the checkpoint (full weights; LoRA adapters
  are refused by config validation) into a ``vllm.LLM``; ``dtype="auto"`` is bfloat16 on a GPU that computes it
  natively (``engine.precision.native_bf16``: compute capability 8.0 on), else float16, which vLLM asks for there;
- ``.generate(prompts, GenerationConfig, seed) -> list[list[str]]``: per prompt, ``num_return_sequences``
  continuations, special tokens removed, stripped, in prompt order; ``temperature == 0`` is greedy;
- ``.close()`` shuts the engine down and frees its GPU memory (the training stages need it next).

Prompts are tokenized by the agent's HF tokenizer without special tokens and handed to vLLM as token ids, exactly
as the HF backend feeds them (vLLM would otherwise add a BOS to the already-rendered chat text). Each prompt gets
its own seed (``seed + index``) so that identical prompts still draw different samples, as they do with HF.
Sampling is the same distribution as HF's (temperature, top-p, no top-k) but not the same random stream: outputs
match HF's only for greedy decoding, up to kernel rounding. Generation stops at the same tokens as with HF
(``engine.generation.stop_token_ids``: EOS and the chat template's end-of-turn markers).
"""

from __future__ import annotations

import gc
import importlib.util
from collections.abc import Sequence
from typing import Any

import torch

from engine.errors import ConfigError
from engine.generation import GenerationConfig, stop_token_ids
from engine.precision import native_bf16

INSTALL_HINT = "pip install moat-studio[vllm]"


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def require_vllm_installed(field: str, where: str = "") -> None:
    """A ``ConfigError`` naming the config field that asked for vLLM (``where``: a phase) and how to install it, when
    the package is not there; preflight calls it before a run starts."""
    if not vllm_available():
        raise ConfigError(field, f"'vllm'{where} needs the vLLM package, which is not installed: {INSTALL_HINT} "
                                 "(CUDA GPU required), or set it to 'hf'")


def require_vllm(field: str) -> Any:
    """Import vLLM, or raise ``require_vllm_installed``'s ``ConfigError``."""
    require_vllm_installed(field)
    import vllm

    return vllm


def _vllm_dtype(dtype: str) -> str:
    """The ``dtype`` handed to vLLM for the agent's ``dtype`` field; ``auto`` is decided here, not by vLLM (whose own
    ``auto`` would pick fp16 for fp32 checkpoints)."""
    if dtype != "auto":
        return dtype
    if not torch.cuda.is_available():  # not the GPU this backend is for: left as it was, for vLLM to judge
        return "bfloat16"
    # bf16 where the GPU computes it natively, as the HF backend loads weights (engine.models.resolve_dtype). Before
    # Ampere vLLM refuses bf16 and asks for float16; the HF backend's fp32 there would halve the cache vLLM can page.
    return "bfloat16" if native_bf16(torch.device("cuda")) else "float16"


class VLLMGenerator:
    """One vLLM engine on ``path``; see the module docstring for the contract."""

    def __init__(self, path: str, *, dtype: str = "auto", tokenizer: Any = None, field: str = "sample.backend",
                 options: Any = None, seed: int = 0):
        vllm = require_vllm(field)
        if tokenizer is None:
            from engine.models import load_tokenizer

            tokenizer = load_tokenizer(path)
        self.tokenizer = tokenizer
        kwargs: dict[str, Any] = dict(model=str(path), tokenizer=str(path), dtype=_vllm_dtype(dtype), seed=seed,
                                      enable_prefix_caching=True)  # the K samples / a task's plans share prefixes
        if options is not None:
            kwargs.update(gpu_memory_utilization=options.gpu_memory_utilization,
                          tensor_parallel_size=options.tensor_parallel_size, enforce_eager=options.enforce_eager)
            if options.max_model_len:
                kwargs["max_model_len"] = options.max_model_len
        self.llm = vllm.LLM(**kwargs)

    def sampling_params(self, config: GenerationConfig, seed: int | None) -> Any:
        from vllm import SamplingParams

        greedy = config.temperature <= 0
        # top_k=-1: no top-k cut, like the HF backend's top_k=0.
        return SamplingParams(n=config.num_return_sequences, temperature=0.0 if greedy else config.temperature,
                              top_p=1.0 if greedy else config.top_p, top_k=-1, max_tokens=config.max_new_tokens,
                              seed=seed, skip_special_tokens=True,
                              stop_token_ids=stop_token_ids(None, self.tokenizer))

    def generate(self, prompts: Sequence[str], config: GenerationConfig, seed: int | None = None) -> list[list[str]]:
        if self.llm is None:
            raise RuntimeError("VLLMGenerator used after close()")
        if not prompts:
            return []
        requests = [{"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts]
        params = [self.sampling_params(config, None if seed is None else seed + i) for i in range(len(prompts))]
        # vLLM schedules all requests itself (continuous batching): config.batch_size does not apply here.
        results = self.llm.generate(requests, params, use_tqdm=False)
        return [[c.text.strip() for c in sorted(r.outputs, key=lambda c: c.index)] for r in results]

    def close(self) -> None:
        """Shut the engine down and return its GPU memory; safe to call twice."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()  # V1 runs the model in a separate process: stop it now, not at GC time
        del llm
        try:
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception:  # best effort: vLLM versions move these; a leak beats a crash at stage end
            pass
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def __enter__(self) -> VLLMGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
