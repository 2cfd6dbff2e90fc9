"""The task registry: a static name -> module table (no import between the registry and the task modules), user
tasks through the one plug-in loader, registered plug-in names, and the task knowledge each spec carries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rslkit.envs import registry
from rslkit.envs.registry import BUILTIN_TASKS, distance_for, expert_for, get_task, register_task, task_names
from rslkit.envs.task_spec import TaskSpec

ENVS = Path(registry.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_every_builtin_name_loads_its_modules_task():
    for name, module in BUILTIN_TASKS.items():
        spec = get_task(name)
        assert isinstance(spec, TaskSpec) and spec.name == name, module
    assert set(BUILTIN_TASKS) <= set(task_names())


def test_the_registry_and_the_task_modules_do_not_import_each_other():
    assert not any(m.startswith("rslkit.envs.tasks") for m in _imports(ENVS / "registry.py"))
    for path in (ENVS / "tasks").glob("*.py"):
        assert "rslkit.envs.registry" not in _imports(path), f"{path.name} imports the registry"


def test_unknown_and_taken_names_are_clear_errors():
    with pytest.raises(ValueError, match="Unknown task 'pendulm'. Did you mean: pendulum"):
        get_task("pendulm")
    spec = get_task("pendulum")
    with pytest.raises(ValueError, match="'pendulum' is already registered"):
        register_task(spec)
    with pytest.raises(ValueError, match="contains ':'"):
        register_task(TaskSpec("a:b", spec.env_cfg, spec.make_env))


def test_user_tasks_load_through_the_plugin_loader():
    spec = get_task("rslkit.envs.tasks.pendulum:TASK")
    assert spec.name == "rslkit.envs.tasks.pendulum:TASK" and spec.make_env is get_task("pendulum").make_env
    with pytest.raises(ValueError, match="--task rslkit.envs.tasks.pendulum:nothing: module .* no attribute"):
        get_task("rslkit.envs.tasks.pendulum:nothing")


def test_tasks_carry_their_expert_and_success_test():
    assert sorted(n for n in task_names() if get_task(n).expert is not None) == [
        "pendulum",
        "so101-lift",
        "so101-pick-place",
        "so101-reach",
    ]
    upright = {"policy": [1.0, 0.0, 0.0]}
    assert distance_for("pendulum")(upright) == 0.0 and distance_for("pendulum")({"policy": [-1.0, 0.0, 0.0]}) > 3
    assert expert_for("pendulum")({"policy": [[1.0, 0.0, 0.0]] * 2}).shape == (2, 1)
    with pytest.raises(ValueError, match="No distance to the goal for task 'cartpole'; there is one for"):
        distance_for("cartpole")
