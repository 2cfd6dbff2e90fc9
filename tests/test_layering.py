"""The layers of rslkit import only downwards (docs/architecture.md): a static check of every import, and what
importing a low layer actually loads in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rslkit"
LAYERS = [
    "utils",
    "link",
    "envs",
    "data",
    "models",
    "storage",
    "algorithms",
    "rewards",
    "runners",
    "recipes",
    "deploy",
    "realworld",
    "cli",
]
"""Lowest first; a module may import its own layer and the layers before it."""
TOP_LEVEL_ENTRY_POINTS = {"export", "record", "plot"}
"""``python -m rslkit.<name>`` shims: command-line level."""


def layer_of(module: str) -> int | None:
    """Layer index of ``rslkit.<part>...`` (None for the package root and non-rslkit modules)."""
    parts = module.split(".")
    if parts[0] != "rslkit" or len(parts) < 2 or parts[1] == "__init__":
        return None
    if parts[1] in TOP_LEVEL_ENTRY_POINTS or parts[-1] == "__main__":  # python -m entry points: command line
        return LAYERS.index("cli")
    if parts[1] not in LAYERS:
        raise AssertionError(f"rslkit.{parts[1]} is in no layer; add it to LAYERS and docs/architecture.md.")
    return LAYERS.index(parts[1])


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``path``, at any depth (function-level imports count too)."""
    module = "rslkit." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")[: -node.level]
                out.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
            elif node.module:
                out.append((node.lineno, node.module))
    return out


def test_every_import_points_down_the_layers() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = layer_of("rslkit." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        if own is None:
            continue
        for line, target in imports_of(path):
            theirs = layer_of(target)
            if theirs is not None and theirs > own:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({LAYERS[own]}) imports {target}")
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_static_check_sees_function_level_imports(tmp_path: Path) -> None:
    source = "def f():\n    from rslkit.runners.base import BaseRunner\n    import rslkit.recipes\n"
    path = PACKAGE / "envs" / "_probe_for_test.py"
    try:
        path.write_text(source)
        assert [m for _, m in imports_of(path)] == ["rslkit.runners.base", "rslkit.recipes"]
        assert layer_of("rslkit.runners.base") > layer_of("rslkit.envs._probe_for_test")  # type: ignore[operator]
    finally:
        path.unlink()


LAYER_IMPORTS = [
    ("import rslkit.link", "link"),
    ("import rslkit.envs", "envs"),
    ("import rslkit.envs.tasks", "envs"),
    ("import rslkit.envs.tasks.pendulum", "envs"),
    ("import rslkit.models", "models"),
    ("import rslkit.runners", "runners"),
    ("import rslkit.recipes", "recipes"),
]
"""Import statements, lowest layer first, and the highest layer each may load."""


def _loaded_after_each(statements: list[str]) -> tuple[list[list[str]], dict]:
    """The rslkit modules loaded after each statement, run in that order in one fresh interpreter, and the malloc
    settings at the end."""
    steps = "".join(
        f"{s}\nloaded.append(sorted(m for m in sys.modules if m.startswith('rslkit.')))\n" for s in statements
    )
    code = (
        "import json, sys\nfrom rslkit.utils import allocator\nloaded = []\n"
        f"{steps}print(json.dumps([loaded, allocator._state]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded, state = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded, state


def test_importing_a_layer_loads_nothing_above_it() -> None:
    """One fresh interpreter imports the layers lowest first and checks after each that nothing above it is loaded:
    importing a layer after those below it loads what it would load alone, plus them (which were checked before)."""
    loaded, allocator_state = _loaded_after_each([statement for statement, _ in LAYER_IMPORTS])
    for (statement, highest), modules in zip(LAYER_IMPORTS, loaded, strict=True):
        above = [m for m in modules if (layer_of(m) or 0) > LAYERS.index(highest)]
        assert not above, f"`{statement}` loads layers above {highest}: {above}"
    assert allocator_state == {"applied": None, "arena": None}, "malloc settings changed at import"


def _module_name(path: Path) -> str:
    name = "rslkit." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    return name.removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """Module -> the rslkit modules it imports (at any depth; ``from pkg import name`` counts ``pkg`` and, where it
    is a module, ``pkg.name``)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in paths:  # nearest enclosing module
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if target and target != module:
                    graph[module].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), except a package and one of its own
    submodules (an ``__init__`` re-exporting what its submodule defines)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [c for c in components if len(c) > 2 or not c[1].startswith(c[0] + ".")]


def test_no_module_imports_itself_through_others() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles (function-level imports count):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_cycle_check_finds_a_function_level_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "p": {"p.x"}, "p.x": {"p"}, "d": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]
