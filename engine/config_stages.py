"""The run-config sections of the iteration's stages: sampling K plans (``[sample]``), scoring them
(``[score]``), forming pairs (``[pairs]``), grounding (``[ground]``), the critic (``[critic]``) and evaluation
(``[evaluate]``), plus where the work runs (``[vllm]``, ``[launch]``). ``engine.config`` assembles them into
``RunConfig``; each stage module reads its own section.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config_fields import setting as _f  # short: every field below is one
from engine.tasks import SPLITS

BACKENDS = ("hf", "vllm")
FORMULATIONS = ("onetime", "iterative")
GROUND_WHICH = ("best", "top_n", "best_worst", "all")


@dataclass
class SampleSection:
    k: int = _f(15, "plans sampled per task (or per planning step)", ge=2, why="a pair needs two plans")
    temperature: float = _f(1.0, "sampling temperature (0: greedy)", ge=0)
    top_p: float = _f(0.95, "nucleus sampling", gt=0, le=1)
    max_new_tokens: int = _f(128, "longest plan in tokens", ge=1)
    batch_size: int = _f(16, "prompts per generate call", ge=1)
    shared_prefill: bool = _f(True, "hf backend: run each prompt's prefill once for its K samples (KV cache shared; "
                                    "same texts for a seed); false: one plain batched generate call")
    calibrate: bool = _f(False, "hf backend: sample the stage's first batch with both kernels (same texts) and the "
                                "rest with the faster; the choice is kept per model and machine in "
                                "<run.workdir>/kernel_choices.json and reused by later runs; the choice and both "
                                "times are in the stage's counts. Off: shared_prefill decides")
    recalibrate: bool = _f(False, "with calibrate: time both kernels again (here and now, other jobs on the machine "
                                  "included) instead of reusing the choice kept for this model and machine")
    formulation: str = _f("onetime", "onetime | iterative", choices=FORMULATIONS)
    backend: str = _f("hf", "hf: transformers generate in this process | vllm: a vLLM engine on the planner "
                            "checkpoint (GPU; pip install moat-studio[vllm]; settings in [vllm])", choices=BACKENDS)


@dataclass
class ScoreSection:
    batch_size: int = _f(32, "(prompt, actions) pairs per forward pass", ge=1)
    shared_prefix: bool = _f(True, "compute each shared prompt prefix once and reuse its KV cache for the K plans "
                                   "(exact to ~1e-6); false: length-sorted padded batches")
    calibrate: bool = _f(False, "time both kernels on the stage's first chunk and score the rest with the faster "
                                "(they agree to ~1e-6); the choice is kept per model and machine in "
                                "<run.workdir>/kernel_choices.json and reused by later runs, and named in the "
                                "stage's counts. Off by default: shared_prefix decides, so a rerun on another "
                                "machine scores with the same kernel, bit for bit")
    recalibrate: bool = _f(False, "with calibrate: time both kernels again (here and now, other jobs on the machine "
                                  "included) instead of reusing the choice kept for this model and machine")


@dataclass
class PairsSection:
    rule: str = _f("best_worst", "best_worst | all_above_gap | top_bottom_k",
                   choices=("best_worst", "all_above_gap", "top_bottom_k"))
    min_gap: float = _f(0.1, "keep a pair only when rejected - chosen log-PPL >= this", ge=0)
    top_k: int = _f(2, "top_bottom_k: pairs between the k best and k worst plans", ge=1)
    max_tasks: int = _f(0, "pairs (and so DPO) from at most this many of the iteration's training tasks, a seeded "
                           "subset (0: all). The others are still sampled, scored and grounded, so stage 2 can draw "
                           "on more tasks than DPO without the planner taking more DPO steps per iteration", ge=0)


@dataclass
class GroundSection:
    temperature: float = _f(0.1, "grounder sampling temperature (0: greedy)", ge=0)
    top_p: float = _f(0.95, "nucleus sampling", gt=0, le=1)
    max_new_tokens: int = _f(192, "longest grounding in tokens", ge=1)
    batch_size: int = _f(16, "prompts per generate call", ge=1)
    which: str = _f("best", "which sampled plans are grounded and then judged by the critic: best: the lowest-PPL "
                            "plan per task-step (paper) | top_n: the ground.top_n lowest-PPL distinct plans | "
                            "best_worst: the lowest- and the highest-PPL distinct plan (the DPO pair's two ends; "
                            "the grounder also learns the plans it handles worst) | all: every distinct plan",
                  choices=GROUND_WHICH)
    top_n: int = _f(3, "top_n: distinct plans grounded (and judged) per task-step, lowest log-PPL first", ge=1)
    backend: str = _f("hf", "hf: transformers generate in this process | vllm: a vLLM engine on the grounder "
                            "checkpoint (GPU; pip install moat-studio[vllm]; settings in [vllm])", choices=BACKENDS)


@dataclass
class VLLMSection:
    gpu_memory_utilization: float = _f(0.5, "share of GPU memory vLLM may take; the in-process HF planner and "
                                            "grounder (scoring) stay loaded beside it", gt=0, le=1)
    tensor_parallel_size: int = _f(1, "GPUs one vLLM engine shards the model over", ge=1)
    max_model_len: int = _f(0, "context length vLLM reserves KV cache for (0: the model's own)", ge=0)
    enforce_eager: bool = _f(False, "skip CUDA-graph capture: faster start-up, slower decoding")


@dataclass
class LaunchSection:
    mode: str = _f("inprocess", "inprocess: train_planner/train_grounder run TRL in this process | accelerate: "
                                "each runs as an `accelerate launch` subprocess (multi-GPU, DeepSpeed, FSDP)",
                   choices=("inprocess", "accelerate"))
    accelerate_config: str = _f("examples/accelerate/single_process.yaml",
                                "accelerate: the `accelerate launch --config_file` (relative paths: from the "
                                "working directory); see examples/accelerate/")
    num_processes: int = _f(1, "accelerate: training processes (one per GPU); overrides the config file's", ge=1)
    extra_args: list[str] = _f([], "accelerate: more `accelerate launch` arguments, e.g. [\"--main_process_port\", "
                                    "\"0\"] (0: a free port, which concurrent experiment jobs need)")
    poll_s: float = _f(1.0, "accelerate: seconds between reads of the worker's log and the stop flag", gt=0)


@dataclass
class CriticSection:
    backend: str = _f("reference", "reference (gold-guided, offline) | openai | hf",
                      choices=("reference", "openai", "hf"))
    error_rate: float = _f(0.0, "reference only: the share of verdicts made wrong on purpose (a wrong grounding "
                                "accepted, or a right one 'corrected' into wrong actions), seeded per item by "
                                "run.seed: the paper's weaker-critic study", ge=0, le=1)
    base_url: str = _f("", "openai: OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    model: str = _f("", "openai/hf: model name or local path")
    api_key_env: str = _f("OPENAI_API_KEY", "openai: NAME of the environment variable holding the key")
    max_tokens: int = _f(4096, "openai/hf: completion budget (vLLM defaults to 16 without it)", ge=1)
    temperature: float = _f(0.1, "critic sampling temperature (OpenAI-compatible servers accept 0 to 2)", ge=0, le=2)
    top_p: float = _f(0.95, "critic nucleus sampling", gt=0, le=1)
    timeout_s: float = _f(120.0, "openai: per-request timeout", gt=0)
    max_retries: int = _f(4, "openai: retries on 429/5xx/timeouts, with backoff honouring Retry-After", ge=0)
    concurrency: int = _f(8, "openai: requests in flight", ge=1)
    cache: bool = _f(True, "openai: reuse a reply stored in the store's critic_cache for the same model, prompt and "
                           "sampling settings (temperature, top_p, max_tokens); false: ask the server every time, "
                           "e.g. once a misbehaving server is fixed (replies are stored all the same)")


@dataclass
class EvaluateSection:
    splits: list[str] = _f(["held_in", "held_out"], "splits evaluated after each iteration",
                           choices=SPLITS)
    formulation: str = _f("onetime", "onetime | iterative: how the agents are evaluated, set apart from "
                                     "sample.formulation (how they train); set both to evaluate agents in the layout "
                                     "they train on", choices=FORMULATIONS)
    batch_size: int = _f(32, "prompts per generate call", ge=1)
    plan_max_new_tokens: int = _f(128, "longest plan", ge=1)
    ground_max_new_tokens: int = _f(192, "longest grounding", ge=1)
    reuse: bool = _f(True, "reuse a stored evaluation of the same agents (their files hashed) on the same tasks with "
                           "the same settings, software, torch threads and hardware (<run.workdir>/eval_cache, "
                           "engine.eval_cache): every run of an experiment evaluates the same starting agents at "
                           "iteration 0; false: evaluate every time")
