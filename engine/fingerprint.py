"""Content fingerprints of the files a run reads: models, adapters, task files.

Contract: ``run_inputs(config)`` maps each local path the config reads (``INPUT_FIELDS`` and every
``data.sources`` entry's ``path``/``ground``) to ``fingerprint(path)``; a value that names no local file or
directory (empty, or a hub id) is left out, since its name is already in the config. ``fingerprint`` is a sha256
hex digest of a file's bytes, or of a directory's relative file names and their digests (sorted, hidden files
included). A file over ``FULL_HASH_LIMIT`` bytes is hashed from its size and ``SAMPLES`` evenly spaced 1 MiB
windows instead, so a multi-GB checkpoint costs milliseconds: any rebuilt model changes those windows in practice.

Why: an experiment's id and a run's config name model and task *paths*; rebuilding the agents in place keeps
both, so without the contents an experiment would resume onto runs of other agents and report them as its own
(``engine.runner`` compares these fingerprints before it resumes or reuses anything).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from engine.config import RunConfig

INPUT_FIELDS = ("data.tasks", "data.ground", "data.exclude_tasks", "planner.path", "planner.adapter",
                "grounder.path", "grounder.adapter", "critic.model", "tools.corpus")
FULL_HASH_LIMIT = 64 * 2**20
SAMPLES = 16
WINDOW = 2**20


def _file_digest(path: Path) -> str:
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size <= FULL_HASH_LIMIT:
            return hashlib.file_digest(fh, "sha256").hexdigest()
        digest = hashlib.sha256(f"sampled {size}".encode())
        for i in range(SAMPLES):
            fh.seek((size - WINDOW) * i // (SAMPLES - 1))
            digest.update(fh.read(WINDOW))
    return digest.hexdigest()


def fingerprint(path: str | Path) -> str:
    """The sha256 of a file's bytes, or of a directory's sorted (relative name, file digest) list."""
    path = Path(path)
    if path.is_file():
        return _file_digest(path)
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{item.relative_to(path).as_posix()}\0{_file_digest(item)}\n".encode())
    return digest.hexdigest()


def _get(config: RunConfig, dotted: str) -> str:
    section, name = dotted.split(".")
    return str(getattr(getattr(config, section), name) or "")


def run_inputs(config: RunConfig) -> dict[str, str]:
    """{path: fingerprint} of every local file or directory the run reads."""
    fields = [f for f in INPUT_FIELDS if not (config.data.sources and f in ("data.tasks", "data.ground"))]
    paths = [_get(config, f) for f in fields]  # data.tasks/ground are unused when data.sources is given
    for source in config.data.sources:
        paths += [source.path, source.ground]
    return {p: fingerprint(p) for p in dict.fromkeys(paths) if p and Path(p).exists()}
