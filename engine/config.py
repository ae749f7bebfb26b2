"""Run configuration: dataclasses with help text, loaded from TOML or YAML, overridden with ``section.field=value``.

``load_config(path, overrides)`` returns a validated ``RunConfig``; every problem raises ``ConfigError`` naming the
field (``sample.k: must be >= 2``) and the file: an unknown section or field (with the closest known name
suggested), a value of the wrong type, a non-finite number, or a value outside the field's range. Each field
declares its range and choices next to its default (``_f(..., ge=1)``, ``choices=...``); the check of one value
lives in ``engine.config_values``, the whole config's checks and the rules that tie fields together in
``engine.config_checks``. ``config_to_dict`` /
``config_from_dict`` round-trip the snapshot stored with each run. Defaults follow the paper's released code unless
a field says otherwise.

The sections live by what they configure: the run, its data, agents, tools, warm start, stages and schedule here;
the iteration's stages in ``engine.config_stages``; the trainers in ``engine.config_training``; the field declaration
(``setting``, imported as ``_f``) in ``engine.config_fields``. This module re-exports them all, so ``from
engine.config import SampleSection`` keeps working. Reading the file itself (TOML, or YAML) is
``engine.config_file.read_config_file``.

Secrets never enter a config: the snapshot is stored with the run (``runs.config``) and shown in the studio. A key
field (``critic.api_key``, ``token``, ``password``, ...), a value that looks like a key (``sk-...``, ``hf_...``, a
URL with a password) or an ``*_api_key_env`` that is not a variable name raises ``ConfigError`` pointing at
``api_key_env`` (the NAME of the environment variable holding the key); such messages never echo the value.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config_checks import validate
from engine.config_fields import SEED_MAX as SEED_MAX  # re-exported: callers read the bounds from here
from engine.config_fields import setting as _f  # short: every field below is one
from engine.config_file import read_config_file
from engine.config_lines import file_line_source
from engine.config_source import override_source
from engine.config_stages import CriticSection as CriticSection
from engine.config_stages import EvaluateSection as EvaluateSection
from engine.config_stages import GroundSection as GroundSection
from engine.config_stages import LaunchSection as LaunchSection
from engine.config_stages import PairsSection as PairsSection
from engine.config_stages import SampleSection as SampleSection
from engine.config_stages import ScoreSection as ScoreSection
from engine.config_stages import VLLMSection as VLLMSection
from engine.config_training import DPOSettings as DPOSettings
from engine.config_training import GrounderGRPOSettings as GrounderGRPOSettings
from engine.config_training import GRPOSettings as GRPOSettings
from engine.config_training import SFTSection as SFTSection
from engine.config_training import TrainSettings as TrainSettings
from engine.config_values import KEY_VALUE, coerce, suggest, unknown_field
from engine.errors import ConfigError
from engine.tasks import SPLITS

GROUNDER_DATA = ("critic", "raw", "executed")
PLANNER_OBJECTIVES = ("dpo", "grpo")
GROUNDER_OBJECTIVES = ("sft", "grpo")
TOPOLOGIES = ("separate", "shared")
# The stages of a MOAT iteration, in order (engine.loop.STAGES runs them; a phase of [schedule] lists a subset).
ITERATION_STAGES = ("sample", "score", "pairs", "train_planner", "ground", "critique", "train_grounder", "evaluate")


@dataclass
class RunSection:
    name: str = _f("run", "a readable name for the run")
    workdir: str = _f("runs", "directory under which each run keeps its checkpoints (not empty)")
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
    id_prefix: str = _f("", "text put before every task id of this file, e.g. \"test-\": for two files whose ids "
                            "collide (a benchmark file without ids numbers its records <format>-<line>, so two "
                            "GSM8K files both have gsm8k-1)")


@dataclass
class DataSection:
    tasks: str = _f("examples/demo/tasks.jsonl", "task file (format below); unused when data.sources is given")
    format: str = _f("tasks", "tasks | lumos | gsm8k | svamp | hotpotqa | strategyqa", choices=DATA_FORMATS)
    ground: str = _f("", "lumos only: the grounder file joined by id with the planner file")
    sources: list[DataSource] = _f([], "several files, each with its format and split ([[data.sources]] tables: "
                                       "path, format, split, ground, id_prefix), e.g. Lumos training files plus "
                                       "benchmark test files; when given they replace data.tasks/format/ground")
    domains: list[str] = _f([], "keep only these domains (empty: all)", choices=("maths", "qa", "web"))
    exclude_tasks: str = _f("", "a file of task ids, one per line ('#' comments), left out of the run's train split, "
                                "e.g. the warm_start_tasks.txt that demo-models writes beside build.json: MOAT then "
                                "aligns on training tasks the warm-start agents were not fit to (empty: none)")
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
                            "ground, critic, sft, grpo_grounder, stages.planner_objective / grounder_objective / "
                            "grounder_data; with agents.topology = shared not the LoRA fields), e.g. "
                            "[\"sft.epochs=2\", \"ground.which=all\"]")


@dataclass
class ScheduleSection:
    phases: list[Phase] = _f([], "a curriculum: [[schedule.phases]] tables run in order, each for its iterations; "
                                 "iterations past the last phase repeat it (run.iterations defaults to their sum). "
                                 "Empty: every iteration is the MOAT iteration (engine.schedule)")


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


def config_from_dict(data: dict[str, Any], source: str | None = None,
                     text_fields: Collection[str] = ()) -> RunConfig:
    """A validated config from a dict of sections (a parsed file, a stored snapshot). Its values must carry their
    fields' types, except those of ``text_fields`` (dotted names set by ``--set``): command-line text, parsed."""
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
        known = {f.name: f for f in dataclasses.fields(section)}
        for name, value in values.items():
            dotted = f"{section_name}.{name}"
            if name not in known:
                raise unknown_field(name, sorted(known), dotted, source)
            setattr(section, name, coerce(value, hints[name], dotted, source, text=dotted in text_fields,
                                          choices=known[name].metadata.get("choices")))
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


def commented_toml(config: RunConfig, sections: list[str] | None = None) -> str:
    """``config_to_toml`` with each field's help as a ``#`` comment above it (``sections``: only these), for people
    to read and edit; ``load_config`` reads it back to the same values."""
    help_of = field_help()
    lines: list[str] = []
    section, table = "", ""
    for line in config_to_toml(config).splitlines():
        if line.startswith("["):
            table = line.strip("[]")  # "sample", or "data.sources" for an array of tables
            section = table.split(".")[0]
        if sections is not None and section not in sections:
            continue
        if "=" in line and table == section and (text := help_of.get(f"{section}.{line.split(' = ', 1)[0]}")):
            lines += [f"# {part}" for part in textwrap.wrap(text, 114, break_on_hyphens=False, break_long_words=False)]
        lines.append(line)
    return "\n".join(lines) + "\n"


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


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict[str, Any] | None = None) -> RunConfig:
    """A validated config from a file (or ``base``), with ``--set`` overrides applied on top.

    An error about a field an override set names that override as its source (``--set sample.k=1: sample.k: ...``);
    one about a field of a TOML or YAML file names the file and, when it is found there, the field's line
    (``demo.toml:12: sample.k: ...``)."""
    data: dict[str, Any] = json.loads(json.dumps(base)) if base else {}
    source = str(path) if path else None
    if path is not None:
        if not Path(path).exists():
            raise ConfigError("<file>", "config file not found", source)
        data = read_config_file(path)
    merged = parse_overrides(overrides or [])
    for section, values in merged.items():
        if not isinstance(data.setdefault(section, {}), dict):
            raise ConfigError(section, "expected a table of fields", source)
        data[section].update(values)
    try:
        return config_from_dict(data, source, {f"{section}.{name}" for section, values in merged.items()
                                               for name in values})
    except ConfigError as exc:
        located = _located(exc, path, merged, source)
        if located is exc:
            raise
        raise located from None


def locate_error(exc: ConfigError, path: str | Path | None, overrides: list[str] | None = None) -> ConfigError:
    """``exc``, raised about a config ``load_config(path, overrides)`` gave (a data file a field names is missing,
    found once the config is used), located as ``load_config`` locates its own errors: the ``--set`` that set the
    field, else ``FILE:LINE`` of the field in the config file; ``exc`` itself when it already names a source or
    neither finds the field."""
    if exc.source is not None or path is None:
        return exc
    return _located(exc, path, parse_overrides(overrides or []), None)


def _located(exc: ConfigError, path: str | Path | None, merged: dict[str, dict[str, Any]],
             source: str | None) -> ConfigError:
    where = override_source(exc.field, merged) or (
        file_line_source(Path(path), exc.field) if path is not None and exc.source == source else None)
    return exc if where is None else type(exc)(exc.field, exc.message, where)


def field_help() -> dict[str, str]:
    """``{"sample.k": "plans sampled per task ..."}`` for every field that carries help text."""
    out = {}
    for section in dataclasses.fields(RunConfig):
        for f in dataclasses.fields(section.default_factory()):
            out[f"{section.name}.{f.name}"] = f.metadata.get("help", "")
    return out
