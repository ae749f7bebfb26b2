"""Checking a run config: each value against its field's type, range and choices, the rules that tie fields
together, and the secret rules (see ``engine.config``'s docstring). Every problem raises ``ConfigError`` naming the
dotted field; messages about secrets never echo the value.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import re
import types
import typing
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError

if TYPE_CHECKING:
    from engine.config import RunConfig

# Field names and values that carry a secret (see the module docstring); the *_env fields hold variable NAMES.
KEY_FIELD = re.compile(r"(api_?key|token|secret|passw(or)?d)$", re.IGNORECASE)
KEY_VALUE = re.compile(r"(?<![A-Za-z0-9])(sk-[A-Za-z0-9_-]{12,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
                       r"|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})|Bearer\s+\S+|://[^/\s:@]+:[^/\s@]+@")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
KEY_ENV_FIELDS = ("critic.api_key_env", "tools.qa_api_key_env")
USE_KEY_ENV = ("never write a key in a config (it is stored with the run and shown in the studio): put it in an "
               "environment variable and set critic.api_key_env (or tools.qa_api_key_env) to that variable's NAME")


def range_text(meta: dict[str, Any]) -> str:
    """``>= 1``, ``> 0``, ``in (0, 1]`` from a field's bounds."""
    def num(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"

    low = f"[{num(meta['ge'])}" if meta["ge"] is not None else f"({num(meta['gt'])}" if meta["gt"] is not None \
        else None
    high = f"{num(meta['le'])}]" if meta["le"] is not None else f"{num(meta['lt'])})" if meta["lt"] is not None \
        else None
    if low and high:
        return f"in {low}, {high}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {low[1:]}"
    return f"{'<=' if high[-1] == ']' else '<'} {high[:-1]}"


def check_field(value: Any, meta: dict[str, Any], dotted: str, source: str | None) -> None:
    """A field's declared range or choices (declared with ``engine.config_fields.setting``)."""
    choices = meta.get("choices")
    if choices:
        for item in value if isinstance(value, list) else [value]:
            if item not in choices:
                hint = difflib.get_close_matches(str(item), choices, n=1)
                suggest = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise ConfigError(dotted, f"{item!r} is not one of {', '.join(choices)}{suggest}", source)
    bounds = {k: meta.get(k) for k in ("ge", "gt", "le", "lt")}
    if all(b is None for b in bounds.values()):
        return
    ok = ((bounds["ge"] is None or value >= bounds["ge"]) and (bounds["gt"] is None or value > bounds["gt"])
          and (bounds["le"] is None or value <= bounds["le"]) and (bounds["lt"] is None or value < bounds["lt"]))
    if not ok:
        why = f" ({meta['why']})" if meta.get("why") else ""
        raise ConfigError(dotted, f"must be {range_text(bounds)}{why}, got {value!r}", source)


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
    for dotted, settings in (("sample.backend", config.dpo), ("ground.backend", config.sft)):
        if get_field(config, dotted) == "vllm" and settings.lora and settings.save_adapter:
            # vLLM loads a model directory; a run's adapter checkpoint is an adapter plus the model it applies to.
            section = "dpo" if settings is config.dpo else "sft"
            raise ConfigError(f"{section}.save_adapter", f"with {dotted} = vllm the checkpoints must be full weights: "
                                                         f"set {section}.save_adapter = false", source)
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


def get_field(config: RunConfig, dotted: str) -> Any:
    section, name = dotted.split(".", 1)
    return getattr(getattr(config, section), name)


def coerce(value: Any, annotation: Any, dotted: str, source: str | None) -> Any:
    """Check/convert one value against its field type; strings from --set are parsed as JSON when possible."""
    texts = value if isinstance(value, list) else [value]
    if any(isinstance(v, str) and KEY_VALUE.search(v) for v in texts):  # checked first: later errors echo values
        raise ConfigError(dotted, f"looks like a key or a URL with a password; {USE_KEY_ENV}", source)
    hint = annotation
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
        origin = typing.get_origin(hint)
    if origin is list and dataclasses.is_dataclass(typing.get_args(hint)[0]):
        return _coerce_tables(value, typing.get_args(hint)[0], dotted, source)
    if origin is list:
        if isinstance(value, str) and value.startswith("["):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(dotted, f"expected a JSON list: {exc.msg} at column {exc.colno}", source) from None
        elif isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(dotted, f"expected a list of strings, got {value!r}", source)
        return list(value)
    if hint is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        if not isinstance(value, bool):
            raise ConfigError(dotted, f"expected true or false, got {value!r}", source)
        return value
    if hint in (int, float):
        if isinstance(value, bool):
            raise ConfigError(dotted, f"expected a number, got {value!r}", source)
        try:
            converted = hint(value)
        except (TypeError, ValueError):
            raise ConfigError(dotted, f"expected {'an integer' if hint is int else 'a number'}, got {value!r}",
                              source) from None
        if hint is int and isinstance(value, float) and not value.is_integer():
            raise ConfigError(dotted, f"expected an integer, got {value!r}", source)
        if hint is float and not math.isfinite(converted):  # "nan" and "inf" parse, and slip past every range
            raise ConfigError(dotted, f"expected a finite number, got {value!r}", source)
        return converted
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(dotted, f"expected a string, got {value!r}", source)
        return str(value)
    return value


def _coerce_tables(value: Any, cls: type, dotted: str, source: str | None) -> list[Any]:
    """A list of tables (``[[data.sources]]``; from ``--set``: a JSON list of objects) as ``cls`` instances, each
    field coerced and range-checked; errors name the item, 1-based: ``data.sources[2].format``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(dotted, f"expected a JSON list of tables: {exc.msg} at column {exc.colno}",
                              source) from None
    if not isinstance(value, list):
        raise ConfigError(dotted, f"expected a list of tables ([[{dotted}]]), got {value!r}", source)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    items = []
    for index, item in enumerate(value, start=1):
        where = f"{dotted}[{index}]"
        if dataclasses.is_dataclass(item):
            item = dataclasses.asdict(item)
        if not isinstance(item, dict):
            raise ConfigError(where, f"expected a table of fields, got {item!r}", source)
        values = {}
        for name, raw in item.items():
            if name not in fields:
                if KEY_FIELD.search(str(name)):
                    raise ConfigError(f"{where}.{name}", USE_KEY_ENV, source)
                raise ConfigError(f"{where}.{name}", f"unknown field{suggest(name, fields)} (known: "
                                                     f"{', '.join(fields)})", source)
            values[name] = coerce(raw, hints[name], f"{where}.{name}", source)
            check_field(values[name], dict(fields[name].metadata), f"{where}.{name}", source)
        items.append(cls(**values))
    return items


def suggest(name: Any, known: Any) -> str:
    """``; did you mean 'k'?`` for a misspelt name, else nothing."""
    close = difflib.get_close_matches(str(name), sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


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
    planner_settings = "grpo" if config.stages.planner_objective == "grpo" else "dpo"
    grounder_settings = "grpo_grounder" if config.stages.grounder_objective == "grpo" else "sft"
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
            setattr(section, name, coerce(value.strip(), hint, key.strip(), source))
        phases, derived.schedule.phases = derived.schedule.phases, []
        validate(derived, source)
        derived.schedule.phases = phases
    except ConfigError as exc:
        raise ConfigError(where, f"{exc.field}: {exc.message}", source) from None
    return derived
