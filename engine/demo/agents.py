"""Build the demo agents: a tokenizer trained on the demo world and two tiny Llama-style causal LMs.

``build_demo_agents(tasks, out_dir, AgentBuildConfig())`` writes ``out_dir/planner`` and ``out_dir/grounder`` (each
a safetensors model, its tokenizer and generation config) plus ``out_dir/build.json`` (sizes, seeds, losses,
timings) and ``out_dir/warm_start_tasks.txt`` (the id of every train task the warm start saw, one per line: with
``max_train_tasks``, a run's ``data.exclude_tasks`` can then keep MOAT's training draws to tasks the agents were
not fit to). The planner is warm-started by TRL SFT on a *mix* of plan styles (``AgentBuildConfig.planner_styles``),
the grounder only on concrete plans with gold actions (``engine.demo.world``): the built-in capability gap.
Tokenizer and agents are built from the ``train`` split only (a test checks that no dev or held-out question or
template reaches the training rows); the tokenizer's planner rows always use ``world.FIRST_PLAN_STYLES``, so the
token ids do not depend on ``planner_styles``. ``roles`` + ``tokenizer_from`` rebuild one agent against another's
tokenizer (a planner with another style mix beside the committed grounder) and give the same agent a full build
gives.

``build_joint_agent(tasks, out_dir, start)`` makes *one* model for both roles (``agents.topology = shared`` without
LoRA): the given agent (the committed grounder) trained further by SFT on the planner's and the grounder's
warm-start rows together, with that agent's tokenizer; ``out_dir/build.json`` records it.

Both check the whole config first (``check_build_config``: every number's range, the roles, the style mix, the
tokenizer directory; a ``BuildConfigError`` names the field) and write nothing when it is refused. Both build into
``<out_dir>.partial-<pid>`` beside ``out_dir`` and move the result into place only once everything (the agents, their
tokenizer, ``build.json``, ``warm_start_tasks.txt``) is written: an error or Ctrl-C (``KeyboardInterrupt``) partway
removes that directory and leaves ``out_dir`` as it was, so an interrupted rebuild of ``assets/demo`` never leaves a
new planner beside an old grounder and an old ``build.json``. Moving into place replaces only what was built: a
role ``roles`` did not ask for, and any other file in ``out_dir``, stays.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine import prompts
from engine.config_fields import BF16
from engine.config_fields import setting as _f
from engine.config_values import range_text
from engine.demo import qa_world, world
from engine.demo.tokenizer import train_tokenizer
from engine.tasks import Task

WARM_START_TASKS = "warm_start_tasks.txt"  # beside build.json: the train task ids the warm start used
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


def instruction_phrases() -> list[str]:
    """The fixed Lumos text blocks that become single tokens (prompts keep Lumos's exact wording)."""
    phrases = [prompts.PLANNER_INSTRUCTION + "Task: ", prompts.PLANNER_TASK_SUFFIX, prompts.ONETIME_SUBGOALS,
               prompts.ITERATIVE_SUBGOAL, prompts.KEEP_PLANNING, prompts.STOP_PLANNING, prompts.STOP_QUESTION]
    phrases += [prompts.GROUNDER_INSTRUCTION + prompts.ACTION_LISTS[d] + "Task: " for d in prompts.ACTION_LISTS]
    return phrases


def planner_rows(tasks: list[Task], seed: int,
                 styles: tuple[tuple[str, float], ...] = world.PLAN_STYLES) -> list[dict[str, str]]:
    rows = []
    for task, subgoals, style in world.planner_warm_start(tasks, seed, styles=styles):
        prompt, completion = prompts.prompt_and_completion(prompts.planner_messages(task, subgoals))
        rows.append({"prompt": prompt, "completion": completion.removesuffix(prompts.LUMOS_EOS), "style": style})
    return rows


def grounder_rows(tasks: list[Task]) -> list[dict[str, str]]:
    rows = []
    for task, subgoals in world.grounder_warm_start(tasks):
        messages = prompts.grounder_messages(task, subgoals, task.gold_actions)
        prompt, completion = prompts.prompt_and_completion(messages)
        rows.append({"prompt": prompt, "completion": completion.removesuffix(prompts.LUMOS_EOS)})
    return rows


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


def _sampling(config: AgentBuildConfig) -> dict:
    return {"sampling": "group_by_length" if config.group_by_length else "random",
            "micro_batches": config.micro_batches}


def _new_model(config: AgentBuildConfig, tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(config.seed)
    model_config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=config.hidden_size, num_hidden_layers=config.layers,
        num_attention_heads=config.heads, num_key_value_heads=config.heads,
        intermediate_size=config.intermediate_size, max_position_embeddings=config.max_positions,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(model_config)


def _save(model, tokenizer, path: Path) -> None:
    import torch
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, max_new_tokens=160,
        do_sample=False,
    )
    # fp16 on disk halves the committed size (2 x 15 MB in fp32); loading on a CPU casts back to fp32.
    model.to(dtype=torch.float16).save_pretrained(path, safe_serialization=True)
    model.to(dtype=torch.float32)
    tokenizer.save_pretrained(path)


def staging_dir(out: Path) -> Path:
    """Where a build of ``out`` is written before it is moved into place: a sibling (so the final moves are renames
    on one filesystem), named for this process (two builds of one --out never share it)."""
    out = out.resolve()  # "." or "assets/demo/" have no usable name of their own
    return out.parent / f"{out.name}.partial-{os.getpid()}"


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise BuildConfigError("out", f"{out} is a file, not a directory")


def _train_split(tasks: list[Task], config: AgentBuildConfig) -> list[Task]:
    train = [t for t in tasks if t.split == "train"]
    if not train:  # an empty corpus fails deep inside the tokenizer or the trainer
        raise ValueError("no task of split train to warm-start on")
    if config.max_train_tasks:
        train = random.Random(config.seed).sample(train, min(config.max_train_tasks, len(train)))
    return train


def _move_into_place(staging: Path, out: Path) -> None:
    """Put each entry of the finished ``staging`` at its place in ``out`` and remove ``staging``. A new ``out`` is one
    rename. Otherwise an agent directory is swapped by two renames (the old one into ``staging``, removed with it)
    and a file by one atomic ``os.replace``, agents first, ``build.json`` last; what ``staging`` lacks (a role not
    rebuilt, other files) stays."""
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(out)
        return
    entries = sorted(staging.iterdir(), key=lambda e: (not e.is_dir(), e.name == "build.json", e.name))
    for entry in entries:
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            target.rename(staging / f"{entry.name}.replaced")
            entry.rename(target)
        else:
            os.replace(entry, target)
    shutil.rmtree(staging)


def build_demo_agents(tasks: list[Task], out_dir: str | Path, config: AgentBuildConfig = AgentBuildConfig(),
                      log=print) -> dict:
    check_build_config(config)
    out = Path(out_dir)
    _check_out(out)
    styles = world.parse_plan_styles(config.planner_styles)
    roles = build_roles(config)
    train = _train_split(tasks, config)
    staging = staging_dir(out)
    shutil.rmtree(staging, ignore_errors=True)  # left by a killed process that had this pid
    try:
        report = _build_agents(train, staging, out, roles, styles, config, log)
    except BaseException:  # KeyboardInterrupt included: out stays as it was
        shutil.rmtree(staging, ignore_errors=True)
        raise
    # Outside the try: interrupted between its renames, the partial directory (holding any agent already swapped
    # out) must stay for a person to look at, not be removed with what it holds.
    _move_into_place(staging, out)
    return report


def _build_agents(train: list[Task], staging: Path, out: Path, roles: list[str],
                  styles: tuple[tuple[str, float], ...], config: AgentBuildConfig, log) -> dict:
    """The build itself, every file into ``staging``; ``out`` is only read (the kept role's record)."""
    from engine.config import TrainSettings
    from engine.training import sft_train

    staging.mkdir(parents=True)
    p_rows, g_rows = planner_rows(train, config.seed, styles), grounder_rows(train)
    if config.tokenizer_from:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(config.tokenizer_from)
    else:
        # The tokenizer sees the training rows only: no dev or held-out question, template or name shapes it. Its
        # planner rows are drawn with the first demo planner's mix whatever --planner-styles says, so agents built
        # with different mixes share token ids (and rebuilding one role gives the agent a full build gives).
        tokenizer_rows = planner_rows(train, config.seed, world.FIRST_PLAN_STYLES) + g_rows
        corpus = [r["prompt"] + r["completion"] for r in tokenizer_rows]
        pieces = qa_world.NAME_SYLLABLES if config.name_pieces else ()
        tokenizer = train_tokenizer(corpus, instruction_phrases(), config.vocab_size, pieces=pieces)
    import torch

    from engine.precision import describe

    report: dict = {"config": asdict(config), "train_tasks": len(train), "vocab": len(tokenizer),
                    "precision": describe(config.bf16, torch.device("cpu"))}
    # Rebuilding one agent in place keeps the other's record (with the config it was built with).
    earlier = json.loads((out / "build.json").read_text()) if (out / "build.json").is_file() else {}
    kept = [r for r in ROLES if r not in roles and r in earlier and (out / r).is_dir()]
    for role in kept:
        report[role] = {**earlier[role], "kept": True, "config": earlier[role].get("config", earlier.get("config"))}
    builds = {"planner": (p_rows, config.planner_steps), "grounder": (g_rows, config.grounder_steps)}
    for role, (rows, steps) in ((r, builds[r]) for r in roles):
        started = time.perf_counter()
        model = _new_model(config, tokenizer)
        settings = TrainSettings(learning_rate=config.learning_rate, max_steps=steps, batch_size=config.batch_size,
                                 max_length=config.max_positions, seed=config.seed, logging_steps=25,
                                 warmup_steps=0.05, bf16=config.bf16, loss_tokens_only=config.loss_tokens_only)
        model, history = sft_train(model, tokenizer, [{"prompt": r["prompt"], "completion": r["completion"]}
                                                      for r in rows], settings,
                                   on_log=lambda logs, role=role: log(f"{role} {json.dumps(logs)}"),
                                   **_sampling(config))
        _save(model, tokenizer, staging / role)
        losses = [h["loss"] for h in history if "loss" in h]
        report[role] = {"rows": len(rows), "steps": steps, "parameters": sum(p.numel() for p in model.parameters()),
                        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
                        "seconds": round(time.perf_counter() - started, 1)}
        if kept:  # two configs in one file: each role names its own
            report[role]["config"] = asdict(config)
        log(f"{role}: {report[role]}")
    (staging / "build.json").write_text(json.dumps(report, indent=2) + "\n")
    _write_task_ids(staging, train)
    return report


def _write_task_ids(out: Path, train: list[Task]) -> None:
    (out / WARM_START_TASKS).write_text("".join(f"{t.id}\n" for t in train), encoding="utf-8")


def build_joint_agent(tasks: list[Task], out_dir: str | Path, start: str | Path,
                      config: AgentBuildConfig = AgentBuildConfig(), log=print) -> dict:
    """One agent in both roles: ``start`` trained ``config.joint_steps`` SFT steps on the planner and grounder
    warm-start rows of the train split, shuffled together (the grounder's third of them keeps what ``start``
    grounds while the planner's teach it to plan), saved to ``out_dir`` with ``start``'s tokenizer (through
    ``<out_dir>.partial-<pid>``, as ``build_demo_agents``; ``start`` may be ``out_dir`` itself)."""
    check_build_config(config, joint=True)
    out = Path(out_dir)
    _check_out(out)
    train = _train_split(tasks, config)
    styles = world.parse_plan_styles(config.planner_styles)
    staging = staging_dir(out)
    shutil.rmtree(staging, ignore_errors=True)  # left by a killed process that had this pid
    try:
        report = _build_joint(train, staging, start, styles, config, log)
    except BaseException:  # KeyboardInterrupt included: out stays as it was
        shutil.rmtree(staging, ignore_errors=True)
        raise
    # Outside the try: interrupted between its renames, the partial directory (holding any agent already swapped
    # out) must stay for a person to look at, not be removed with what it holds.
    _move_into_place(staging, out)
    log(f"joint: {report}")
    return report


def _build_joint(train: list[Task], staging: Path, start: str | Path, styles: tuple[tuple[str, float], ...],
                 config: AgentBuildConfig, log) -> dict:
    import torch

    from engine.config import TrainSettings
    from engine.models import ModelSpec, load_model
    from engine.precision import describe
    from engine.training import sft_train

    rows = [{"prompt": r["prompt"], "completion": r["completion"]}
            for r in planner_rows(train, config.seed, styles) + grounder_rows(train)]
    random.Random(config.seed).shuffle(rows)
    started = time.perf_counter()
    model, tokenizer = load_model(ModelSpec(str(start), dtype="float32"))
    settings = TrainSettings(learning_rate=config.learning_rate, max_steps=config.joint_steps,
                             batch_size=config.batch_size, max_length=config.max_positions, seed=config.seed,
                             logging_steps=25, warmup_steps=0.05, bf16=config.bf16,
                             loss_tokens_only=config.loss_tokens_only)
    model.train()
    model, history = sft_train(model, tokenizer, rows, settings, on_log=lambda logs: log(f"joint {json.dumps(logs)}"),
                               **_sampling(config))
    _save(model, tokenizer, staging)
    losses = [h["loss"] for h in history if "loss" in h]
    report = {"config": asdict(config), "start": str(start), "train_tasks": len(train), "rows": len(rows),
              "steps": config.joint_steps, "precision": describe(config.bf16, torch.device("cpu")),
              "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
              "seconds": round(time.perf_counter() - started, 1)}
    (staging / "build.json").write_text(json.dumps(report, indent=2) + "\n")
    _write_task_ids(staging, train)
    return report
