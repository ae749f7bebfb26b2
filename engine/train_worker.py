"""The training process behind ``launch.mode = "accelerate"``: ``accelerate launch -m engine.train_worker SPEC``.

Started by engine/launch.py, once per rank. It reads ``SPEC`` (JSON written by ``engine.launch.run_training``):

- ``kind``: ``sft`` or ``dpo``; ``settings``: the ``TrainSettings``/``DPOSettings`` fields as a dict;
- ``model``: ``{path, adapter, dtype}`` to train; ``reference``: the same for a DPO reference, or null (then
  ``engine.training.dpo_train`` picks it: adapter off for LoRA, precomputed log-probs, or a frozen copy);
- ``rows``: JSON-lines training rows; ``output_dir``: where the checkpoint goes; ``log``: the JSON-lines log;
  ``done``: a small JSON written last, after the checkpoint; ``parent_pid``: the engine process that launched it.

Every rank loads the model onto its own device (``cuda:LOCAL_RANK``, else the CPU) and calls the same
``engine.training.sft_train``/``dpo_train`` as the in-process path, so the loss, LoRA merge and reference rules are
the same. Only rank 0 writes log lines (one ``json.dumps`` of each TRL log dict, flushed per line so the engine can
stream them) and the checkpoint (full weights, safetensors, plus the tokenizer). Under DeepSpeed ZeRO-3 the
parameters are gathered from all ranks before saving; under FSDP the full state dict is gathered by accelerate.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any


def parent_watch(parent_pid: int | None):
    """A ``should_stop`` for the trainers that exits the worker (status 3, no checkpoint) once the engine that
    launched it is gone. The launch runs in its own session, so a SIGKILLed engine cannot take it down; without
    this an orphaned trainer would keep a GPU busy and could race the resumed run's training. A non-zero exit makes
    the launcher tear down the other ranks too."""

    def check() -> bool:
        if parent_pid:
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(3)
            except PermissionError:  # exists, owned by someone else: not ours to judge
                pass
        return False

    return check


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def rank_progress_path(log: str | Path, rank: int) -> Path:
    """Where a rank writes its optimizer-step count (beside the rank-0 log the engine tails)."""
    return Path(log).with_name(f"rank{rank}.progress.json")


def progress_hook(log: str | Path, should_stop):
    """A ``should_stop`` (polled after every optimizer step, on every rank) that first records this rank's step
    count: the engine shows every worker's progress, not only rank 0's log lines."""
    path, steps = rank_progress_path(log, _rank()), {"n": 0}

    def check() -> bool:
        steps["n"] += 1
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps({"rank": _rank(), "steps": steps["n"]}), encoding="utf-8")
        partial.replace(path)  # a reader never sees half a file
        return should_stop()

    return check


def _device():
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _load(ref: dict[str, Any], device, *, trainable: bool):
    from engine import models

    spec = models.ModelSpec(path=ref["path"], adapter=ref.get("adapter") or None, dtype=ref.get("dtype", "auto"),
                            device=str(device))
    return models.load_model(spec, trainable=trainable)


def _settings(kind: str, values: dict[str, Any]):
    from engine.config import DPOSettings, TrainSettings

    cls = DPOSettings if kind == "dpo" else TrainSettings
    known = {f.name for f in dataclasses.fields(cls)}
    # The SFT section adds data-mixing fields (original_ratio, ...) that the trainer does not take.
    return cls(**{k: v for k, v in values.items() if k in known})


def _full_state_dict(model) -> dict[str, Any] | None:
    """The full weights on rank 0 (None elsewhere); a collective under ZeRO-3/FSDP, so every rank calls it."""
    if any(hasattr(p, "ds_id") for p in model.parameters()):  # ZeRO-3 partitions tag each parameter with ds_id
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
            if _rank() == 0:
                return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        return None
    from torch.distributed.fsdp import FullyShardedDataParallel

    if any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
        from accelerate import Accelerator

        state = Accelerator().get_state_dict(model)  # the shared AcceleratorState of the trainer's run
        return state if _rank() == 0 else None
    return None  # plain or DDP-unwrapped module: save_pretrained reads it directly


def _save(model, tokenizer, output_dir: Path, base: dict[str, Any]) -> None:
    """Rank 0 writes the checkpoint: full weights, or a LoRA run's adapter and the model it applies to (``base``, the
    spec's model reference) as ``engine.models.save_adapter_checkpoint`` does in-process."""
    state = _full_state_dict(model)
    if _rank() != 0:
        return
    from accelerate.utils import extract_model_from_parallel

    from engine.models import write_adapter_base

    plain = extract_model_from_parallel(model)
    output_dir.mkdir(parents=True, exist_ok=True)
    if hasattr(plain, "peft_config"):  # PEFT's save_pretrained keeps only the adapter's keys of a full state
        plain.save_pretrained(output_dir, safe_serialization=True, **({} if state is None else {"state_dict": state}))
        tokenizer.save_pretrained(output_dir)
        write_adapter_base(output_dir, base["path"], base.get("adapter") or "")
        return
    if state is None:
        plain.save_pretrained(output_dir, safe_serialization=True)
    else:
        plain.save_pretrained(output_dir, state_dict=state, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: accelerate launch -m engine.train_worker SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    from engine.training import dpo_train, sft_train

    kind = spec["kind"]
    settings = _settings(kind, spec["settings"])
    with open(spec["rows"], encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    device = _device()
    model, tokenizer = _load(spec["model"], device, trainable=True)
    orphaned = parent_watch(spec.get("parent_pid"))
    step_hook = progress_hook(spec["log"], orphaned)
    log_path = Path(spec["log"])
    log_file = log_path.open("a", encoding="utf-8") if _rank() == 0 else None

    def on_log(logs: dict[str, Any]) -> None:
        if log_file is not None:
            log_file.write(json.dumps(logs, ensure_ascii=False, default=str) + "\n")
            log_file.flush()  # the engine polls this file for live loss curves

    try:
        if kind == "dpo":
            ref_model = None
            if spec.get("reference"):
                ref_model, _ = _load(spec["reference"], device, trainable=False)
                for p in ref_model.parameters():
                    p.requires_grad_(False)
            trained, history = dpo_train(model, tokenizer, rows, settings, ref_model=ref_model, on_log=on_log,
                                         should_stop=step_hook)
        elif kind == "sft":
            trained, history = sft_train(model, tokenizer, rows, settings, on_log=on_log, should_stop=step_hook,
                                         micro_batches=int(spec["settings"].get("micro_batches", 1)))
        else:
            raise ValueError(f"spec kind must be sft or dpo, not {kind!r}")
    finally:
        if log_file is not None:
            log_file.close()
    orphaned()  # the engine may have died during the last step: then nobody wants this checkpoint
    _save(trained, tokenizer, Path(spec["output_dir"]), spec["model"])
    if _rank() == 0:
        Path(spec["done"]).write_text(json.dumps({"log_lines": len(history), "rows": len(rows)}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
