"""The caution for a run that samples onetime while its train tasks come from Lumos iterative records: part of
``engine.preflight``'s cautions (see its docstring), kept apart as the one that reads the run's tasks.

Contract: ``formulation_cautions(config, tasks)`` returns at most one caution (a string naming
``sample.formulation = "iterative"``), or none; it reads only ``config`` and ``tasks`` and raises nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.config import RunConfig

if TYPE_CHECKING:
    from engine.tasks import Task


def formulation_cautions(config: RunConfig, tasks: list[Task]) -> list[str]:
    """The caution for train tasks from Lumos iterative records (planner or grounder) in a run that samples an
    iteration onetime: the records' steps are joined into one onetime plan (gold subgoals and actions as a whole), so
    the step-by-step turns and executed results they hold are not what the agents are trained on. Not an error: a
    onetime run on iterative data is a valid choice, just seldom the one meant."""
    from engine.schedule import iteration_config, skip_reason

    iterative = [t for t in tasks if t.split == "train" and t.source.startswith("lumos:")
                 and "iterative" in (t.meta.get("formulation"), t.meta.get("plan_formulation"))]
    # GRPO trains onetime agents only (engine.config_checks): there is no other formulation to point such a run to.
    onetime = [t for t in range(1, config.run.iterations + 1) if skip_reason(config, t, "sample") is None
               and (c := iteration_config(config, t)).sample.formulation == "onetime"
               and "grpo" not in (c.stages.planner_objective, c.stages.grounder_objective)]
    if not iterative or not onetime:
        return []
    if config.data.sources:  # they replace data.tasks (engine.runtime.data_sources)
        # A grounder file is named too: the iterative records may be its (a planner file of either formulation).
        files = [f"data.sources[{i}].{field} = {path}" for i, s in enumerate(config.data.sources, 1)
                 if s.format == "lumos" for field, path in (("path", s.path), ("ground", s.ground)) if path]
    else:
        files = [f"data.{field} = {path}" for field, path in (("tasks", config.data.tasks),
                                                                ("ground", config.data.ground))
                 if path] if config.data.format == "lumos" else []
    where = f" in {', '.join(files)}" if files else ""
    sources = ", ".join(sorted({t.source for t in iterative}))
    when = "" if len(onetime) == config.run.iterations else \
        f" in iteration(s) {', '.join(map(str, onetime))} (schedule.phases)"
    return [f"sample.formulation = \"onetime\"{when}: {len(iterative)} train task(s) ({sources}) come from Lumos "
            f"iterative records{where}, whose steps are then joined into one onetime plan per task, so the agents "
            "are not trained on the step-by-step turns and executed results the records hold. Set "
            "sample.formulation = \"iterative\" to train on them as recorded"]
