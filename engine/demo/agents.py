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

Both check the whole config first (``engine.demo.build_config.check_build_config``: every number's range, the roles,
the style mix, the tokenizer directory; a ``BuildConfigError`` names the field) and write nothing when it is
refused. Both build through ``engine.demo.staging.build_into``: into ``<out_dir>.partial-<pid>`` beside ``out_dir``,
moved into place only once everything (the agents, their tokenizer, ``build.json``, ``warm_start_tasks.txt``) is
written, so an error or Ctrl-C partway leaves ``out_dir`` as it was (an interrupted rebuild of ``assets/demo`` never
leaves a new planner beside an old grounder and an old ``build.json``); a role ``roles`` did not ask for, and any
other file in ``out_dir``, stays. ``AgentBuildConfig``, ``BuildConfigError``, ``check_build_config``, ``build_roles``
and ``ROLES`` are importable from here as before.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict
from pathlib import Path

from engine import prompts
from engine.demo import qa_world, world
from engine.demo.build_config import ROLES as ROLES
from engine.demo.build_config import AgentBuildConfig as AgentBuildConfig
from engine.demo.build_config import BuildConfigError as BuildConfigError
from engine.demo.build_config import build_roles as build_roles
from engine.demo.build_config import check_build_config as check_build_config
from engine.demo.staging import build_into
from engine.demo.tokenizer import train_tokenizer
from engine.tasks import Task

WARM_START_TASKS = "warm_start_tasks.txt"  # beside build.json: the train task ids the warm start used
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


def _train_split(tasks: list[Task], config: AgentBuildConfig) -> list[Task]:
    train = [t for t in tasks if t.split == "train"]
    if not train:  # an empty corpus fails deep inside the tokenizer or the trainer
        raise ValueError("no task of split train to warm-start on")
    if config.max_train_tasks:
        train = random.Random(config.seed).sample(train, min(config.max_train_tasks, len(train)))
    return train


def build_demo_agents(tasks: list[Task], out_dir: str | Path, config: AgentBuildConfig = AgentBuildConfig(),
                      log=print) -> dict:
    check_build_config(config)
    out = Path(out_dir)
    styles = world.parse_plan_styles(config.planner_styles)
    roles = build_roles(config)
    train = _train_split(tasks, config)
    return build_into(out, lambda staging: _build_agents(train, staging, out, roles, styles, config, log))


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
    _check_fits(tokenizer, [r for role in roles for r in (p_rows if role == "planner" else g_rows)],
                config.max_positions)
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


def _check_fits(tokenizer, rows: list[dict[str, str]], max_positions: int) -> None:
    """Refuse ``max_positions`` shorter than the longest warm-start row (prompt + completion + EOS, in tokens):
    TRL would cut those rows at ``max_length`` and the agent would never learn to end its answer. Checked once the
    tokenizer exists, before any training step."""
    longest = max((len(tokenizer(r["prompt"] + r["completion"])["input_ids"]) + 1 for r in rows), default=0)
    if longest > max_positions:
        raise BuildConfigError("max_positions", f"max_positions {max_positions}: the longest warm-start row is "
                                                f"{longest} tokens (prompt + completion + EOS); give at least that")


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
    train = _train_split(tasks, config)
    styles = world.parse_plan_styles(config.planner_styles)
    report = build_into(out, lambda staging: _build_joint(train, staging, start, styles, config, log))
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
    _check_fits(tokenizer, rows, config.max_positions)
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
