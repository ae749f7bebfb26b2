"""Check what a run will load before any stage starts, so a bad model path fails in a second, not an hour in.

Contract: ``preflight(config)`` raises ``CheckpointError`` (a ``ConfigError`` naming the field, e.g.
``planner.path: /x: no such directory``) for a planner, grounder or hf-critic model that cannot be used:

* a path that is neither a local directory nor a loadable hub id; a directory without ``config.json`` or with a
  config transformers cannot build; an adapter directory without ``adapter_config.json``;
* weight files that are missing, or that do not match the config: a tensor the model needs that no file holds
  (transformers would silently initialise it at random), or a tensor of the wrong shape;
* a tokenizer that does not load, has neither pad nor EOS token, or has more tokens than the model has embedding
  rows (its ids would index past the embedding table), or has no chat template while ``chat_template = "tokenizer"``
  asks for it (every prompt would fail to render);
* a ``device`` naming a CUDA device that is not there; a training section's ``report_to`` naming a logging
  integration whose package is not installed, or a ``vllm`` backend without vLLM (``check_packages``).

It also reads ``sft.original_data`` when set (only the train_grounder stage would read it, iterations later), so a
bad file raises its ``DataError`` now. Only configs, tokenizers and weight-file headers are read: the model is built
on the meta device and no weight is loaded. A hub id that is not a local directory gets the config and tokenizer
checks only (weights are not downloaded here). A missing pad token is not an error (``engine.models.load_tokenizer``
pads with EOS and logs it).

Cautions, for a config that runs but likely not as meant: ``preflight(config, tasks)`` returns them, all of them on
every call, and prints each on stderr as ``warning: ...`` once per process (a command that creates runs and then runs
them, or an experiment's runs of one model set, checks the same config again; stdout stays for a command's JSON). Only
the printing is once: a caller that shows the cautions itself (the studio, through
``engine.loop.create_run_with_cautions``) gets the whole list however often this process met them.

* ``planner.chat_template`` / ``grounder.chat_template`` = ``"lumos"`` with a tokenizer whose own chat template lays
  out a user turn otherwise (an instruct model, prompted in a layout it was not trained on, works poorly): each names
  the field and ``"tokenizer"``. A template that renders the lumos layout (the demo agents') draws none.
* ``tasks`` (the run's, when given) holding train tasks from Lumos iterative records while an iteration samples with
  ``sample.formulation = "onetime"`` (phase settings applied): their steps are joined into one onetime plan; it names
  ``sample.formulation = "iterative"`` (``engine.formulation_caution``).
* ``critic.backend = "openai"`` with a server that does not answer at ``critic.base_url`` now, refuses the key, or
  lists its models without ``critic.model`` (``engine.critics.openai_backend.probe_caution``: one ``GET /models``),
  only when asked (``probe_critic``: a run being created or validated).
* one sampling call whose attention cache alone would take over half the planner device's memory
  (``engine.memory_check``: ``sample.k`` x ``sample.batch_size`` rows); it names the batch size that fits.
* a full fine-tuning too large for its device (``engine.train_memory``); it names the LoRA field and the launch.

``check_stage_agents(store, run_id, iteration, stage, config)`` is the quick check before one stage of a stored run
(``python -m engine step``): every model directory that stage would load -- a configured model, or a checkpoint an
earlier iteration recorded in the store, with the chain of models a LoRA checkpoint applies to -- must still be there;
otherwise ``CheckpointError`` names the directory and where it came from (``grounder.path``, or the iteration and
role of the stored checkpoint). Only existence is checked (a checkpoint the run wrote was complete when recorded).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config import RunConfig
from engine.config_training import GROUNDER_READERS
from engine.errors import CheckpointError
from engine.formulation_caution import formulation_cautions
from engine.model_paths import missing_model_directory

if TYPE_CHECKING:
    from engine.store import Store
    from engine.tasks import Task

_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def preflight(config: RunConfig, tasks: list[Task] | None = None, *, probe_critic: bool = False) -> list[str]:
    """Raise ``CheckpointError``/``DataError`` for the first model or file of ``config`` that cannot be used; return
    every caution (see the module docstring), each printed on stderr only the first time this process meets it.
    ``probe_critic``: also ask an OpenAI-compatible critic's server (a run about to be created, or validated; not a
    resume, an evaluation or a stored run's cautions, whose answer would be stale or beside the point)."""
    cautions = []
    for role in ("planner", "grounder"):
        section = getattr(config, role)
        cautions += check_model(section.path, section.adapter, section.device, role,
                                chat_template=section.chat_template)
    if config.critic.backend == "hf":  # it renders with the tokenizer's own template when there is one
        check_model(config.critic.model, "", "auto", "critic", path_field="critic.model", chat_template=None)
    from engine.package_check import check_packages

    check_packages(config)
    if config.sft.original_data:
        from engine.tasks import load_tasks

        list(load_tasks(config.sft.original_data))
    if tasks is not None:
        cautions += formulation_cautions(config, tasks)
    from engine.memory_check import sampling_memory_caution
    from engine.train_memory import training_memory_caution

    memory = [sampling_memory_caution(config), *(training_memory_caution(config, r) for r in ("planner", "grounder"))]
    cautions += [m for m in memory if m]
    if probe_critic and config.critic.backend == "openai":
        from engine.critics.openai_backend import probe_caution
        from engine.schedule import critiques

        critic = probe_caution(config.critic) if critiques(config) else None
        cautions += [critic] if critic else []
    for caution in cautions:
        warn(caution)
    return cautions


# The cautions this process has printed: one line each, however many times a command checks the same config.
_WARNED: set[str] = set()


def warn(caution: str) -> None:
    """Print ``caution`` on stderr as ``warning: ...``, unless this process printed it before."""
    if caution not in _WARNED:
        _WARNED.add(caution)
        print(f"warning: {caution}", file=sys.stderr)


def check_model(path: str, adapter: str, device: str, role: str, path_field: str | None = None,
                chat_template: str | None = "lumos") -> list[str]:
    """Check one model directory (or hub id), its optional adapter, its tokenizer (and, when ``chat_template`` is
    ``"tokenizer"``, that it has a chat template) and its device. Returns the cautions about it: with
    ``chat_template = "lumos"``, a tokenizer template of another layout (``layout_caution``); ``None`` for a model
    that renders with its tokenizer's template whenever it has one (the hf critic), which draws none."""
    path_field = path_field or f"{role}.path"
    check_device(device, f"{role}.device")
    local = Path(path).expanduser()
    if missing_model_directory(path):  # a local path never goes to the hub (engine.model_paths)
        raise CheckpointError(path_field, f"{path}: no such model directory")
    if adapter and not (Path(adapter) / "adapter_config.json").is_file():
        raise CheckpointError(f"{role}.adapter", f"{adapter}: not a LoRA adapter directory (no adapter_config.json)")
    model = _meta_model(path, path_field, local.is_dir())
    if local.is_dir():
        _check_weights(local, model, path_field)
    tokenizer_path = adapter or path
    try:
        from engine.models import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_path)
    except CheckpointError as exc:
        raise CheckpointError(f"{role}.adapter" if adapter else path_field, exc.message) from None
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for a bad tokenizer
        raise CheckpointError(f"{role}.adapter" if adapter else path_field,
                              f"{tokenizer_path}: the tokenizer does not load: {_first_line(exc)}") from None
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        raise CheckpointError(path_field, f"{path}: the tokenizer has {len(tokenizer)} tokens but the model has "
                                          f"{rows} embedding rows; this tokenizer does not belong to this model")
    if chat_template == "tokenizer" and not getattr(tokenizer, "chat_template", None):
        raise CheckpointError(f"{role}.chat_template", f"'tokenizer' asks for the tokenizer's own chat template, but "
                                                       f"{tokenizer_path} has none: use \"lumos\" (the <|user|>/"
                                                       "<|assistant|> layout) or give the tokenizer a template")
    caution = layout_caution(tokenizer, tokenizer_path, role) if chat_template == "lumos" else None
    return [caution] if caution else []


def layout_caution(tokenizer: Any, tokenizer_path: str, role: str) -> str | None:
    """The caution for ``{role}.chat_template = "lumos"`` with a tokenizer whose own chat template renders a user
    turn in another layout (None: no template, or one that renders the lumos layout, as the demo agents' does). One
    user turn is compared, not a longer chat: templates that are the lumos layout part in details after an assistant
    turn (the demo one drops the newline after EOS), and the question is only which layout the model was taught."""
    from engine.prompts import render_chat

    if not getattr(tokenizer, "chat_template", None):
        return None
    probe = [{"role": "user", "content": "Q"}]
    try:
        own = render_chat(probe, "tokenizer", tokenizer, add_generation_prompt=True)
    except Exception:  # jinja raises anything: a template that cannot render one user turn is no layout to advise
        return None
    if own == render_chat(probe, "lumos", tokenizer, add_generation_prompt=True):
        return None
    return (f"{role}.chat_template = \"lumos\": {tokenizer_path} has a chat template of its own, which lays a "
            f"prompt out otherwise ({own[:60]!r}), and the {role} will be prompted in the Lumos <|user|>/<|assistant|>"
            f" layout instead; an instruct model prompted in a layout it was not trained on works poorly. Set "
            f"{role}.chat_template = \"tokenizer\" to prompt it with its own template (keep \"lumos\" for a model "
            "fine-tuned on the Lumos layout)")


# The agents each stage loads, by role: the ones its iteration starts from (offset 0) or, for evaluate, the ones it
# ends with (offset 1, what the iteration's training left). A few stages load more by their settings
# (``_stage_needs``); pairs and critique (a reference or remote critic) load none.
STAGE_AGENTS: dict[str, tuple[tuple[str, int], ...]] = {
    "sample": (("planner", 0),),
    "score": (("grounder", 0),),
    "train_planner": (("planner", 0),),
    "ground": (("grounder", 0),),
    "train_grounder": (("grounder", 0),),
    "evaluate": (("planner", 1), ("grounder", 1)),
    "warm_start_planner": (("planner", 0),),
    "warm_start_grounder": (("grounder", 0),),
}


def _stage_needs(stage: str, iteration: int, config: RunConfig) -> list[tuple[str, int]]:
    """``(role, iteration whose starting agent is loaded)`` for every agent ``stage`` of ``iteration`` loads."""
    needs = [(role, iteration + offset) for role, offset in STAGE_AGENTS.get(stage, ())]
    if stage == "train_planner" and config.stages.planner_objective == "grpo" \
            and GROUNDER_READERS.intersection(config.grpo.rewards):
        needs.append(("grounder", iteration))  # gap scores rollouts with the grounder, execution grounds them with it
    if stage == "train_planner" and config.stages.planner_objective == "dpo" and config.dpo.reference == "initial" \
            and iteration > 1:
        needs.append(("planner", 1))  # the frozen DPO reference: the planner iteration 1 started from
    return needs


def check_stage_agents(store: Store, run_id: str, iteration: int, stage: str, config: RunConfig) -> None:
    """Raise ``CheckpointError`` for the first model directory ``stage`` of ``iteration`` would load that is gone
    (``config``: the iteration's own, phase settings applied). Nothing is loaded or written."""
    from engine.stages.context import StageContext

    run = store.get_run(run_id)
    ctx = StageContext(store, run_id, iteration, config, Path(run["run_dir"]) / run_id, stage=stage)
    what = f"{stage} of iteration {iteration}"
    for role, at in _stage_needs(stage, iteration, config):
        path = ctx.agent_path(role, at)
        section = getattr(config, role)
        if path == section.path:
            if _gone(path):
                raise CheckpointError(f"{role}.path", f"{path}: no such model directory ({what} loads the "
                                                      f"configured {role})")
            if section.adapter and not Path(section.adapter).expanduser().is_dir():
                raise CheckpointError(f"{role}.adapter", f"{section.adapter}: no such adapter directory ({what} "
                                                         f"loads the configured {role} with it)")
            continue
        t, writer = _recorded_by(store, run_id, path, at)
        if t is None:  # not expected: agent_path returns the configured path or a recorded one
            field, origin, again = f"{role} checkpoint", "a checkpoint the store records", "restore it"
        else:
            writer_stage = ("warm_start_" if t == 0 else "train_") + writer
            field, origin = f"iteration {t} {writer} checkpoint", f"the {writer} iteration {t} recorded in the store"
            again = (f"restore it, or run `python -m engine step {writer_stage} --run {run_id} --iteration {t}` "
                     "again to write it anew")
        if _gone(path):
            raise CheckpointError(field, f"{path}: no such directory ({origin}; {what} loads it): {again}")
        _check_adapter_chain(path, field, what, again)
    if stage == "critique" and config.critic.backend == "hf" and _gone(config.critic.model):
        raise CheckpointError("critic.model", f"{config.critic.model}: no such model directory ({what} loads the "
                                              "hf critic)")


def _gone(path: str) -> bool:
    """What ``check_model`` refuses first: no directory here and no hub id (``engine.model_paths``)."""
    return missing_model_directory(path)


def _recorded_by(store: Store, run_id: str, path: str, last: int) -> tuple[int | None, str]:
    """``(iteration, role)`` of the earliest checkpoint row of iterations up to ``last`` holding ``path``: the stage
    that wrote it (a later skipped training records the same path again, as "unchanged")."""
    for t in range(last + 1):
        for role in ("planner", "grounder"):
            found = store.checkpoint(run_id, t, role)
            if found and found["path"] == path:
                return t, role
    return None, "agent"


def _check_adapter_chain(path: str, field: str, what: str, again: str) -> None:
    """A run's LoRA checkpoint applies to the model its ``moat_base.json`` names (perhaps an earlier checkpoint):
    each one down to the full model must be there."""
    from engine.models import adapter_chain, is_adapter_checkpoint

    if not is_adapter_checkpoint(path):
        return
    try:
        base, adapters = adapter_chain(path)
    except (OSError, ValueError, KeyError) as exc:  # an unreadable or looping moat_base.json
        raise CheckpointError(field, f"{path}: its chain of adapter checkpoints cannot be read: {_first_line(exc)}"
                              f" ({what} loads it): {again}") from None
    if _gone(base.path):
        raise CheckpointError(field, f"{path}: the adapter checkpoint {adapters[0]} applies to {base.path}, which is "
                                     f"no model directory any more ({what} loads it): restore that directory")
    if base.adapter and not Path(base.adapter).expanduser().is_dir():
        raise CheckpointError(field, f"{path}: the adapter checkpoint {adapters[0]} applies to {base.path} with the "
                                     f"adapter {base.adapter}, which is gone ({what} loads it): restore that "
                                     "directory")


def check_device(device: str, field: str) -> None:
    """Raise ``CheckpointError`` (named ``field``) for a CUDA device this machine does not have."""
    import torch

    if not device.startswith("cuda"):
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.split(":", 1)[1]) if ":" in device and device.split(":", 1)[1].isdigit() else 0
    if index >= count:
        raise CheckpointError(field, f"{device!r} requested but this machine has {count} CUDA device(s)")


def _meta_model(path: str, field: str, local: bool):
    """The model built from its config on the meta device (no memory, no weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if local and not (Path(path).expanduser() / "config.json").is_file():
        raise CheckpointError(field, f"{path}: no config.json (not a transformers model directory)")
    try:
        model_config = AutoConfig.from_pretrained(path)
        with torch.device("meta"):
            # dtype=None: built in the default dtype, which transformers then leaves alone. With the config's own
            # dtype (the demo agents' say float16) it switches torch's default dtype for the whole process while it
            # builds, and a job thread loading a model at that moment (the studio checks a picked run's config
            # beside its jobs) got half its weights in float16: "expected m1 and m2 to have the same dtype".
            return AutoModelForCausalLM.from_config(model_config, dtype=None)
    except Exception as exc:  # a bad/unknown config, or a hub id that cannot be resolved
        raise CheckpointError(field, f"{path}: cannot build a causal LM from its config: {_first_line(exc)}") from None


def _checkpoint_shapes(directory: Path, field: str) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from the weight files' headers (safetensors) or a meta-mapped torch file."""
    files: list[Path] = []
    for index in _WEIGHT_INDEXES:
        if (directory / index).is_file():
            try:
                weight_map = json.loads((directory / index).read_text(encoding="utf-8")).get("weight_map", {})
            except (ValueError, AttributeError) as exc:  # not JSON, or JSON that is not an object
                raise CheckpointError(field, f"{directory / index}: not a weight index: {_first_line(exc)}") from None
            files = [directory / name for name in sorted(set(weight_map.values()))]
            break
    else:
        files = [directory / name for name in _WEIGHT_FILES if (directory / name).is_file()][:1]
    if not files:
        raise CheckpointError(field, f"{directory}: no weights (expected model.safetensors, pytorch_model.bin or a "
                                     "sharded index)")
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        if not file.is_file():
            raise CheckpointError(field, f"{directory}: the weight index names {file.name}, which is missing")
        try:
            if file.suffix == ".safetensors":
                from safetensors import safe_open

                with safe_open(str(file), "pt") as handle:
                    shapes.update({k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()})
            else:
                import torch

                state = torch.load(str(file), map_location="meta", weights_only=True, mmap=True)
                shapes.update({k: tuple(v.shape) for k, v in state.items()})
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(field, f"{file}: unreadable weight file: {_first_line(exc)}") from None
    return shapes


def _check_weights(directory: Path, model, field: str) -> None:
    saved = _checkpoint_shapes(directory, field)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    prefix = f"{model.base_model_prefix}." if getattr(model, "base_model_prefix", "") else ""
    # A base-model checkpoint ("layers.0...") loads into the causal LM ("model.layers.0..."): compare on that basis.
    saved = {(k if k in expected or not prefix else prefix + k): v for k, v in saved.items()}
    tied = set(getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or ())
    missing = sorted(k for k in expected if k not in saved and k not in tied)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise CheckpointError(field, f"{directory}: the weights lack {len(missing)} tensor(s) the config needs "
                                     f"({shown}); the checkpoint does not match its config.json")
    wrong = [(k, saved[k], shape) for k, shape in expected.items() if k in saved and saved[k] != shape]
    if wrong:
        name, got, want = wrong[0]
        raise CheckpointError(field, f"{directory}: {name} has shape {list(got)} in the weights but {list(want)} "
                                     "in config.json; the checkpoint does not match its config")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

