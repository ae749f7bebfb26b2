"""Checking a run config as a whole: every value against its field (``engine.config_values``), the rules that tie
fields together, the secret rules for fields (see ``engine.config``'s docstring) and a curriculum's phases. Every
problem raises ``ConfigError`` naming the dotted field; messages about secrets never echo the value.

``check_launch_files`` is apart from ``validate``: it reads the files ``launch.mode = "accelerate"`` hands to
``accelerate launch`` (the accelerate config, the DeepSpeed JSON it names) and asks for the deepspeed package, so it
belongs before a run starts, not in every load of a config (a stored run's config must load where they are missing).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import sys
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config_training import GRPOSettings
from engine.config_values import check_field, coerce, get_field, suggest
from engine.errors import ConfigError

if TYPE_CHECKING:
    from engine.config import RunConfig

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
KEY_ENV_FIELDS = ("critic.api_key_env", "tools.qa_api_key_env")


def validate(config: RunConfig, source: str | None) -> None:
    for dotted in KEY_ENV_FIELDS:
        value = get_field(config, dotted)
        if value and not ENV_NAME.fullmatch(value):  # never echoed: it may be the key itself
            raise ConfigError(dotted, "must be the NAME of an environment variable (letters, digits, _), not the "
                                      "key itself", source)
    for section in dataclasses.fields(config):
        values = getattr(config, section.name)
        for f in dataclasses.fields(values):
            check_field(getattr(values, f.name), dict(f.metadata), f"{section.name}.{f.name}", source)
    # Rules that tie several fields together.
    for role in ("planner", "grounder"):
        if not getattr(config, role).path:
            raise ConfigError(f"{role}.path", "a model directory or hub id is required", source)
    if config.critic.backend in ("openai", "hf") and not config.critic.model:
        raise ConfigError("critic.model", f"required for the {config.critic.backend} backend", source)
    if config.critic.backend == "openai" and not config.critic.base_url:
        raise ConfigError("critic.base_url", "required for the openai backend", source)
    if bool(config.tools.qa_base_url) != bool(config.tools.qa_model):
        raise ConfigError("tools.qa_model", "set both tools.qa_base_url and tools.qa_model, or neither", source)
    training = (("sample.backend", planner_training(config)), ("ground.backend", grounder_training(config)))
    for dotted, section in training:  # the section that trains the role: its checkpoints are what the backend loads
        settings = getattr(config, section)
        if get_field(config, dotted) == "vllm" and settings.lora and settings.save_adapter:
            # vLLM loads a model directory; a run's adapter checkpoint is an adapter plus the model it applies to.
            raise ConfigError(f"{section}.save_adapter", f"with {dotted} = vllm the checkpoints must be full weights: "
                                                         f"set {section}.save_adapter = false", source)
    for section in ("grpo", "grpo_grounder"):
        _check_grpo_max_length(config, section, source)
    for dotted, role in (("sample.backend", "planner"), ("ground.backend", "grounder")):
        if get_field(config, dotted) == "vllm" and getattr(config, role).adapter:
            # vLLM serves plain weights here; merging on the fly would write a second copy of the model.
            raise ConfigError(f"{role}.adapter", f"not supported with {dotted} = vllm: merge the adapter into the "
                                                 "model first (or use the hf backend)", source)
    for index, item in enumerate(config.data.sources, start=1):
        where = f"data.sources[{index}]"
        if not item.path:
            raise ConfigError(f"{where}.path", "required: the file to load", source)
        if item.ground and item.format != "lumos":
            raise ConfigError(f"{where}.ground", f"a grounder file only applies to format lumos, not {item.format}",
                              source)
        if item.split and item.format == "tasks":
            raise ConfigError(f"{where}.split", "a tasks file keeps each record's own split; leave it empty", source)
    if -1 < config.sft.original_ratio < 0:
        raise ConfigError("sft.original_ratio", "must be -1 (all the original data) or >= 0, got "
                                                f"{config.sft.original_ratio!r}", source)
    if config.sft.batch_size % config.sft.micro_batches:
        raise ConfigError("sft.micro_batches", f"must divide sft.batch_size ({config.sft.batch_size}), got "
                                               f"{config.sft.micro_batches}", source)
    if config.critic.error_rate and config.critic.backend != "reference":
        raise ConfigError("critic.error_rate", "only the reference critic can err on purpose", source)
    if config.launch.mode == "accelerate" and not config.launch.accelerate_config:
        raise ConfigError("launch.accelerate_config", "required when launch.mode = accelerate", source)
    if config.stages.planner_objective == "grpo":
        _check_grpo(config, "grpo", "stages.planner_objective", source)
    if config.stages.grounder_objective == "grpo":
        _check_grpo(config, "grpo_grounder", "stages.grounder_objective", source)
    if config.agents.topology == "shared":
        _check_shared(config, source)
    if config.schedule.phases:
        check_schedule(config, source)


def check_launch_files(config: RunConfig) -> None:
    """With ``launch.mode = "accelerate"``: the accelerate config exists (a relative path is read from the current
    directory, as ``engine.launch`` passes it), parses (JSON when its name ends in ``.json``, else YAML: accelerate's
    own rule) and is one accelerate accepts; the DeepSpeed JSON it names (``deepspeed_config.deepspeed_config_file``)
    exists and parses; and a DeepSpeed launch finds the deepspeed package. Otherwise the train stages would fail only
    when they start, after the sampling and scoring of the iteration. Raises ``ConfigError`` naming
    ``launch.accelerate_config`` (``launch.extra_args`` for ``--use_deepspeed`` there), without a source: the caller
    locates it (``engine.config.locate_error``: ``FILE:LINE``)."""
    launch = config.launch
    if launch.mode != "accelerate":
        return
    field, path = "launch.accelerate_config", launch.accelerate_config
    settings = read_launch_file(path, field, "accelerate config")
    if not isinstance(settings, dict):
        raise ConfigError(field, f"{path}: expected a mapping of accelerate settings, got {type(settings).__name__}")
    if "zero_optimization" in settings and "distributed_type" not in settings:
        raise ConfigError(field, f"{path} is a DeepSpeed config, not an accelerate config: name an accelerate config "
                                 "whose deepspeed_config.deepspeed_config_file is this file (as "
                                 "examples/accelerate/zero2.yaml names ds_zero2.json)")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType, is_deepspeed_available

    try:  # accelerate's own reading: unknown keys, a distributed_type it does not know
        accelerate_config = load_config_from_file(path)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(field, f"{path}: accelerate cannot use it: {str(exc).splitlines()[0]}") from None
    on_deepspeed = getattr(accelerate_config, "distributed_type", None) == DistributedType.DEEPSPEED
    if not on_deepspeed and "--use_deepspeed" in launch.extra_args:
        field, on_deepspeed = "launch.extra_args", True
    if not on_deepspeed:
        return
    if not is_deepspeed_available():  # what `accelerate launch` itself checks before it starts a DeepSpeed launch
        raise ConfigError(field, f"{path} trains with DeepSpeed, but the deepspeed package is not installed for "
                                 f"{sys.executable}: pip install deepspeed (or use an accelerate config without "
                                 "DeepSpeed, e.g. examples/accelerate/ddp.yaml)")
    deepspeed_file = (getattr(accelerate_config, "deepspeed_config", None) or {}).get("deepspeed_config_file")
    if deepspeed_file:
        deepspeed_settings = read_launch_file(str(deepspeed_file), field, "DeepSpeed config", named_in=path,
                                               as_json=True)
        if not isinstance(deepspeed_settings, dict):
            raise ConfigError(field, f"{path}: deepspeed_config.deepspeed_config_file: {deepspeed_file}: expected a "
                                     f"JSON object, got {type(deepspeed_settings).__name__}")


def read_launch_file(path: str, field: str, what: str, named_in: str = "", as_json: bool | None = None) -> Any:
    """The parsed contents of a file ``field`` hands to the launch (``named_in``: the accelerate config that names
    it); ``ConfigError`` naming the file, and the line of a parse error, when it is missing or does not parse."""
    prefix = f"{named_in}: deepspeed_config.deepspeed_config_file: " if named_in else ""
    found = Path(path)
    if not found.is_file():
        where = "" if found.is_absolute() else (f" (a relative path is read from the current directory, "
                                                f"{Path.cwd()}, not from the config file's)")
        what_is = f"{path} is a directory, not a file" if found.is_dir() else f"no {what} file {path}"
        raise ConfigError(field, prefix + what_is + where)
    try:
        text = found.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(field, f"{prefix}{path}: cannot read the {what}: {exc}") from None
    is_json = path.endswith(".json") if as_json is None else as_json  # accelerate's rule: .json is JSON, else YAML
    if is_json:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(field, f"{prefix}{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(field, f"{prefix}{where}: not valid YAML: {problem}") from None


def planner_training(config: RunConfig) -> str:
    """The section that trains the planner under ``stages.planner_objective``: ``grpo`` or ``dpo``."""
    return "grpo" if config.stages.planner_objective == "grpo" else "dpo"


def grounder_training(config: RunConfig) -> str:
    """The section that trains the grounder under ``stages.grounder_objective``: ``grpo_grounder`` or ``sft``."""
    return "grpo_grounder" if config.stages.grounder_objective == "grpo" else "sft"


def _check_grpo_max_length(config: RunConfig, section: str, source: str | None) -> None:
    """``max_length`` is inherited from ``TrainSettings`` but TRL's ``GRPOConfig`` has no such field (nor a prompt
    length): ``engine.training.grpo_train`` drops it. Refused rather than ignored, so no run believes it truncates."""
    default = next(f.default for f in dataclasses.fields(GRPOSettings) if f.name == "max_length")
    value = getattr(config, section).max_length
    if value != default:
        raise ConfigError(f"{section}.max_length", f"has no effect for GRPO (got {value}): TRL bounds each rollout "
                                                   f"by {section}.max_completion_length and does not truncate "
                                                   f"prompts; leave it at {default}", source)


def _check_grpo(config: RunConfig, section: str, objective: str, source: str | None) -> None:
    """What online group RL of a role needs (``[grpo]`` for the planner, ``[grpo_grounder]`` for the grounder)."""
    grpo = getattr(config, section)
    if (grpo.batch_size * grpo.grad_accum) % grpo.num_generations:
        raise ConfigError(f"{section}.batch_size", f"batch_size x grad_accum ({grpo.batch_size * grpo.grad_accum}) "
                                                   f"must be a multiple of num_generations ({grpo.num_generations}): "
                                                   "each step holds whole groups", source)
    if not grpo.rewards:
        raise ConfigError(f"{section}.rewards", "name at least one reward", source)
    if len(set(grpo.rewards)) != len(grpo.rewards):
        raise ConfigError(f"{section}.rewards", f"a reward is named twice: {grpo.rewards}", source)
    if "overlong" in grpo.rewards and not grpo.overlong_cache:
        raise ConfigError(f"{section}.overlong_cache", "the overlong reward needs a ramp of > 0 tokens", source)
    if config.sample.formulation != "onetime":
        raise ConfigError(objective, "grpo trains onetime agents (sample.formulation = onetime)", source)
    if config.launch.mode == "accelerate":
        raise ConfigError(objective, "grpo trains in the engine's process: launch.mode = accelerate is not supported "
                                     "for it yet", source)


def _check_shared(config: RunConfig, source: str | None) -> None:
    """One base in two roles (``agents.topology = shared``): both roles start from one model; every checkpoint is a
    LoRA adapter on it (``engine.topology``), or, without LoRA, the one set of weights both roles train in turn
    (``engine.stages.context.latest_weights``)."""
    planner, grounder = config.planner, config.grounder
    for name in ("path", "adapter", "dtype", "device"):
        if getattr(planner, name) != getattr(grounder, name):
            raise ConfigError(f"grounder.{name}", f"agents.topology = shared runs one base model in both roles: "
                                                  f"planner.{name} ({getattr(planner, name)!r}) and grounder.{name} "
                                                  f"({getattr(grounder, name)!r}) must be equal", source)
    planner_settings, grounder_settings = planner_training(config), grounder_training(config)
    lora = {section: getattr(config, section).lora for section in (planner_settings, grounder_settings)}
    if len(set(lora.values())) > 1:
        # One role as adapters on the base and the other rewriting that base would leave no base to share.
        raise ConfigError(f"{grounder_settings}.lora",
                          f"agents.topology = shared: {planner_settings}.lora ({lora[planner_settings]}) and "
                          f"{grounder_settings}.lora ({lora[grounder_settings]}) must be equal: both roles as LoRA "
                          "adapters on one base, or both (no LoRA) training one set of weights", source)
    for section, on in lora.items():
        if on and not getattr(config, section).save_adapter:
            raise ConfigError(f"{section}.save_adapter", "agents.topology = shared keeps the roles apart as LoRA "
                                                         f"adapters: set {section}.save_adapter = true", source)
    if config.warm_start.enabled:
        raise ConfigError("warm_start.enabled", "agents.topology = shared starts both roles from the one model: "
                                                "warm-start it beforehand (it would train two copies)", source)
    for dotted in ("sample.backend", "ground.backend"):
        if get_field(config, dotted) == "vllm":
            raise ConfigError(dotted, "agents.topology = shared runs on the hf backend (the adapters are switched in "
                                      "the engine's own model)", source)


# What a curriculum phase may set (``[[schedule.phases]] set``): the sections stages read their knobs from, and the
# stage switches; never the models, the data or the evaluation, so checkpoints and metrics compare across phases.
SETTABLE_SECTIONS = ("sample", "score", "pairs", "dpo", "grpo", "ground", "critic", "sft", "grpo_grounder")
SETTABLE_FIELDS = ("stages.planner_objective", "stages.grounder_objective", "stages.grounder_data")


def _needs(stage: str, config: RunConfig) -> list[str]:
    """The stages of the same iteration whose rows ``stage`` reads."""
    if stage == "score":
        return ["sample"]
    if stage == "pairs":
        return ["score"]
    if stage == "train_planner":  # GRPO makes its own rollouts; DPO trains on the iteration's pairs
        return [] if config.stages.planner_objective == "grpo" else ["pairs"]
    if stage == "ground":  # grounds the sampled plans, chosen by their scores (engine.ranking.select)
        return ["sample", "score"]
    if stage == "critique":
        return ["ground"]
    if stage == "train_grounder":  # GRPO rolls out on the grounded plans' prompts; SFT learns the verdicts
        critic = config.stages.grounder_objective == "sft" and config.stages.grounder_data == "critic"
        return ["ground", "critique"] if critic else ["ground"]
    return []


# Under agents.topology = shared these decide what a checkpoint is (engine.stages.context.one_set_of_weights): a
# LoRA adapter on the one base, or the one set of weights itself.
SHARED_LAYOUT_FIELDS = tuple(f"{section}.{name}" for section in ("dpo", "sft", "grpo", "grpo_grounder")
                             for name in ("lora", "save_adapter"))


def _check_shared_phase(config: RunConfig, phase_config: RunConfig, phase: str, where: str,
                        source: str | None) -> None:
    """A shared-topology phase keeps the run's checkpoint layout: the next phase loads this one's checkpoints, and an
    adapter cannot be read as the one set of weights (or the reverse) -- the run would fail an iteration later."""
    for dotted in SHARED_LAYOUT_FIELDS:
        run_value, phase_value = get_field(config, dotted), get_field(phase_config, dotted)
        if phase_value != run_value:
            raise ConfigError(where, f"{dotted}: agents.topology = shared: phase {phase!r} sets it to "
                                     f"{phase_value}, the run has {run_value}; every phase must keep the run's LoRA "
                                     "settings (its checkpoints are the next phase's agents): set it for the whole "
                                     "run instead", source)
    run_lora, phase_lora = (getattr(c, planner_training(c)).lora for c in (config, phase_config))
    if phase_lora != run_lora:  # no LoRA field changed: an objective switched to a section with other LoRA settings
        dotted = next(d for d in ("stages.planner_objective", "stages.grounder_objective")
                      if get_field(phase_config, d) != get_field(config, d))
        trains = planner_training if "planner" in dotted else grounder_training
        raise ConfigError(where, f"{dotted}: agents.topology = shared: phase {phase!r} sets it to "
                                 f"{get_field(phase_config, dotted)}, whose {trains(phase_config)}.lora is "
                                 f"{phase_lora} where the run's {trains(config)}.lora is {run_lora}; every phase must "
                                 "keep the run's LoRA settings (its checkpoints are the next phase's agents)", source)


def check_schedule(config: RunConfig, source: str | None) -> None:
    names: set[str] = set()
    for index, phase in enumerate(config.schedule.phases, start=1):
        where = f"schedule.phases[{index}]"
        if not phase.name.strip():
            raise ConfigError(f"{where}.name", "required: the phase's name", source)
        if phase.name in names:
            raise ConfigError(f"{where}.name", f"{phase.name!r} names two phases", source)
        names.add(phase.name)
        if not phase.stages:
            raise ConfigError(f"{where}.stages", "name at least one stage", source)
        if len(set(phase.stages)) != len(phase.stages):
            raise ConfigError(f"{where}.stages", f"a stage is named twice: {phase.stages}", source)
        for item in phase.set:
            key = item.partition("=")[0].strip()
            if key.split(".", 1)[0] not in SETTABLE_SECTIONS and key not in SETTABLE_FIELDS:
                raise ConfigError(f"{where}.set", f"{key!r} cannot change per phase (a phase may set "
                                                  f"{', '.join(SETTABLE_SECTIONS)}, {', '.join(SETTABLE_FIELDS)})",
                                  source)
        phase_config = apply_settings(config, phase.set, f"{where}.set", source) if phase.set else config
        if config.agents.topology == "shared":
            _check_shared_phase(config, phase_config, phase.name, f"{where}.set", source)
        for stage in phase.stages:
            missing = [need for need in _needs(stage, phase_config) if need not in phase.stages]
            if missing:
                raise ConfigError(f"{where}.stages", f"{stage} reads the rows {' and '.join(missing)} writes in "
                                                     f"the same iteration: add {', '.join(missing)} to the phase",
                                  source)


def apply_settings(config: RunConfig, settings: list[str], where: str, source: str | None = None) -> RunConfig:
    """A copy of ``config`` with ``section.field=value`` ``settings`` applied and the whole checked (its phases
    aside: checking them again would recurse); every error is reported at ``where`` (``schedule.phases[2].set``)."""
    derived = copy.deepcopy(config)
    try:
        for item in settings:
            key, sep, value = item.partition("=")
            if not sep or "." not in key:
                raise ConfigError(item, "expected section.field=value", source)
            section_name, name = key.strip().split(".", 1)
            section = getattr(derived, section_name, None)
            if section is None or not dataclasses.is_dataclass(section):
                raise ConfigError(key.strip(), "unknown section", source)
            fields = {f.name: f for f in dataclasses.fields(section)}
            if name not in fields:
                raise ConfigError(key.strip(), f"unknown field{suggest(name, fields)}", source)
            hint = typing.get_type_hints(type(section))[name]
            setattr(section, name, coerce(value.strip(), hint, key.strip(), source, text=True,
                                          choices=fields[name].metadata.get("choices")))
        phases, derived.schedule.phases = derived.schedule.phases, []
        validate(derived, source)
        derived.schedule.phases = phases
    except ConfigError as exc:
        raise ConfigError(where, f"{exc.field}: {exc.message}", source) from None
    return derived
