"""The module map the README promises: no import cycle among engine/ and studio/ modules (function-local imports
included; imports under ``if TYPE_CHECKING:`` excluded, they never run), engine/ never imports the UI, and every
module stays under the size the project keeps (``MAX_MODULE_BYTES``: past it, new logic goes in a module of its
own)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str) -> set[str]:
    """Every module name an import statement in ``path`` may load (``from a import b`` -> ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = {id(node) for branch in ast.walk(tree)
                 if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
                 for node in ast.walk(branch)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for pkg in ("engine", "studio") for p in (ROOT / pkg).rglob("*.py")}
    return {name: {m for m in _imports(path, name) if m in paths and m != name} for name, path in paths.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = _graph()
    assert len(graph) > 80 and "engine.outcome" in graph["engine.stages.ground"]
    assert _cycles(graph) == []


# gradio_client too: the one engine module that drives the studio over HTTP (bench curation) runs the studio's own
# client (studio/bench_client.py) as a process.
UI_PACKAGES = ("gradio", "gradio_client", "studio")


def test_engine_never_imports_the_ui():
    for name, deps in _graph().items():
        if name.startswith("engine"):
            assert not {d for d in deps if d.startswith("studio")}, name
    for path in (ROOT / "engine").rglob("*.py"):
        assert not {m for m in _imports(path, _module_name(path)) if m.split(".")[0] in UI_PACKAGES}, path


MAX_MODULE_BYTES = 24 * 1024  # 24,576: the most a module may hold


def test_every_module_stays_under_the_size_limit():
    sizes = {str(path.relative_to(ROOT)): path.stat().st_size
             for pkg in ("engine", "studio") for path in (ROOT / pkg).rglob("*.py")}
    assert len(sizes) > 80
    assert {path: size for path, size in sizes.items() if size > MAX_MODULE_BYTES} == {}
