"""Loading causal LMs (local dir or hub id, optional LoRA adapter) and the two kernels the loop runs on them.

- ``generate``: batched sampling or greedy decoding of one or several continuations per prompt.
- ``score_targets``: the mean negative log-likelihood of each target (its tokens plus EOS) given its prompt. Prompt
  and target are tokenized separately and concatenated, prompt and padding positions are masked, so a batched
  result equals scoring the pair alone (right padding never changes the logits of earlier positions).

Both take plain strings and return plain Python values; they know nothing about tasks, plans or the store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class ModelSpec:
    path: str  # local directory or hub id
    adapter: str | None = None  # LoRA adapter directory applied on top (merged for inference)
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16; auto = bf16 on CUDA, fp32 on CPU
    device: str = "auto"  # auto | cpu | cuda | cuda:N


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # many base LMs ship without one; EOS is the usual stand-in
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(spec: ModelSpec, *, trainable: bool = False):
    """Return ``(model, tokenizer)``; an adapter is merged so inference runs on plain weights."""
    from transformers import AutoModelForCausalLM

    device = resolve_device(spec.device)
    model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=resolve_dtype(spec.dtype, device))
    if spec.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, spec.adapter).merge_and_unload()
    model.to(device)
    model.train(trainable)
    return model, load_tokenizer(spec.adapter or spec.path)


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


def _encode(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    # No special tokens: prompts are rendered in full (chat layout included) by engine.prompts.
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


@torch.no_grad()
def score_targets(model, tokenizer, prompts: Sequence[str], targets: Sequence[str], *, batch_size: int = 16,
                  max_length: int | None = None) -> list[float]:
    """Mean NLL (natural log) per target token, EOS included; ``exp`` of it is the perplexity.

    Pairs are scored in length-sorted batches (less padding) and returned in input order.
    """
    if len(prompts) != len(targets):
        raise ValueError(f"{len(prompts)} prompts but {len(targets)} targets")
    prompt_ids = _encode(tokenizer, prompts)
    target_ids = [ids + [tokenizer.eos_token_id] for ids in _encode(tokenizer, targets)]
    order = sorted(range(len(prompts)), key=lambda i: len(prompt_ids[i]) + len(target_ids[i]))
    device = _device_of(model)
    results: list[float] = [math.nan] * len(prompts)
    was_training = model.training
    model.eval()
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        rows = [prompt_ids[i] + target_ids[i] for i in batch]
        if max_length is not None:
            rows = [r[-max_length:] for r in rows]  # keep the target: truncate the prompt's start
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        for row, i in enumerate(batch):
            ids = rows[row]
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention[row, :len(ids)] = 1
            n_target = min(len(target_ids[i]), len(ids) - 1)
            labels[row, len(ids) - n_target:len(ids)] = torch.tensor(ids[len(ids) - n_target:])
        input_ids, attention, labels = input_ids.to(device), attention.to(device), labels.to(device)
        logits = model(input_ids=input_ids, attention_mask=attention).logits.float()
        logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
        shifted = labels[:, 1:]
        mask = shifted != -100
        token_lp = logprobs.gather(-1, shifted.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask
        nll = -(token_lp.sum(-1) / mask.sum(-1).clamp(min=1))
        for row, i in enumerate(batch):
            results[i] = float(nll[row])
    model.train(was_training)
    return results


@dataclass
class GenerationConfig:
    max_new_tokens: int = 128
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    num_return_sequences: int = 1
    batch_size: int = 16  # prompts per generate call


@torch.no_grad()
def generate(model, tokenizer, prompts: Sequence[str], config: GenerationConfig, *,
             seed: int | None = None) -> list[list[str]]:
    """``num_return_sequences`` continuations per prompt (text after the prompt, special tokens removed)."""
    if seed is not None:
        torch.manual_seed(seed)
    device = _device_of(model)
    was_training = model.training
    model.eval()
    outputs: list[list[str]] = []
    sample = config.temperature > 0
    for start in range(0, len(prompts), config.batch_size):
        chunk = list(prompts[start:start + config.batch_size])
        encoded = _encode(tokenizer, chunk)
        width = max(len(ids) for ids in encoded)
        # Left padding keeps every prompt's last token at the same position, where generation starts.
        input_ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, width - len(ids):] = torch.tensor(ids)
            attention[row, width - len(ids):] = 1
        kwargs = dict(max_new_tokens=config.max_new_tokens, num_return_sequences=config.num_return_sequences,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, do_sample=sample)
        if sample:
            kwargs.update(temperature=config.temperature, top_p=config.top_p, top_k=0)
        generated = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device), **kwargs)
        new_tokens = generated[:, width:]
        texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        k = config.num_return_sequences
        outputs.extend([t.strip() for t in texts[i * k:(i + 1) * k]] for i in range(len(chunk)))
    model.train(was_training)
    return outputs
