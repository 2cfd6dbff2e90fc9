"""Every registered (task, algorithm) recipe runs end to end: train 2 iterations, save, rebuild the run from the
checkpoint with ``load_run``, play it, and export its policy to ONNX (every policy kind exports).

Sizes are shrunk with the same command-line overrides a user would type; the recipes' own settings are checked
for validity in tests/utils. flow-bc pairs learn from demonstrations recorded from the task's PPO checkpoint, and
ReinFlow fine-tunes the task's flow-bc checkpoint, as the README's pipeline does.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rslkit.cli.play import evaluate
from rslkit.envs.registry import get_task
from rslkit.recipes import build_run, load_run, recipe_pairs
from rslkit.utils.checkpoint import latest_checkpoint

EPISODE = {"go2-flat": 40, "so101-reach": 60, "so101-lift": 30}
"""Short episodes so that play finishes quickly (default 30 steps; so101-reach's flow chunks are 50 long)."""
SMALL = {
    "ppo": ["--agent.num_steps_per_env", "8", "--agent.algorithm.num_mini_batches", "2",
            "--agent.policy.actor_hidden_dims", "16,16",
            "--agent.policy.critic_hidden_dims", "16,16"],
    "sac": ["--agent.num_steps_per_env", "2", "--agent.random_steps", "1", "--agent.learning_starts", "1",
            "--agent.algorithm.batch_size", "32", "--agent.replay.capacity", "256",
            "--agent.policy.actor_hidden_dims", "16,16", "--agent.policy.critic_hidden_dims", "16,16"],
    "flow-bc": ["--agent.updates_per_iteration", "2", "--agent.algorithm.batch_size", "16",
                "--agent.policy.hidden_dim", "16", "--agent.policy.num_blocks", "1"],
    "reinflow": ["--agent.num_steps_per_env", "4"],
    "dsrl": ["--agent.num_steps_per_env", "2", "--agent.random_steps", "1", "--agent.learning_starts", "1",
             "--agent.algorithm.batch_size", "32", "--agent.replay.capacity", "256",
             "--agent.policy.actor_hidden_dims", "16,16", "--agent.policy.critic_hidden_dims", "16,16"],
    "distillation": ["--agent.num_steps_per_env", "8", "--agent.student.hidden_dims", "16,16"],
    "vla-reinflow": ["--agent.num_steps_per_env", "2", "--env.camera_width", "16", "--env.camera_height", "16",
                     "--agent.algorithm.critic_hidden_dims", "16", "--agent.algorithm.noise_hidden_dims", "16"],
    "vla-bc": ["--agent.updates_per_iteration", "2", "--agent.algorithm.batch_size", "16", "--env.camera_width", "16",
               "--env.camera_height", "16", "--agent.policy.image_size", "16,16", "--agent.policy.cnn_channels", "8,16",
               "--agent.policy.token_grid", "2", "--agent.policy.d_model", "16",
               "--agent.policy.num_heads", "2", "--agent.policy.num_layers", "1", "--agent.policy.horizon", "4"],
}  # fmt: skip


def _small(task: str, algo: str) -> list[str]:
    camera_env = algo == "dsrl" and hasattr(get_task(task).env_cfg(), "camera_width")  # DSRL over a tiny vla-bc
    cameras = ["--env.camera_width", "16", "--env.camera_height", "16"] if camera_env else []
    return [*SMALL[algo], *cameras, "--agent.save_interval", "1", "--agent.logger=", "--env.episode_length",
            str(EPISODE.get(task, 30))]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Checkpoints already trained in this module, by (task, algo): later pairs build on earlier ones."""
    return {}


def _train(task: str, algo: str, root: Path, runs: dict[tuple[str, str], Path]) -> Path:
    fields: dict[str, str] = {}
    if algo == "flow-bc":
        fields["dataset"] = str(_demonstrations(task, root, runs))
    if algo == "vla-bc":
        fields["dataset"] = str(_expert_demonstrations(task, root))
    if algo == "reinflow":
        fields["pretrained"] = str(runs.get((task, "flow-bc")) or _train(task, "flow-bc", root, runs))
    if algo == "vla-reinflow" or (algo == "dsrl" and task == "so101-pick-place"):
        fields["pretrained"] = str(runs.get((task, "vla-bc")) or _train(task, "vla-bc", root, runs))
    elif algo == "dsrl":
        fields["pretrained"] = str(runs.get((task, "flow-bc")) or _train(task, "flow-bc", root, runs))
    if algo == "distillation":
        fields["teacher_checkpoint"] = str(_teacher(task, root))
    log_dir = root / f"{task}-{algo}"
    _, runner = build_run(
        task, algo, _small(task, algo), num_envs=2, max_iterations=2, agent_fields=fields, log_dir=log_dir
    )
    runner.learn()
    assert runner.iteration == 2
    runs[(task, algo)] = latest_checkpoint(log_dir)
    return runs[(task, algo)]


def _teacher(task: str, root: Path) -> Path:
    """A PPO run of ``task`` on the groups its distillation recipe expects its teacher to read."""
    from rslkit.recipes import agent_cfg

    groups = ",".join(agent_cfg(task, "distillation").teacher.actor_obs_groups)
    log_dir = root / f"{task}-teacher"
    _, runner = build_run(task, "ppo", [*_small(task, "ppo"), f"--agent.policy.actor_obs_groups={groups}"],
                          num_envs=2, max_iterations=1, log_dir=log_dir)  # fmt: skip
    runner.learn()
    return latest_checkpoint(log_dir)


def _demonstrations(task: str, root: Path, runs: dict[tuple[str, str], Path]) -> Path:
    from rslkit import record

    expert = runs.get((task, "ppo")) or _train(task, "ppo", root, runs)
    out = root / f"{task}-demos"
    record.main(["--checkpoint", str(expert), "--episodes", "2", "--num_envs", "2", "--out", str(out),
                 "--env.episode_length", str(EPISODE.get(task, 30))])  # fmt: skip
    return out


def _expert_demonstrations(task: str, root: Path) -> Path:
    """Two short episodes of the task's scripted expert with the recipe's cameras at 16x16, its instructions, and
    the privileged state its BC probe regresses (``--agent.aux_state``) when the recipe has one."""
    from rslkit import record
    from rslkit.recipes import agent_cfg
    from tests.envs.gl import require_gl

    require_gl()
    out = root / f"{task}-expert-demos"
    cfg = agent_cfg(task, "vla-bc")
    cameras = [arg for name in cfg.policy.cameras for arg in ("--camera", name)]
    env_state = ["--env_state_group", cfg.aux_state] if cfg.aux_state else []
    record.main(["--task", task, "--expert", "--episodes", "2", "--num_envs", "2", "--out", str(out), "--obs_group",
                 cfg.policy.state_group, *cameras, "--env.cameras", ",".join(cfg.policy.cameras), *env_state,
                 "--env.camera_width", "16", "--env.camera_height", "16",
                 "--env.episode_length", str(EPISODE.get(task, 30))])  # fmt: skip
    return out


PAIRS = [*recipe_pairs(), ("gym:Pendulum-v1", "ppo"), ("gym:Pendulum-v1", "sac")]
CONTROL_RATE_HZ = {"so101-reach": 50.0, "so101-lift": 50.0, "so101-pick-place": 50.0, "go2-flat": 50.0,
                   "pendulum": 20.0, "cartpole": 50.0}  # fmt: skip
"""What the exported metadata must say (docs/deployment.md)."""


@pytest.mark.parametrize(("task", "algo"), PAIRS, ids=[f"{t}-{a}" for t, a in PAIRS])
def test_recipe_trains_reloads_plays_and_exports(
    task: str, algo: str, tmp_path_factory: pytest.TempPathFactory, runs: dict[tuple[str, str], Path]
) -> None:
    root = tmp_path_factory.getbasetemp() / "recipes"
    ckpt = runs.get((task, algo)) or _train(task, algo, root, runs)

    env, runner, saved = load_run(ckpt, num_envs=2, overrides=["--env.episode_length", str(EPISODE.get(task, 30))])
    assert saved["task"] == task and saved["algorithm"] == algo and runner.iteration == 0  # weights only
    stats = evaluate(runner, env)
    assert stats["episodes"] == 2 and all(math.isfinite(v) for v in stats.values())

    pytest.importorskip("onnxruntime")
    from rslkit.deploy.export import export_checkpoint
    from rslkit.deploy.onnx_policy import OnnxPolicy

    if algo == "dsrl":  # the latent actor alone is no deployable policy: export refuses it (docs/algorithms.md)
        with pytest.raises(ValueError, match="DSRL policy is its latent actor"):
            export_checkpoint(ckpt, root / f"{task}-{algo}.onnx")
        return
    meta = export_checkpoint(ckpt, root / f"{task}-{algo}.onnx")
    assert meta.task == task and meta.algorithm == algo and meta.action_dim == env.num_actions
    assert meta.control_rate_hz is not None and meta.control_rate_hz > 0
    if task in CONTROL_RATE_HZ:
        assert meta.control_rate_hz == pytest.approx(CONTROL_RATE_HZ[task])
    OnnxPolicy(root / f"{task}-{algo}.onnx")  # loads and validates the exported graph
