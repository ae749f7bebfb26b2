"""Experiment files: variants x seeds of one run config, each run an ordinary run of the store.

Contract: ``load_experiment(path)`` reads a TOML file

```toml
[experiment]
name = "ablations"              # letters, digits, _ . -; prefixes the experiment id and the run names
base = "../demo.toml"           # the run config every variant starts from, relative to this file
seeds = [11, 12, 13]            # one run per variant and seed (run.seed)
iterations = 3                  # run.iterations of every run (default: the base config's)
set = []                        # section.field=value overrides applied to every variant (then the command
                                # line's --set, if any: part of the definition, hence of the id)
baseline = "full"               # optional: the variant the report compares the others with (default: full)
swap = ["full"]                 # optional: variants whose runs also get the planner x grounder swap table
[variants.full]
set = []                        # this variant's overrides, applied after the shared ones
```

and returns a validated ``Experiment``; every problem raises ``ConfigError`` naming the file and the field
(``experiment.seeds``, ``variants.no_stage1.set``): an unknown table or key (with the closest known name suggested),
a wrong type, a missing base file. The base file is loaded with ``engine.config.load_config`` (its own errors name
it), then every variant's config -- base + shared ``set`` + the variant's ``set`` + seed + iterations -- is
validated the same way before anything runs, so a bad override fails up front as ``variants.<name>.set: <field>:
<problem>``. Paths inside the base config (``data.tasks``, model paths) stay relative to the working directory, as
for every run config.

A run's config is the base + ``experiment.set`` + ``variants.<v>.set`` + ``run.seed=<seed>`` +
``run.iterations=<N>`` + ``run.name=<name>/<variant>/s<seed>``. The experiment id is ``<name>-<8 hex>``: the sha256 of
the canonical JSON of the *definition* -- the loaded base config (without ``run.name``/``run.seed``/
``run.iterations``, which every run overrides), the shared set and the variants' sets. Seeds and iterations only
choose what to run, so running more seeds or iterations keeps the id, and any change that alters what a run computes
gives a new one -- except the *contents* of the model and task files it names, which ``to_json`` records as
``inputs`` (``engine.fingerprint``) and ``engine.runner`` checks instead, so ids stay stable across checkouts;
``baseline`` only tells the report what to compare with, and ``swap`` which runs get the
planner x grounder swap table (``engine.runner.swap_finished``), so neither is hashed. This module
knows nothing of stores or processes (``engine.runner`` runs an experiment).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config import SEED_MAX, RunConfig, config_to_dict, load_config, parse_overrides
from engine.config_file import read_config_file
from engine.config_lines import file_line_source
from engine.config_values import suggest
from engine.errors import ConfigError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
TABLES = ("experiment", "variants")
EXPERIMENT_KEYS = ("name", "base", "seeds", "iterations", "set", "baseline", "swap")
VARIANT_KEYS = ("set",)
RUN_OWNED = ("name", "seed", "iterations")  # run.* fields each run overrides: not part of the definition


@dataclass(frozen=True)
class Variant:
    name: str  # the [variants.<name>] table
    set: tuple[str, ...] = ()  # its section.field=value overrides, applied after the experiment's shared ones


@dataclass
class Experiment:
    name: str  # prefixes the experiment id and every run name
    source: Path  # the experiment file
    base: Path  # the run config every variant starts from (resolved against the experiment file)
    seeds: list[int]  # run.seed of each run, in the file's order
    iterations: int  # run.iterations of each run
    set: list[str]  # overrides for every variant
    variants: dict[str, Variant]  # in the file's order
    base_config: dict[str, Any] = field(repr=False, default_factory=dict)  # config_to_dict of the loaded base
    baseline: str | None = None  # the variant the report's paired tests compare the others with (None: none)
    swap: list[str] = field(default_factory=list)  # variants whose finished runs get the swap table (engine.swap)

    def definition(self) -> dict[str, Any]:
        """What the runs compute: hashed into the id (seeds and iterations only choose what to run)."""
        base = json.loads(json.dumps(self.base_config))
        for key in RUN_OWNED:
            base.get("run", {}).pop(key, None)
        return {"name": self.name, "base": base, "set": list(self.set),
                "variants": {v.name: list(v.set) for v in self.variants.values()}}

    @property
    def experiment_id(self) -> str:
        canonical = json.dumps(self.definition(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return f"{self.name}-{hashlib.sha256(canonical.encode()).hexdigest()[:8]}"

    def run_name(self, variant: str, seed: int) -> str:
        return f"{self.name}/{variant}/s{seed}"

    def overrides(self, variant: str, seed: int, iterations: int | None = None) -> list[str]:
        its = self.iterations if iterations is None else iterations
        return [*self.set, *self.variants[variant].set, f"run.seed={seed}", f"run.iterations={its}",
                f"run.name={self.run_name(variant, seed)}"]

    def run_config(self, variant: str, seed: int, iterations: int | None = None) -> RunConfig:
        """The validated config of one run (base + shared set + variant set + seed + iterations + name)."""
        return load_config(None, self.overrides(variant, seed, iterations), base=self.base_config)

    def inputs(self) -> dict[str, str]:
        """{path: content fingerprint} of every local model, adapter and task file any variant's runs read."""
        from engine.fingerprint import run_inputs

        found: dict[str, str] = {}
        for variant in self.variants:  # a variant may point at its own model: seeds never change a path
            found.update(run_inputs(self.run_config(variant, self.seeds[0])))
        return dict(sorted(found.items()))

    def to_json(self, seeds: list[int] | None = None, iterations: int | None = None,
                inputs: dict[str, str] | None = None) -> dict[str, Any]:
        """The ``experiments.config_json`` snapshot: the definition plus what was asked to run, and the contents of
        the files it read (``inputs``; not hashed into the id, checked by ``engine.runner`` before a resume)."""
        return {**self.definition(), "base_file": str(self.base), "baseline": self.baseline, "swap": self.swap,
                "seeds": list(self.seeds if seeds is None else seeds),
                "iterations": self.iterations if iterations is None else iterations,
                "inputs": self.inputs() if inputs is None else inputs}


def _check_keys(table: dict[str, Any], known: tuple[str, ...], where: str, source: str) -> None:
    for key in table:
        if key not in known:
            name = f"{where}.{key}" if where else str(key)
            raise ConfigError(name, f"unknown key{suggest(key, known)} (known: {', '.join(known)})", source)


def _string_list(value: Any, where: str, source: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(where, f'expected a list of "section.field=value" strings, got {value!r}', source)
    try:
        parsed = parse_overrides(value)
    except ConfigError as exc:
        raise ConfigError(where, f"{exc.field}: {exc.message}", source) from None
    owned = sorted(set(parsed.get("run", {})) & set(RUN_OWNED))
    if owned:
        raise ConfigError(where, f"run.{owned[0]} is set by the experiment for each run (seeds, iterations, "
                                 f"<name>/<variant>/s<seed>); remove it", source)
    return list(value)


def _int(value: Any, where: str, source: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(where, f"expected an integer, got {value!r}", source)
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ConfigError(where, f"must be {bound}, got {value!r}", source)
    return value


def parse_seeds(value: Any, where: str, source: str) -> list[int]:
    """A non-empty list of distinct seeds, each a valid ``run.seed``."""
    if not isinstance(value, list) or not value:
        raise ConfigError(where, f"expected a non-empty list of integers, got {value!r}", source)
    seeds = [_int(v, where, source, 0, SEED_MAX) for v in value]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(where, f"seed(s) {', '.join(map(str, repeated))} listed twice", source)
    return seeds


def load_experiment(path: str | Path, extra_set: Sequence[str] = ()) -> Experiment:
    """Read and validate an experiment file (see the module docstring); raises ``ConfigError``, named
    ``FILE:LINE`` where the field is found in the file. ``extra_set``: the command line's ``--set`` overrides, applied
    to every variant after the file's shared ``set`` and part of the definition like it (so the same command line
    resumes the same experiment, and another ``--set`` is another experiment); a bad one is named as
    ``--set section.field=value``."""
    try:
        return _load_experiment(Path(path), extra_set)
    except ConfigError as exc:
        where = file_line_source(Path(path), exc.field) if exc.source == str(path) else None
        if where is None:
            raise
        raise type(exc)(exc.field, exc.message, where) from None


def _load_experiment(path: Path, extra_set: Sequence[str]) -> Experiment:
    source = str(path)
    if not path.is_file():
        raise ConfigError("<file>", "experiment file not found", source)
    data = read_config_file(path)
    _check_keys(data, TABLES, "", source)
    head = data.get("experiment")
    if not isinstance(head, dict):
        raise ConfigError("experiment", "missing [experiment] table (name, base, seeds, iterations, set)", source)
    _check_keys(head, EXPERIMENT_KEYS, "experiment", source)
    for key in ("name", "base", "seeds"):
        if key not in head:
            raise ConfigError(f"experiment.{key}", "required", source)
    name = head["name"]
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError("experiment.name", f"expected letters, digits, '_', '.', '-' (got {name!r})", source)
    if not isinstance(head["base"], str) or not head["base"]:
        raise ConfigError("experiment.base", f"expected a path to a run config, got {head['base']!r}", source)
    base = (path.parent / head["base"]).resolve() if not Path(head["base"]).is_absolute() else Path(head["base"])
    if not base.is_file():
        raise ConfigError("experiment.base", f"{head['base']}: no such file (resolved to {base})", source)
    seeds = parse_seeds(head["seeds"], "experiment.seeds", source)
    shared = _string_list(head.get("set", []), "experiment.set", source)
    variants_table = data.get("variants")
    if not isinstance(variants_table, dict) or not variants_table:
        raise ConfigError("variants", "missing: at least one [variants.<name>] table", source)
    variants: dict[str, Variant] = {}
    for vname, table in variants_table.items():
        where = f"variants.{vname}"
        if not NAME.match(str(vname)):
            raise ConfigError(where, "a variant name uses letters, digits, '_', '.', '-'", source)
        if not isinstance(table, dict):
            raise ConfigError(where, "expected a table (set = [...])", source)
        _check_keys(table, VARIANT_KEYS, where, source)
        variants[vname] = Variant(vname, tuple(_string_list(table.get("set", []), f"{where}.set", source)))

    baseline = head.get("baseline", "full" if "full" in variants else None)
    if baseline is not None and baseline not in variants:
        raise ConfigError("experiment.baseline", f"no variant {baseline!r}{suggest(baseline, variants)} "
                                                 f"(variants: {', '.join(variants)})", source)
    swap = head.get("swap", [])
    if not isinstance(swap, list) or not all(isinstance(v, str) for v in swap):
        raise ConfigError("experiment.swap", f"expected a list of variant names, got {swap!r}", source)
    for vname in swap:
        if vname not in variants:
            raise ConfigError("experiment.swap", f"no variant {vname!r}{suggest(vname, variants)} "
                                                 f"(variants: {', '.join(variants)})", source)
    base_config = load_config(base)  # its own errors name the base file
    if extra_set:
        _string_list(list(extra_set), "--set", "command line")
        load_config(None, [*shared, *extra_set], base=config_to_dict(base_config))  # names the --set at fault
        shared = [*shared, *extra_set]
    iterations = head.get("iterations", base_config.run.iterations)
    iterations = _int(iterations, "experiment.iterations", source, 1)
    exp = Experiment(name=name, source=path, base=base, seeds=seeds, iterations=iterations, set=shared,
                     variants=variants, base_config=config_to_dict(base_config), baseline=baseline, swap=swap)
    validate_runs(exp, seeds[:1], iterations)
    from engine.swap import swap_refusal  # here, not at the top: engine.swap loads the stage machinery

    for vname in swap:  # else the swap step would fail after every run of the experiment
        refusal = swap_refusal(exp.run_config(vname, seeds[0], iterations))
        if refusal:
            raise ConfigError("experiment.swap", f"{vname}: {refusal}", source)
    return exp


def validate_runs(exp: Experiment, seeds: list[int], iterations: int) -> None:
    """Build every variant's config for ``seeds``; a failure names ``experiment.set`` or ``variants.<v>.set``."""
    source = str(exp.source)
    try:
        load_config(None, [*exp.set, f"run.iterations={iterations}"], base=exp.base_config)
    except ConfigError as exc:
        raise ConfigError("experiment.set", f"{exc.field}: {exc.message}", source) from None
    for vname in exp.variants:
        for seed in seeds:
            try:
                exp.run_config(vname, seed, iterations)
            except ConfigError as exc:
                raise ConfigError(f"variants.{vname}.set", f"{exc.field}: {exc.message}", source) from None
