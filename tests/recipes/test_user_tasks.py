"""A user's own task trains without editing rslkit: ``--task package.module:attribute`` and the ``rslkit.tasks``
entry-point group (examples/my_tasks, docs/custom_tasks.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rslkit.envs.registry import get_task
from rslkit.recipes import agent_cfg, build_run, load_run
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.utils.checkpoint import latest_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SLIDER = "examples.my_tasks:slider"


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The repository root (for ``examples``) and a scratch folder for modules written by the test on sys.path."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_module_attribute_task_trains_with_its_module_recipes(on_path: Path, tmp_path: Path) -> None:
    assert agent_cfg(SLIDER, "ppo").policy.actor_hidden_dims == (32, 32)  # the module's RECIPES, not defaults
    small = ["--agent.num_steps_per_env", "8", "--agent.logger="]
    _, runner = build_run(SLIDER, "ppo", small, num_envs=4, max_iterations=2, log_dir=tmp_path / "run")
    runner.learn()
    env, reloaded, saved = load_run(latest_checkpoint(tmp_path / "run"), num_envs=2)
    assert saved["task"] == SLIDER and type(env).__name__ == "SliderTask" and env.num_envs == 2
    assert reloaded.cfg.num_steps_per_env == 8


def test_task_without_recipes_uses_the_algorithm_defaults_and_says_so(
    on_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (on_path / "bare_tasks.py").write_text("from examples.my_tasks import slider as task\n")
    cfg = agent_cfg("bare_tasks:task", "ppo")
    assert isinstance(cfg, PPORunnerCfg) and cfg == PPORunnerCfg()
    assert "registers no 'ppo' recipe; training with PPORunnerCfg() defaults" in capsys.readouterr().err


def test_a_recipe_of_the_wrong_kind_is_refused(on_path: Path) -> None:
    (on_path / "wrong_tasks.py").write_text(
        "from examples.my_tasks import slider as task, slider_ppo_cfg\nRECIPES = {'sac': slider_ppo_cfg}\n"
    )
    with pytest.raises(ValueError, match="returns a PPORunnerCfg; the sac runner takes a SACRunnerCfg"):
        agent_cfg("wrong_tasks:task", "sac")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:task", "--task no_such_module_xyz:task: cannot import 'no_such_module_xyz'"),
        ("examples.my_tasks:nope", "has no attribute 'nope'"),
        ("examples.my_tasks:SliderCfg", "must be a rslkit.envs.TaskSpec or a function returning one"),
    ],
)
def test_bad_module_attribute_names_are_clear_errors(on_path: Path, name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_task(name)


def test_entry_point_group_registers_a_plain_name(tmp_path: Path) -> None:
    """An installed package lists a module under ``rslkit.tasks``; importing it registers ``plugin-slider``."""
    (tmp_path / "slider_plugin.py").write_text(
        textwrap.dedent(
            """
            from rslkit.envs import TaskSpec, register_task
            from rslkit.recipes import register_recipe
            from examples.my_tasks import SliderCfg, SliderTask, slider_ppo_cfg

            register_task(TaskSpec("plugin-slider", SliderCfg, lambda cfg, device: SliderTask(cfg, device)))
            register_recipe("plugin-slider", "ppo", slider_ppo_cfg)
            """
        )
    )
    dist = tmp_path / "slider_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: slider-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rslkit.tasks]\nslider = slider_plugin\n")
    code = (
        "from rslkit.cli import train\n"
        "from rslkit.envs import task_names\n"
        "assert 'plugin-slider' in task_names(), task_names()\n"
        f"r = train.main(['--task', 'plugin-slider', '--num_envs', '4', '--max_iterations', '1', '--logdir', "
        f"{str(tmp_path / 'logs')!r}, '--agent.num_steps_per_env', '8', '--agent.logger='])\n"
        "assert r.iteration == 1 and r.cfg.policy.actor_hidden_dims == (32, 32)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert any((tmp_path / "logs" / "plugin-slider").rglob("model_1.pt"))
