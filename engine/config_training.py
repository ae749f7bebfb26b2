"""The training sections of a run config: what every trainer run shares (``TrainSettings``) and each objective's own
settings -- DPO of the planner (``[dpo]``), GRPO of the planner (``[grpo]``) or of the grounder
(``[grpo_grounder]``), and the grounder's SFT with its original-data mix (``[sft]``). ``engine.config`` assembles
them into ``RunConfig``; ``engine.training`` hands them to TRL.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config_fields import BF16, SEED_MAX, Bf16
from engine.config_fields import setting as _f  # short: every field below is one

REWARD_NAMES = ("gap", "execution", "format", "overlong")  # engine.rewards.REWARDS
# The planner rewards that read the grounder (gap scores with it, execution grounds the plan with it): the GRPO
# planner stage loads it only for these (engine.stages.train_grpo), and preflight checks it only then.
GROUNDER_READERS = frozenset({"gap", "execution"})
GROUNDER_REWARD_NAMES = ("execution", "format", "overlong")  # engine.rewards.GROUNDER_REWARDS
# transformers' reporting integrations (its INTEGRATION_TO_CALLBACK; a test keeps the two lists equal), "none" and
# "all". Only one name: transformers reads a string as a single integration, so "tensorboard,wandb" would fail when
# the stage's trainer starts, maybe hours into a run.
REPORT_TO = ("none", "all", "azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte", "kubeflow",
             "mlflow", "neptune", "swanlab", "tensorboard", "trackio", "wandb")


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
    bf16: Bf16 = _f("auto", "auto: bf16 only where the hardware computes it natively (a CUDA GPU with bf16, a CPU "
                            "with AVX512-BF16 or AMX), else fp32 (engine/precision.py) | true | false", choices=BF16)
    activation_checkpointing: bool = _f(False, "recompute activations to save memory (~35% slower when small)")
    loss_tokens_only: bool = _f(False, "compute TRL's per-token log-probs only where the loss reads them (the "
                                       "completion's tokens), as TRL does on GPUs with Triton; elsewhere (a CPU) it "
                                       "scores every position, prompt and padding included. Same loss up to float "
                                       "rounding; demo SFT steps 1.25-1.35x faster on a CPU (bench warm_start). "
                                       "false: TRL's own path, which the published demo results were trained with")
    seed: int = _f(0, "trainer seed", ge=0, le=SEED_MAX)
    logging_steps: int = _f(1, "log every n optimizer steps (each log line is stored)", ge=1)
    warmup_steps: float = _f(0.0, "int: warmup steps; float in [0, 1): fraction of all steps", ge=0)
    lr_scheduler: str = _f("linear", "learning-rate schedule after warm-up (transformers' lr_scheduler_type)",
                           choices=("linear", "cosine", "constant_with_warmup"))
    report_to: str = _f("none", "where the trainer also logs (transformers' report_to): none, all (every "
                                "integration installed), or one of them, e.g. tensorboard, wandb, trackio, mlflow; "
                                "its package must be installed (checked before the run starts)", choices=REPORT_TO)


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
    max_length: int = _f(512, "not used by GRPO: TRL's GRPOTrainer has no total or prompt length, so the rollouts "
                              "are bounded by max_completion_length and the prompts are not truncated; any other "
                              "value is refused", ge=1)
    temperature: float = _f(1.0, "sampling temperature of the rollouts", gt=0)
    top_p: float = _f(0.95, "nucleus sampling of the rollouts", gt=0, le=1)
    beta: float = _f(0.0, "KL coefficient against the role's model at the start of the iteration (the planner's "
                          "for [grpo], the grounder's for [grpo_grounder]); 0: no KL term and no reference model in "
                          "memory (PilotRL, DAPO)", ge=0)
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
class SFTSection(TrainSettings):
    original_ratio: float = _f(-1.0, "-1: all of the grounder's original data (paper) | r >= 0: round(r x new rows) "
                                     "original rows drawn at random (at most all of them)", ge=-1)
    original_data: str = _f("", "Task JSONL whose gold plans/actions are the grounder's original data "
                                "(empty: the run's training tasks, or with data.exclude_tasks the "
                                "train tasks it lists: the warm start's data)")
    micro_batches: int = _f(1, "cut each batch of batch_size rows into this many micro-batches of similar length "
                               "whose gradients accumulate: the same step up to float rounding, with less padding "
                               "(which a CPU computes like real tokens; demo-models' default is 4). Must divide "
                               "batch_size. 1: the batches as drawn (TRL's own path)", ge=1)
