"""Check what a run will load before any stage starts, so a bad model path fails in a second, not an hour in.

Contract: ``preflight(config)`` raises ``CheckpointError`` (a ``ConfigError`` naming the field, e.g.
``planner.path: /x: no such directory``) for a planner, grounder or hf-critic model that cannot be used:

* a path that is neither a local directory nor a loadable hub id; a directory without ``config.json`` or with a
  config transformers cannot build; an adapter directory without ``adapter_config.json``;
* weight files that are missing, or that do not match the config: a tensor the model needs that no file holds
  (transformers would silently initialise it at random), or a tensor of the wrong shape;
* a tokenizer that does not load, has neither pad nor EOS token, or has more tokens than the model has embedding
  rows (its ids would index past the embedding table);
* a ``device`` naming a CUDA device that is not there.

It also reads ``sft.original_data`` when set (only the train_grounder stage would read it, iterations later), so a
bad file raises its ``DataError`` now. Only configs, tokenizers and weight-file headers are read: the model is built
on the meta device and no weight is loaded. A hub id that is not a local directory gets the config and tokenizer
checks only (weights are not downloaded here). ``preflight`` returns nothing; a missing pad token is not an error
(``engine.models.load_tokenizer`` pads with EOS and logs it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from engine.config import RunConfig
from engine.errors import CheckpointError

_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+\Z")  # "org/name"; anything else that is not a directory is a local path
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def preflight(config: RunConfig) -> None:
    """Raise ``CheckpointError``/``DataError`` for the first model or file of ``config`` that cannot be used."""
    for role in ("planner", "grounder"):
        section = getattr(config, role)
        check_model(section.path, section.adapter, section.device, role)
    if config.critic.backend == "hf":
        check_model(config.critic.model, "", "auto", "critic", path_field="critic.model")
    if config.sft.original_data:
        from engine.tasks import load_tasks

        list(load_tasks(config.sft.original_data))


def check_model(path: str, adapter: str, device: str, role: str, path_field: str | None = None) -> None:
    """Check one model directory (or hub id), its optional adapter, its tokenizer and its device."""
    path_field = path_field or f"{role}.path"
    _check_device(device, f"{role}.device")
    local = Path(path).expanduser()
    if not local.is_dir() and (local.exists() or not _HUB_ID.match(path)):
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


def _check_device(device: str, field: str) -> None:
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
            return AutoModelForCausalLM.from_config(model_config)
    except Exception as exc:  # a bad/unknown config, or a hub id that cannot be resolved
        raise CheckpointError(field, f"{path}: cannot build a causal LM from its config: {_first_line(exc)}") from None


def _checkpoint_shapes(directory: Path, field: str) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from the weight files' headers (safetensors) or a meta-mapped torch file."""
    files: list[Path] = []
    for index in _WEIGHT_INDEXES:
        if (directory / index).is_file():
            weight_map = json.loads((directory / index).read_text(encoding="utf-8")).get("weight_map", {})
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

