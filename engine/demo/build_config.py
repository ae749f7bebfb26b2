"""The demo-agent build's settings and their checks: ``AgentBuildConfig`` (every field a ``demo-models --flag`` with
its help and range), ``check_build_config`` (refuses, before anything is written, a config the builder would reject
partway or silently misread), ``build_roles`` and ``BuildConfigError`` (its ``field`` names the flag).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from engine.config_fields import BF16
from engine.config_fields import setting as _f
from engine.config_values import range_text
from engine.demo import world

ROLES = ("planner", "grounder")
# transformers seeds numpy with the training seed, and numpy takes 0 .. 2**32 - 1 only (a traceback after the
# tokenizer was trained).
MAX_SEED = 2**32 - 1
# TrainSettings reads max_steps <= 0 as "train by epochs": a 0-step build trained a whole epoch instead of none.
STEPS_WHY = "0 or less would train by epochs instead"


class BuildConfigError(ValueError):
    """A bad ``AgentBuildConfig`` value; ``field`` names it, so ``demo-models`` can name the flag."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


@dataclass
class AgentBuildConfig:
    """How ``demo-models`` builds the demo agents (each field is a ``demo-models --flag`` with this help)."""

    seed: int = _f(0, "seed of the model initialisation, the warm-start style draws and the training order",
                   ge=0, le=MAX_SEED)
    hidden_size: int = _f(256, "Llama width; 256 x 4 layers is ~3.9M parameters with this vocabulary", ge=1)
    layers: int = _f(4, "decoder layers", ge=1)
    heads: int = _f(4, "attention heads (as many key/value heads); hidden_size / heads must be a whole, even number",
                   ge=1)
    intermediate_size: int = _f(768, "MLP width", ge=1)
    max_positions: int = _f(512, "longest prompt + completion, in tokens", ge=1)
    vocab_size: int = _f(2048, "BPE vocabulary target; merges stop earlier when the demo text runs out of pairs",
                       ge=1)
    planner_steps: int = _f(400, "planner warm-start SFT optimizer steps (two plan draws per task: ~1.8 epochs)",
                          ge=1, why=STEPS_WHY)
    grounder_steps: int = _f(800, "grounder warm-start SFT steps (~7 epochs of its concrete-plan data: the tiny "
                                  "grounder learns to copy numbers and names only after ~600)", ge=1, why=STEPS_WHY)
    batch_size: int = _f(32, "warm-start SFT batch size", ge=1)
    learning_rate: float = _f(2e-3, "warm-start SFT learning rate (tiny models from scratch want a large one)",
                               gt=0, le=1)
    max_train_tasks: int = _f(0, "train on a random sample of this many train tasks (0: every train task)",
                          ge=0)
    joint_steps: int = _f(600, "--joint-from: SFT steps on both roles' rows (~1.8 epochs of the mix)", ge=1,
                        why=STEPS_WHY)
    planner_styles: str = _f(world.format_plan_styles(),
                             "the planner's warm-start plan styles as style=weight,... (concrete, explicit, vague, "
                             "paraphrased, mixed, flawed; mixed and flawed are built from the renderings named). "
                             "Without concrete, the planner never writes the grounder's own wording of the steps "
                             "it paraphrases: stage 1 can then only move it to the best wording it has, and the rest "
                             "of the gap is stage 2's to close. The first demo planner's mix was "
                             + world.format_plan_styles(world.FIRST_PLAN_STYLES))
    roles: str = _f("planner,grounder", "which agents to train, comma-separated; building one needs "
                                        "tokenizer_from, so it shares its partner's token ids")
    name_pieces: bool = _f(False, "cut the QA world's invented names into their syllables before BPE (one common "
                                  "token each, as digits are split) instead of learning one rare token per name: "
                                  "copying a new name from the question is then copying familiar tokens")
    tokenizer_from: str = _f("", "reuse this agent directory's tokenizer instead of training one (e.g. "
                                 "assets/demo/grounder when rebuilding only the planner)")
    group_by_length: bool = _f(False, "draw each warm-start batch from rows of similar length (transformers' "
                                      "group_by_length sampler) instead of at random: less padding, but a batch "
                                      "is no longer a random draw and the loss falls more slowly (bench "
                                      "warm_start); needs --micro-batches 1")
    micro_batches: int = _f(4, "cut each random batch into this many micro-batches of rows of similar length and "
                               "accumulate their gradients (engine.training.micro_batch_args): the same steps up to "
                               "float rounding with a fraction of the padding, which a CPU computes like real "
                               "tokens (random batches of the demo rows are 30-45% padding): 1.18x faster steps "
                               "(bench warm_start; an fp32 build 14.5 instead of 16.3 min). 1: one padded batch, "
                               "as the committed agents were built", ge=1)
    loss_tokens_only: bool = _f(True, "score only the completion's tokens in TRL's loss (TrainSettings."
                                      "loss_tokens_only): the same loss up to float rounding, 1.25-1.35x faster "
                                      "steps on a CPU. --no-loss-tokens-only --micro-batches 1 is TRL's own path, "
                                      "the one the committed agents were built with (on a CPU with native bf16 it "
                                      "rebuilds their planner bit for bit)")
    bf16: str = _f("auto", "training precision: auto (bf16 only on a CPU/GPU that computes it natively), true, false "
                           "(fp32 everywhere: the build a CPU without native bf16 makes, on any machine)",
                   choices=BF16)


def build_roles(config: AgentBuildConfig) -> list[str]:
    """The roles ``config.roles`` names, in build order (planner first, each once): ``grounder,planner`` is a full
    build, not a one-role one, and ``planner,planner`` trains the planner once."""
    named = {r.strip() for r in config.roles.split(",") if r.strip()}
    if not named or named - set(ROLES):
        raise BuildConfigError("roles", f"roles {config.roles!r}: expected planner, grounder or both, comma-separated")
    return [r for r in ROLES if r in named]


def check_build_config(config: AgentBuildConfig, *, joint: bool = False) -> None:
    """Refuse a build config the builder would reject partway (or silently misread: 0 steps trained by epochs),
    before anything is written. ``joint``: for ``build_joint_agent``, which builds no role alone. Raises
    ``BuildConfigError`` naming the field."""
    if config.bf16 not in BF16:
        raise BuildConfigError("bf16", f"bf16 {config.bf16!r}: expected one of {', '.join(BF16)}")
    for f in dataclasses.fields(config):
        value, meta = getattr(config, f.name), f.metadata
        bounds = {k: meta.get(k) for k in ("ge", "gt", "le", "lt")}
        if all(b is None for b in bounds.values()):
            continue
        ok = (not (isinstance(value, float) and math.isnan(value))
              and (bounds["ge"] is None or value >= bounds["ge"]) and (bounds["gt"] is None or value > bounds["gt"])
              and (bounds["le"] is None or value <= bounds["le"]) and (bounds["lt"] is None or value < bounds["lt"]))
        if not ok:
            why = f" ({meta['why']})" if meta.get("why") else ""
            raise BuildConfigError(f.name, f"{f.name} {value!r}: must be {range_text(bounds)}{why}")
    head_dim, rest = divmod(config.hidden_size, config.heads)
    if rest or head_dim % 2:  # Llama splits the width evenly across heads; rotary embeddings rotate pairs of dims
        raise BuildConfigError("heads", f"heads {config.heads}: hidden_size {config.hidden_size} must split into "
                                        "that many heads of an even width (e.g. 256 / 4 = 64)")
    if config.batch_size % config.micro_batches:
        raise BuildConfigError("micro_batches", f"micro_batches {config.micro_batches}: expected a divisor of "
                                                f"batch_size {config.batch_size}")
    if config.group_by_length and config.micro_batches > 1:
        raise BuildConfigError("group_by_length", "group_by_length draws batches of similar length, micro_batches "
                                                  f"{config.micro_batches} cuts random batches: set micro_batches to "
                                                  "1 to group by length")
    try:
        world.parse_plan_styles(config.planner_styles)
    except ValueError as err:
        raise BuildConfigError("planner_styles", str(err)) from None
    roles = build_roles(config)
    if config.tokenizer_from and not Path(config.tokenizer_from).is_dir():
        raise BuildConfigError("tokenizer_from", f"tokenizer_from {config.tokenizer_from!r}: not a directory (an "
                                                 "agent directory with its tokenizer, e.g. assets/demo/grounder)")
    if not joint and roles != list(ROLES) and not config.tokenizer_from:
        # A new tokenizer would give the agent token ids its partner was never trained on.
        raise BuildConfigError("tokenizer_from", f"roles {config.roles!r}: building one agent needs tokenizer_from "
                                                 "(its partner's directory)")
