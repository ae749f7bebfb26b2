"""Build the demo agents: a tokenizer trained on the demo world and two tiny Llama-style causal LMs.

``build_demo_agents(tasks, out_dir, AgentBuildConfig())`` writes ``out_dir/planner`` and ``out_dir/grounder`` (each
a safetensors model, its tokenizer and generation config) plus ``out_dir/build.json`` (sizes, seeds, losses,
timings). The planner is warm-started by TRL SFT on a *mix* of plan styles, the grounder only on concrete plans
with gold actions (``engine.demo.world``): the built-in capability gap. Tokenizer and agents are built from the
``train`` split only (a test checks that no dev or held-out question or template reaches the training rows).

``build_joint_agent(tasks, out_dir, start)`` makes *one* model for both roles (``agents.topology = shared`` without
LoRA): the given agent (the committed grounder) trained further by SFT on the planner's and the grounder's
warm-start rows together, with that agent's tokenizer; ``out_dir/build.json`` records it.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine import prompts
from engine.demo import world
from engine.demo.tokenizer import train_tokenizer
from engine.tasks import Task


@dataclass
class AgentBuildConfig:
    seed: int = 0
    hidden_size: int = 256  # Llama width; 256 x 4 layers is ~3.5M parameters with this vocabulary
    layers: int = 4
    heads: int = 4
    intermediate_size: int = 768
    max_positions: int = 512
    vocab_size: int = 2048  # BPE merges stop earlier when the demo text runs out of pairs
    planner_steps: int = 400  # optimizer steps of warm-start SFT (two plan draws per task: ~1.8 epochs)
    grounder_steps: int = 800  # ~7 epochs of the concrete-plan grounder data: copying emerges after ~600 steps
    batch_size: int = 32
    learning_rate: float = 2e-3  # tiny models from scratch want a large rate
    max_train_tasks: int = 0  # 0 = every train task
    joint_steps: int = 600  # build_joint_agent: SFT steps on both roles' rows (~1.8 epochs of the mix)


def instruction_phrases() -> list[str]:
    """The fixed Lumos text blocks that become single tokens (prompts keep Lumos's exact wording)."""
    phrases = [prompts.PLANNER_INSTRUCTION + "Task: ", prompts.PLANNER_TASK_SUFFIX, prompts.ONETIME_SUBGOALS,
               prompts.ITERATIVE_SUBGOAL, prompts.KEEP_PLANNING, prompts.STOP_PLANNING, prompts.STOP_QUESTION]
    phrases += [prompts.GROUNDER_INSTRUCTION + prompts.ACTION_LISTS[d] + "Task: " for d in prompts.ACTION_LISTS]
    return phrases


def planner_rows(tasks: list[Task], seed: int) -> list[dict[str, str]]:
    rows = []
    for task, subgoals, style in world.planner_warm_start(tasks, seed):
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


def build_demo_agents(tasks: list[Task], out_dir: str | Path, config: AgentBuildConfig = AgentBuildConfig(),
                      log=print) -> dict:
    from engine.config import TrainSettings
    from engine.training import sft_train

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train = [t for t in tasks if t.split == "train"]
    if config.max_train_tasks:
        train = random.Random(config.seed).sample(train, min(config.max_train_tasks, len(train)))
    p_rows, g_rows = planner_rows(train, config.seed), grounder_rows(train)
    # The tokenizer sees the training rows only: no dev or held-out question, template or name shapes its merges.
    corpus = [r["prompt"] + r["completion"] for r in p_rows + g_rows]
    tokenizer = train_tokenizer(corpus, instruction_phrases(), config.vocab_size)
    import torch

    from engine.precision import describe

    report: dict = {"config": asdict(config), "train_tasks": len(train), "vocab": len(tokenizer),
                    "precision": describe("auto", torch.device("cpu"))}
    for role, rows, steps in (("planner", p_rows, config.planner_steps), ("grounder", g_rows, config.grounder_steps)):
        started = time.perf_counter()
        model = _new_model(config, tokenizer)
        settings = TrainSettings(learning_rate=config.learning_rate, max_steps=steps, batch_size=config.batch_size,
                                 max_length=config.max_positions, seed=config.seed, logging_steps=25,
                                 warmup_steps=0.05)
        model, history = sft_train(model, tokenizer, [{"prompt": r["prompt"], "completion": r["completion"]}
                                                      for r in rows], settings,
                                   on_log=lambda logs, role=role: log(f"{role} {json.dumps(logs)}"))
        _save(model, tokenizer, out / role)
        losses = [h["loss"] for h in history if "loss" in h]
        report[role] = {"rows": len(rows), "steps": steps, "parameters": sum(p.numel() for p in model.parameters()),
                        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
                        "seconds": round(time.perf_counter() - started, 1)}
        log(f"{role}: {report[role]}")
    (out / "build.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def build_joint_agent(tasks: list[Task], out_dir: str | Path, start: str | Path,
                      config: AgentBuildConfig = AgentBuildConfig(), log=print) -> dict:
    """One agent in both roles: ``start`` trained ``config.joint_steps`` SFT steps on the planner and grounder
    warm-start rows of the train split, shuffled together (the grounder's third of them keeps what ``start``
    grounds while the planner's teach it to plan), saved to ``out_dir`` with ``start``'s tokenizer."""
    import torch

    from engine.config import TrainSettings
    from engine.models import ModelSpec, load_model
    from engine.precision import describe
    from engine.training import sft_train

    out = Path(out_dir)
    train = [t for t in tasks if t.split == "train"]
    if config.max_train_tasks:
        train = random.Random(config.seed).sample(train, min(config.max_train_tasks, len(train)))
    rows = [{"prompt": r["prompt"], "completion": r["completion"]}
            for r in planner_rows(train, config.seed) + grounder_rows(train)]
    random.Random(config.seed).shuffle(rows)
    started = time.perf_counter()
    model, tokenizer = load_model(ModelSpec(str(start), dtype="float32"))
    settings = TrainSettings(learning_rate=config.learning_rate, max_steps=config.joint_steps,
                             batch_size=config.batch_size, max_length=config.max_positions, seed=config.seed,
                             logging_steps=25, warmup_steps=0.05)
    model.train()
    model, history = sft_train(model, tokenizer, rows, settings, on_log=lambda logs: log(f"joint {json.dumps(logs)}"))
    out.mkdir(parents=True, exist_ok=True)
    _save(model, tokenizer, out)
    losses = [h["loss"] for h in history if "loss" in h]
    report = {"config": asdict(config), "start": str(start), "train_tasks": len(train), "rows": len(rows),
              "steps": config.joint_steps, "precision": describe("auto", torch.device("cpu")),
              "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
              "seconds": round(time.perf_counter() - started, 1)}
    (out / "build.json").write_text(json.dumps(report, indent=2) + "\n")
    log(f"joint: {report}")
    return report
