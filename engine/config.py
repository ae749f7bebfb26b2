"""Run configuration: dataclasses with help text, loaded from TOML or YAML, overridden with ``section.field=value``.

``load_config(path, overrides)`` returns a validated ``RunConfig``; every problem raises ``ConfigError`` naming the
field (``sample.k: must be >= 2``) and the file: an unknown section or field (with the closest known name
suggested), a value of the wrong type, a non-finite number, or a value outside the field's range. Each field
declares its range and choices next to its default (``_f(..., ge=1)``, ``choices=...``); the checks themselves, and
the few rules that tie several fields together, live in ``engine.config_checks``. ``config_to_dict`` /
``config_from_dict`` round-trip the snapshot stored with each run. Defaults follow the paper's released code unless
a field says otherwise.

Secrets never enter a config: the snapshot is stored with the run (``runs.config``) and shown in the studio. A key
field (``critic.api_key``, ``token``, ``password``, ...), a value that looks like a key (``sk-...``, ``hf_...``, a
URL with a password) or an ``*_api_key_env`` that is not a variable name raises ``ConfigError`` pointing at
``api_key_env`` (the NAME of the environment variable holding the key); such messages never echo the value.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config_checks import KEY_FIELD, KEY_VALUE, USE_KEY_ENV, coerce, suggest, validate
from engine.errors import ConfigError
from engine.tasks import SPLITS


def _f(default: Any, help: str, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
       lt: float | None = None, choices: tuple[str, ...] | None = None, why: str = "") -> Any:
    """A dataclass field carrying its help text and what values it accepts.

    ``ge``/``gt``/``le``/``lt`` bound a number; ``choices`` lists the allowed strings (for a list field: the allowed
    items); ``why`` is added to the range error. ``engine.config_checks.validate`` reads them, the studio's config
    editor shows ``help``.
    """
    meta = {"help": help, "ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "why": why}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


SEED_MAX = 2**32 - 1  # numpy's seed range; torch and random accept it too
BF16 = ("auto", "true", "false")
BACKENDS = ("hf", "vllm")
FORMULATIONS = ("onetime", "iterative")
GROUND_WHICH = ("best", "top_n", "best_worst", "all")
GROUNDER_DATA = ("critic", "raw", "executed")
PLANNER_OBJECTIVES = ("dpo", "grpo")
GROUNDER_OBJECTIVES = ("sft", "grpo")
TOPOLOGIES = ("separate", "shared")
REWARD_NAMES = ("gap", "execution", "format", "overlong")  # engine.rewards.REWARDS
GROUNDER_REWARD_NAMES = ("execution", "format", "overlong")  # engine.rewards.GROUNDER_REWARDS
# The stages of a MOAT iteration, in order (engine.loop.STAGES runs them; a phase of [schedule] lists a subset).
ITERATION_STAGES = ("sample", "score", "pairs", "train_planner", "ground", "critique", "train_grounder", "evaluate")


@dataclass
class TrainSettings:
    learning_rate: float = _f(2e-5, "peak learning rate (paper: SFT 2e-5)", gt=0, le=1)
    epochs: float = _f(1.0, "passes over the rows (ignored when max_steps > 0)", gt=0)
    max_steps: int = _f(-1, "> 0 caps the number of optimizer steps (-1 or 0: use epochs)", ge=-1)
    batch_size: int = _f(8, "rows per device per step", ge=1)
    grad_accum: int = _f(1, "gradient accumulation steps", ge=1)
    max_length: int = _f(512, "tokens per row (prompt + completion); longer rows are truncated by TRL", ge=1)
    lora: bool = _f(False, "train a LoRA adapter instead of all weights")
    save_adapter: bool = _f(True, "LoRA: the iteration's checkpoint is the adapter alone (MBs, not a full copy); the "
                                  "next stage loads the starting model and merges the adapters in order; `python -m "
                                  "engine merge` writes merged weights. false: merge and save full weights")
    lora_r: int = _f(16, "LoRA rank", ge=1)
    lora_alpha: int = _f(32, "LoRA alpha", ge=1)
    lora_dropout: float = _f(0.0, "LoRA dropout", ge=0, lt=1)
    lora_target_modules: list[str] = _f(["q_proj", "k_proj", "v_proj", "o_proj"], "modules LoRA adapts")
    bf16: str = _f("auto", "auto: bf16 only where the hardware computes it natively (a CUDA GPU with bf16, a CPU "
                           "with AVX512-BF16 or AMX), else fp32 (engine/precision.py) | true | false", choices=BF16)
    activation_checkpointing: bool = _f(False, "recompute activations to save memory (~35% slower when small)")
    seed: int = _f(0, "trainer seed", ge=0, le=SEED_MAX)
    logging_steps: int = _f(1, "log every n optimizer steps (each log line is stored)", ge=1)
    warmup_steps: float = _f(0.0, "int: warmup steps; float in [0, 1): fraction of all steps", ge=0)
    lr_scheduler: str = _f("linear", "learning-rate schedule after warm-up (transformers' lr_scheduler_type)",
                           choices=("linear", "cosine", "constant_with_warmup"))
    report_to: str = _f("none", "TRL report_to: none | wandb | trackio | tensorboard")


@dataclass
class DPOSettings(TrainSettings):
    learning_rate: float = _f(4e-7, "peak learning rate (paper: 4e-7 for 7B planners)", gt=0, le=1)
    beta: float = _f(0.2, "DPO temperature beta (paper: 0.2)", gt=0)
    loss_type: str = _f("sigmoid", "TRL DPO loss type")
    sft_weight: float = _f(0.0, "weight of an NLL term on the chosen plan added to the DPO loss (TRL loss_type "
                                "'sft'; RPO, Pang et al. 2024: keeps iterated DPO from lowering the chosen plans' "
                                "likelihood); 0: plain DPO", ge=0)
    ld_alpha: float = _f(1.0, "LD-DPO (TRL ld_alpha): weight of the log-probabilities of tokens past the shorter "
                              "plan's length; below 1 the longer plan's extra tokens count less, so DPO cannot "
                              "prefer plans for being longer; 1: plain DPO", ge=0, le=1)
    reference: str = _f("previous", "previous: the iteration's starting planner | initial: the warm-start planner",
                        choices=("previous", "initial"))
    precompute_ref_log_probs: bool = _f(False, "compute reference log-probs once up front (no reference in memory)")


@dataclass
class GRPOSettings(TrainSettings):
    """Online group RL of the planner with TRL's GRPOTrainer (``stages.planner_objective = grpo``): the trainer
    samples ``num_generations`` plans per training task and learns from their rewards (engine/rewards.py)."""

    learning_rate: float = _f(1e-6, "peak learning rate (TRL's GRPO default; tiny demo models need far more)", gt=0,
                              le=1)
    batch_size: int = _f(8, "completions per device per step: a multiple of num_generations (8 = one task's "
                            "group per step)", ge=1)
    num_generations: int = _f(8, "rollouts (plans) per task: one group, whose rewards set each other's advantage",
                              ge=2)
    max_completion_length: int = _f(96, "tokens per rollout", ge=1)
    temperature: float = _f(1.0, "sampling temperature of the rollouts", gt=0)
    top_p: float = _f(0.95, "nucleus sampling of the rollouts", gt=0, le=1)
    beta: float = _f(0.0, "KL coefficient against the iteration's starting planner; 0: no KL term and no reference "
                          "model in memory (PilotRL, DAPO)", ge=0)
    epsilon: float = _f(0.2, "lower clip range of the probability ratio", gt=0)
    epsilon_high: float = _f(0.2, "upper clip range (DAPO's clip-higher: 0.28)", gt=0)
    loss_type: str = _f("dapo", "TRL's token aggregation: dapo (default, no length bias) | grpo | dr_grpo | bnpo",
                        choices=("dapo", "grpo", "dr_grpo", "bnpo"))
    scale_rewards: str = _f("group", "advantage = (reward - group mean) / std of the group | batch | none (Dr. GRPO)",
                            choices=("group", "batch", "none"))
    mask_truncated: bool = _f(False, "leave rollouts cut at max_completion_length out of the loss (DAPO)")
    rewards: list[str] = _f(["gap", "execution", "format"], "named rewards, summed with their weights: gap (minus "
                            "the grounder's log-PPL of the gold actions given the plan: MOAT's signal, online) | "
                            "execution (1 when the grounded plan reaches the gold answer) | format (1 when the plan "
                            "parses) | overlong (DAPO's soft length penalty, needs overlong_cache > 0)",
                            choices=REWARD_NAMES)
    weight_gap: float = _f(1.0, "weight of the gap reward", ge=0)
    weight_execution: float = _f(1.0, "weight of the execution reward", ge=0)
    weight_format: float = _f(0.5, "weight of the format reward", ge=0)
    weight_overlong: float = _f(1.0, "weight of the overlong reward", ge=0)
    overlong_cache: int = _f(0, "overlong reward: the penalty ramps over the last N tokens before "
                                "max_completion_length (DAPO); 0: no ramp", ge=0)


@dataclass
class GrounderGRPOSettings(GRPOSettings):
    """Online group RL of the grounder (``stages.grounder_objective = grpo``): the trainer samples
    ``num_generations`` action sequences per plan the ground stage grounded, rewarded by the named rewards."""

    num_generations: int = _f(8, "rollouts (action sequences) per plan: one group", ge=2)
    max_completion_length: int = _f(160, "tokens per rollout", ge=1)
    rewards: list[str] = _f(["execution", "format"], "named rewards of an action sequence, summed with their "
                            "weights: execution (1 when it executes to the gold answer) | format (1 when every "
                            "action parses) | overlong (DAPO's soft length penalty, needs overlong_cache > 0)",
                            choices=GROUNDER_REWARD_NAMES)


@dataclass
class RunSection:
    name: str = _f("run", "a readable name for the run")
    workdir: str = _f("runs", "directory under which each run keeps its checkpoints")
    seed: int = _f(0, "seed for sampling, data order and training", ge=0, le=SEED_MAX)
    iterations: int = _f(2, "MOAT iterations to run", ge=1)


DATA_FORMATS = ("tasks", "lumos", "gsm8k", "svamp", "hotpotqa", "strategyqa")


@dataclass
class DataSource:
    """One file of a run's tasks (a ``[[data.sources]]`` table)."""

    path: str = _f("", "the file: JSON lines (SVAMP also as its one JSON array)")
    format: str = _f("tasks", "tasks | lumos | gsm8k | svamp | hotpotqa | strategyqa", choices=DATA_FORMATS)
    split: str = _f("", "the split its tasks get: train | dev | held_in | held_out (empty: the format's default, "
                        "train for lumos, held_in for a benchmark; a tasks file keeps each record's own split)",
                    choices=("", *SPLITS))
    ground: str = _f("", "lumos only: the grounder file joined by id with this planner file")


@dataclass
class DataSection:
    tasks: str = _f("examples/demo/tasks.jsonl", "task file (format below); unused when data.sources is given")
    format: str = _f("tasks", "tasks | lumos | gsm8k | svamp | hotpotqa | strategyqa", choices=DATA_FORMATS)
    ground: str = _f("", "lumos only: the grounder file joined by id with the planner file")
    sources: list[DataSource] = _f([], "several files, each with its format and split ([[data.sources]] tables: "
                                       "path, format, split, ground), e.g. Lumos training files plus benchmark "
                                       "test files; when given they replace data.tasks/format/ground")
    domains: list[str] = _f([], "keep only these domains (empty: all)", choices=("maths", "qa", "web"))
    train_limit: int = _f(0, "training tasks used per iteration (0: all)", ge=0)
    eval_limit: int = _f(0, "tasks per evaluation split (0: all); a limited sample is drawn with data.eval_seed, "
                            "never run.seed, so every run and seed of a config is evaluated on the same tasks", ge=0)
    eval_seed: int = _f(0, "seed of the evaluation sample when data.eval_limit > 0 (fixed across runs)", ge=0,
                        le=SEED_MAX)


@dataclass
class AgentSection:
    path: str = _f("", "local model directory or hub id")
    adapter: str = _f("", "optional LoRA adapter directory applied on top")
    dtype: str = _f("auto", "auto | float32 | bfloat16 | float16 (auto: bf16 on a CUDA GPU with bf16, else fp32)",
                    choices=("auto", "float32", "bfloat16", "float16"))
    device: str = _f("auto", "auto | cpu | cuda | cuda:N | map (accelerate's device_map='auto': a model too large for "
                             "one GPU is spread over every GPU, then the CPU)")
    chat_template: str = _f("lumos", "lumos: <|user|>/<|assistant|> layout | tokenizer: the tokenizer's template",
                            choices=("lumos", "tokenizer"))


@dataclass
class AgentsSection:
    topology: str = _f("separate", "separate: the planner and the grounder are two models (MOAT) | shared: one base "
                                   "model in both roles (planner.path = grounder.path), one copy in memory: with "
                                   "dpo/grpo.lora and sft.lora on, each role a chain of LoRA adapters on it; with "
                                   "both off, one set of weights trained on both roles' data in turn",
                       choices=TOPOLOGIES)


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
                                    "\"29501\"]")
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


@dataclass
class EvaluateSection:
    splits: list[str] = _f(["held_in", "held_out"], "splits evaluated after each iteration",
                           choices=SPLITS)
    formulation: str = _f("onetime", "onetime | iterative", choices=FORMULATIONS)
    batch_size: int = _f(32, "prompts per generate call", ge=1)
    plan_max_new_tokens: int = _f(128, "longest plan", ge=1)
    ground_max_new_tokens: int = _f(192, "longest grounding", ge=1)


@dataclass
class ToolsSection:
    qa_base_url: str = _f("", "QA tool: OpenAI-compatible endpoint answering QA(...) actions (empty: extractive "
                              "fallback, labelled as such)")
    qa_model: str = _f("", "QA tool: model name at qa_base_url")
    qa_api_key_env: str = _f("OPENAI_API_KEY", "QA tool: NAME of the environment variable holding the key")
    corpus: str = _f("", "KnowledgeQuery/ParagraphRetrieve: a JSONL passage file ({\"title\", \"text\"} per line) for "
                         "tasks without context of their own (StrategyQA, HotpotQA without context); empty: such "
                         "an action fails with 'no corpus'")


@dataclass
class WarmStartSection:
    enabled: bool = _f(False, "iteration 0 first trains the configured models by SFT on the training tasks' gold "
                              "plans (planner) and gold actions (grounder), as the paper starts MOAT from Lumos-"
                              "trained agents, and evaluates those; other training settings come from [sft]")
    planner_epochs: float = _f(2.0, "planner warm-start epochs", gt=0)
    planner_learning_rate: float = _f(2e-5, "planner warm-start peak learning rate (Lumos: 2e-5)", gt=0, le=1)
    grounder_epochs: float = _f(2.0, "grounder warm-start epochs", gt=0)
    grounder_learning_rate: float = _f(2e-5, "grounder warm-start peak learning rate (Lumos: 2e-5)", gt=0, le=1)


@dataclass
class StagesSection:
    stage1: bool = _f(True, "planner alignment (sample, score, pairs, DPO); false = the 'no stage 1' ablation")
    stage2: bool = _f(True, "grounder improvement (ground, critique, SFT); false = the 'no stage 2' ablation")
    grounder_data: str = _f("critic", "what stage 2 trains the grounder on: critic: the critic's accepted and "
                                      "corrected groundings (paper) | raw: the grounder's own groundings of the "
                                      "same plans, unchecked (the paper's 'w/o critic') | executed: only those that "
                                      "executed to the gold answer (an oracle execution filter)",
                            choices=GROUNDER_DATA)
    evaluate_initial: bool = _f(True, "evaluate the starting agents as iteration 0 before training")
    planner_objective: str = _f("dpo", "how stage 1 trains the planner: dpo (MOAT: offline pairs ranked by the "
                                       "grounder's PPL) | grpo (online group RL, [grpo]: rollouts scored by named "
                                       "rewards, the PPL signal among them)", choices=PLANNER_OBJECTIVES)
    grounder_objective: str = _f("sft", "how stage 2 trains the grounder: sft (MOAT: on the critic's verdicts, "
                                        "[sft]) | grpo (online group RL on the grounded plans, [grpo_grounder]: "
                                        "action sequences rewarded by execution and format)",
                                 choices=GROUNDER_OBJECTIVES)


@dataclass
class Phase:
    """One phase of a curriculum (a ``[[schedule.phases]]`` table): some iterations running some stages, with
    settings of their own."""

    name: str = _f("", "the phase's name, shown in the log and the studio (required, unique)")
    iterations: int = _f(1, "iterations this phase runs", ge=1)
    stages: list[str] = _f(list(ITERATION_STAGES), "the stages each of its iterations runs, in the loop's order "
                                                   "(the others are skipped, saying so); e.g. an executor-first "
                                                   "phase: sample, score, ground, critique, train_grounder, evaluate",
                           choices=ITERATION_STAGES)
    set: list[str] = _f([], "section.field=value settings for this phase only (sample, score, pairs, dpo, grpo, "
                            "ground, critic, sft, stages.planner_objective / grounder_data), e.g. "
                            "[\"sft.epochs=2\", \"ground.which=all\"]")


@dataclass
class ScheduleSection:
    phases: list[Phase] = _f([], "a curriculum: [[schedule.phases]] tables run in order, each for its iterations; "
                                 "iterations past the last phase repeat it (run.iterations defaults to their sum). "
                                 "Empty: every iteration is the MOAT iteration (engine.schedule)")


@dataclass
class SFTSection(TrainSettings):
    original_ratio: float = _f(-1.0, "-1: all of the grounder's original data (paper) | r >= 0: round(r x new rows) "
                                     "original rows drawn at random (at most all of them)", ge=-1)
    original_data: str = _f("", "Task JSONL whose gold plans/actions are the grounder's original data "
                                "(empty: the run's training tasks)")


@dataclass
class RunConfig:
    run: RunSection = field(default_factory=RunSection)
    data: DataSection = field(default_factory=DataSection)
    planner: AgentSection = field(default_factory=lambda: AgentSection(path="assets/demo/planner"))
    grounder: AgentSection = field(default_factory=lambda: AgentSection(path="assets/demo/grounder"))
    agents: AgentsSection = field(default_factory=AgentsSection)
    sample: SampleSection = field(default_factory=SampleSection)
    score: ScoreSection = field(default_factory=ScoreSection)
    pairs: PairsSection = field(default_factory=PairsSection)
    dpo: DPOSettings = field(default_factory=DPOSettings)
    grpo: GRPOSettings = field(default_factory=GRPOSettings)
    grpo_grounder: GrounderGRPOSettings = field(default_factory=GrounderGRPOSettings)
    ground: GroundSection = field(default_factory=GroundSection)
    critic: CriticSection = field(default_factory=CriticSection)
    sft: SFTSection = field(default_factory=SFTSection)
    evaluate: EvaluateSection = field(default_factory=EvaluateSection)
    tools: ToolsSection = field(default_factory=ToolsSection)
    warm_start: WarmStartSection = field(default_factory=WarmStartSection)
    stages: StagesSection = field(default_factory=StagesSection)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    vllm: VLLMSection = field(default_factory=VLLMSection)
    launch: LaunchSection = field(default_factory=LaunchSection)


# Fields that moved, for configs (and stored run snapshots) written before the move: old dotted name -> a function
# of (its value, the section tables) that writes the new field(s). Applied before validation, so a bad old value is
# still reported by the new field's checks.
def _legacy_critic_which(value: Any, data: dict[str, Any]) -> None:
    # Before: ground.which chose what was grounded (default all), critic.which what was judged (default best). Now
    # ground.which chooses both (only what is judged is grounded); the judged set is what the old run trained on.
    if value == "best" or "which" not in data.get("ground", {}):
        data.setdefault("ground", {})["which"] = value


def _legacy_stages_critic(value: Any, data: dict[str, Any]) -> None:
    # Before: stages.critic = false trained the grounder on the groundings that executed to the gold answer.
    on = str(value).lower() in ("true", "1", "yes")
    data.setdefault("stages", {}).setdefault("grounder_data", "critic" if on else "executed")


LEGACY_FIELDS = {"critic.which": _legacy_critic_which, "stages.critic": _legacy_stages_critic}


def _upgrade_legacy(data: dict[str, Any]) -> dict[str, Any]:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for dotted, move in LEGACY_FIELDS.items():
        section, name = dotted.split(".")
        if isinstance(data.get(section), dict) and name in data[section]:
            move(data[section].pop(name), data)
    return data


def config_from_dict(data: dict[str, Any], source: str | None = None) -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError("<root>", "expected a table of sections", source)
    data = _upgrade_legacy(data)
    config = RunConfig()
    sections = {f.name: f for f in dataclasses.fields(RunConfig)}
    for section_name, values in data.items():
        if section_name not in sections:
            raise ConfigError(str(section_name), f"unknown section{suggest(section_name, sections)} "
                                                 f"(known: {', '.join(sections)})", source)
        if not isinstance(values, dict):
            raise ConfigError(section_name, "expected a table of fields", source)
        section = getattr(config, section_name)
        hints = typing.get_type_hints(type(section))
        known = {f.name for f in dataclasses.fields(section)}
        for name, value in values.items():
            dotted = f"{section_name}.{name}"
            if name not in known:
                if KEY_FIELD.search(name):
                    raise ConfigError(dotted, USE_KEY_ENV, source)
                raise ConfigError(dotted, f"unknown field{suggest(name, known)} (known: {', '.join(sorted(known))})",
                                  source)
            setattr(section, name, coerce(value, hints[name], dotted, source))
    if config.schedule.phases and "iterations" not in data.get("run", {}):
        config.run.iterations = sum(phase.iterations for phase in config.schedule.phases)
    validate(config, source)
    return config


def config_to_dict(config: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_to_toml(config: RunConfig) -> str:
    """The whole config as TOML that ``load_config`` reads back to an equal config (every value is a string, a finite
    number, a bool or a list of strings, and JSON spells each of those the way TOML does)."""
    def value_lines(fields: dict[str, Any]) -> list[str]:
        return [f"{name} = {json.dumps(value, ensure_ascii=False, allow_nan=False)}" for name, value in fields.items()]

    lines = []
    for section, fields in config_to_dict(config).items():
        tables = {n: v for n, v in fields.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
        lines.append(f"[{section}]")
        lines += value_lines({n: v for n, v in fields.items() if n not in tables})
        lines.append("")
        for name, items in tables.items():  # arrays of tables come after the section's own keys (TOML)
            for item in items:
                lines += [f"[[{section}.{name}]]", *value_lines(item), ""]
    return "\n".join(lines)


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """``["sample.k=8", "data.train_limit=32"]`` -> ``{"sample": {"k": "8"}, "data": {"train_limit": "32"}}``."""
    merged: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            shown = "<hidden: looks like a key>" if KEY_VALUE.search(item) else item
            raise ConfigError(shown, "expected section.field=value", "--set")
        section, name = key.strip().split(".", 1)
        merged.setdefault(section, {})[name] = value.strip()
    return merged


def read_config_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM from a Windows editor is not an error
    except UnicodeDecodeError as exc:
        raise ConfigError("<file>", f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})",
                          str(path)) from None
    except OSError as exc:
        raise ConfigError("<file>", f"cannot read: {exc.strerror}", str(path)) from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError("<yaml>", str(exc).replace("\n", " "), str(path)) from None
        return data
    import tomllib  # Python >= 3.11 (pyproject's requires-python)

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("<toml>", str(exc), str(path)) from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict[str, Any] | None = None) -> RunConfig:
    """A validated config from a file (or ``base``), with ``--set`` overrides applied on top."""
    data: dict[str, Any] = json.loads(json.dumps(base)) if base else {}
    if path is not None:
        if not Path(path).exists():
            raise ConfigError("<file>", "config file not found", str(path))
        data = read_config_file(path)
    for section, values in parse_overrides(overrides or []).items():
        data.setdefault(section, {}).update(values)
    return config_from_dict(data, str(path) if path else None)


def field_help() -> dict[str, str]:
    """``{"sample.k": "plans sampled per task ..."}`` for every field that carries help text."""
    out = {}
    for section in dataclasses.fields(RunConfig):
        for f in dataclasses.fields(section.default_factory()):
            out[f"{section.name}.{f.name}"] = f.metadata.get("help", "")
    return out
