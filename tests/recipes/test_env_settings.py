"""A recipe's env settings (``ENV_SETTINGS``: algorithm -> ``{field: typed value}``) are applied before the user's
``--env.*`` overrides and recorded in the run's env config; the old command-line-token form is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from rslkit.recipes import build_run
from rslkit.recipes.catalog import env_settings

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--agent.num_steps_per_env", "4", "--agent.logger="]


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The repository root (for ``examples``) and a scratch folder for modules written by the test on sys.path."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_builtin_recipes_declare_typed_env_settings() -> None:
    assert env_settings("cartpole", "sac") == {"action_type": "continuous"}
    assert env_settings("cartpole", "ppo") == {}
    assert env_settings("so101-pick-place", "vla-bc") == {"cameras": ("table",)}
    env, runner = build_run("cartpole", "sac", ["--agent.logger="], num_envs=2)
    assert env.cfg.action_type == "continuous" and runner.run_info["env_cfg"]["action_type"] == "continuous"


def test_env_settings_come_before_the_users_overrides(on_path: Path) -> None:
    (on_path / "long_tasks.py").write_text(
        "from examples.my_tasks import slider as task, slider_ppo_cfg\n"
        "RECIPES = {'ppo': slider_ppo_cfg}\n"
        "ENV_SETTINGS = {'ppo': {'episode_length': 7}}\n"
    )
    env, runner = build_run("long_tasks:task", "ppo", SMALL, num_envs=2)
    assert env.cfg.episode_length == 7 and runner.run_info["env_cfg"]["episode_length"] == 7
    env, runner = build_run("long_tasks:task", "ppo", [*SMALL, "--env.episode_length", "9"], num_envs=2)
    assert env.cfg.episode_length == 9 and runner.run_info["env_cfg"]["episode_length"] == 9


@pytest.mark.parametrize(
    ("module", "settings", "message"),
    [
        ("typo_tasks", "{'ppo': {'episode_lenght': 7}}", "Unknown config field 'env.episode_lenght'. Did you mean: "),
        ("type_tasks", "{'ppo': {'episode_length': '7'}}", "Bad value for 'env.episode_length': '7' is not of its "),
    ],
)
def test_bad_env_settings_name_the_field(on_path: Path, module: str, settings: str, message: str) -> None:
    (on_path / f"{module}.py").write_text(
        f"from examples.my_tasks import slider as task, slider_ppo_cfg\nENV_SETTINGS = {settings}\n"
    )
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        build_run(f"{module}:task", "ppo", SMALL, num_envs=2)


def test_command_line_tokens_as_env_settings_are_refused(on_path: Path) -> None:
    (on_path / "old_tasks.py").write_text(
        "from examples.my_tasks import slider as task\nENV_OVERRIDES = {'ppo': ['--env.episode_length', '7']}\n"
    )
    with pytest.raises(ValueError, match=r"old_tasks.ENV_OVERRIDES .*is no longer read: .*ENV_SETTINGS"):
        build_run("old_tasks:task", "ppo", SMALL, num_envs=2)
