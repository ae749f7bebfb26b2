"""One base model in two roles: the planner and the grounder as LoRA adapters on the same weights in memory.

``agents.topology = "shared"`` (with LoRA checkpoints, see ``engine.config_checks``) makes every role's checkpoint
a chain of adapters back to one base model. ``SharedBase`` loads that base once, adds each adapter of each role's
chain to one ``PeftModel`` under its own name, and hands out a ``RoleModel`` per (role, checkpoint): a thin view
that activates exactly that chain's adapters before each forward or ``generate`` call. Several active LoRA adapters
add their deltas (``x (W + sum_i s_i B_i A_i)``), so a role's outputs equal those of its chain merged into the base
(``engine.models.load_model``) up to float rounding, while memory holds one base and a few MB of adapters instead of
two full copies. The base and every adapter stay frozen here: training loads its own model (``engine.stages.train``)
and writes a new adapter for the role that trains, so a role's adapters change only when that role trains.

Without LoRA (``dpo/grpo.lora`` and ``sft.lora`` off) there is nothing to switch: both roles are one set of weights,
trained on each role's data in turn, and ``engine.stages.context.latest_weights`` hands every stage the newest of
them; this module is not used then.

Contract: one thread drives a ``SharedBase`` (the loop's stages run one after another); a role whose checkpoint is
not an adapter chain on the shared base raises ``CheckpointError`` naming both paths.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from engine.errors import CheckpointError
from engine.models import ModelSpec, adapter_chain, load_model, load_tokenizer


def _same_path(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve() if Path(a).exists() and Path(b).exists() else a == b


def adapter_name(path: str) -> str:
    """A stable, peft-safe adapter name for an adapter directory (peft names may not contain dots or slashes)."""
    return "a" + hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:12]


class RoleModel:
    """A role's view of the shared model: the base with this role's adapter chain switched on.

    Forwards every attribute to the underlying transformers model (config, device, generation_config, ...), so the
    engine's kernels use it like any causal LM; ``__call__``, ``forward`` and ``generate`` switch the adapters first.
    """

    def __init__(self, shared: SharedBase, role: str, adapters: list[str]):
        self._shared, self.role, self.adapters = shared, role, adapters

    @property
    def forward(self):
        hf_forward = self._shared.model.forward

        @functools.wraps(hf_forward)  # keeps the signature: the kernels inspect it for the cache argument's name
        def forward(*args: Any, **kwargs: Any):
            self._shared.activate(self.adapters)
            return hf_forward(*args, **kwargs)

        return forward

    def __call__(self, *args: Any, **kwargs: Any):
        self._shared.activate(self.adapters)
        return self._shared.model(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any):
        self._shared.activate(self.adapters)
        return self._shared.model.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # only called for what this class does not define
        if name.startswith("_shared"):  # not set yet (copy/pickle): never recurse
            raise AttributeError(name)
        return getattr(self._shared.model, name)


class SharedBase:
    """The base model loaded once, every role's adapters on it; ``role_model(role, path)`` hands out the views."""

    def __init__(self, base: ModelSpec):
        self.spec = base
        self.model, _ = load_model(base, trainable=False)  # a configured adapter (agent.adapter) is merged in
        self.model.requires_grad_(False)
        self._peft = None  # the PeftModel wrapping self.model, made when the first adapter arrives
        self._loaded: set[str] = set()
        self._active: tuple[str, ...] | None = None

    def role_model(self, role: str, path: str) -> tuple[RoleModel, Any]:
        """``(model view, tokenizer)`` of ``role`` at checkpoint ``path``: the base, or an adapter chain on it."""
        root, chain = adapter_chain(path)
        if not _same_path(root.path, self.spec.path) or (root.adapter or None) != (self.spec.adapter or None):
            raise CheckpointError(f"{role}.path", f"{path} applies to {root.path}, not to the shared base "
                                                  f"{self.spec.path}: with agents.topology = shared both roles' "
                                                  "checkpoints must be LoRA adapters on one base (dpo.lora, sft.lora "
                                                  "and save_adapter = true)")
        names = [self._load(adapter) for adapter in chain]
        return RoleModel(self, role, names), load_tokenizer(path)

    def _load(self, adapter_dir: str) -> str:
        from peft import PeftModel

        name = adapter_name(adapter_dir)
        if name in self._loaded:
            return name
        if self._peft is None:
            self._peft = PeftModel.from_pretrained(self.model, adapter_dir, adapter_name=name, is_trainable=False)
        else:
            self._peft.load_adapter(adapter_dir, adapter_name=name, is_trainable=False)
        self._peft.requires_grad_(False)
        self._loaded.add(name)
        self._active = None  # loading may change which adapter is active
        return name

    def activate(self, names: list[str]) -> None:
        """Switch on exactly ``names`` (none: the plain base). Cheap when they are already the active set."""
        wanted = tuple(names)
        if wanted == self._active or self._peft is None:
            return
        lora = self._peft.base_model
        if wanted:
            lora.enable_adapter_layers()
            lora.set_adapter(list(wanted), inference_mode=True)
        else:
            lora.disable_adapter_layers()
        self._active = wanted

    def describe(self) -> str:
        """One line for a stage's counts: what the shared model holds now."""
        parameters = sum(p.numel() for p in self.model.parameters())
        return (f"one base in both roles ({self.spec.path}): {len(self._loaded)} LoRA adapter(s) on it, "
                f"{parameters / 1e6:.1f}M parameters in memory")

    def parameter_bytes(self) -> int:
        """Bytes of every tensor held: the base once plus each loaded adapter (what the topology saves)."""
        return sum(p.numel() * p.element_size() for p in self.model.parameters())
