"""Record episodes of a policy running in a :class:`~rslkit.envs.VecEnv`: the one recorder (a trained policy's or a
task's scripted expert's demonstrations, written by ``python -m rslkit.record`` as a LeRobotDataset v3.0, the one
demonstration format on disk)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict

from rslkit.data.demonstrations import Episode
from rslkit.envs.camera_groups import camera_group
from rslkit.envs.vec_env import VecEnv

Step = tuple[
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    dict[str, torch.Tensor],
    Sequence[str],
    torch.Tensor | None,
    torch.Tensor | None,
    list[Any] | None,
]
"""One step of all envs: observations, action labels, rewards, dones, camera frames, each env's task, env state
group, success flags (``extras["success"]``), exact simulator states."""
LABELS = ("executed", "policy")
"""What :func:`record_episodes` stores as each step's action: the executed action, or the clean policy action."""
TaskOf = str | Callable[[TensorDict], Sequence[str]]
"""An episode's language goal: one string for all, or ``obs -> [N]`` strings, read at each episode's first step."""


def _action_bounds(env: VecEnv) -> tuple[torch.Tensor, torch.Tensor] | None:
    space = getattr(env, "action_space", None)
    if isinstance(space, gym.spaces.Box):
        low = torch.as_tensor(space.low, dtype=torch.float32, device=env.device).reshape(-1)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=env.device).reshape(-1)
        return low, high
    return None


def _check_cameras(obs: TensorDict, cameras: Sequence[str], n: int) -> dict[str, str]:
    """``{camera name: observation group}``; raises unless each group holds uint8 ``[N, H, W, 3]`` frames."""
    groups = {name: camera_group(name) for name in cameras}
    for name, group in groups.items():
        if group not in obs.keys():
            raise ValueError(
                f"The env has no camera '{name}' (no observation group '{group}'; it has {sorted(obs.keys())}). "
                f"Turn the camera on in the env config (`--env.cameras {name}` on the command line), or record "
                "without it."
            )
        frames = obs[group]
        if frames.dtype != torch.uint8 or frames.dim() != 4 or frames.shape[0] != n or frames.shape[-1] != 3:
            raise ValueError(
                f"Observation group '{group}' must hold uint8 RGB frames [{n}, H, W, 3], got {frames.dtype} "
                f"{list(frames.shape)}; fix the task's camera observation."
            )
    return groups


def _episode(steps: list[Step], i: int) -> Episode:
    """Env ``i``'s episode from its ``steps``; its task is the one of its first step."""
    return Episode(
        observations=torch.stack([h[0][i] for h in steps]),
        actions=torch.stack([h[1][i] for h in steps]),
        rewards=torch.stack([h[2][i] for h in steps]),
        dones=torch.stack([h[3][i] for h in steps]),
        task=steps[0][5][i],
        images={name: torch.stack([h[4][name][i] for h in steps]) for name in steps[0][4]},
        env_state=None if steps[0][6] is None else torch.stack([h[6][i] for h in steps]),  # type: ignore[index]
        successes=None if any(h[7] is None for h in steps) else torch.stack([h[7][i] for h in steps]),  # type: ignore[index]
        states=None if steps[0][8] is None else [h[8][i] for h in steps],  # type: ignore[index]
    )


def _tasks(task: TaskOf, obs: TensorDict, n: int) -> Sequence[str]:
    """Each env's task string now."""
    if isinstance(task, str):
        return [task] * n
    tasks = list(task(obs))
    if len(tasks) != n or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"The task function must return {n} strings (one per env), got {tasks[:4]!r}...")
    return tasks


@torch.inference_mode()
def record_episodes(
    env: VecEnv,
    policy: Callable[[TensorDict], torch.Tensor],
    num_episodes: int,
    action_noise: float = 0.0,
    obs_group: str = "policy",
    reset_policy: Callable[[torch.Tensor], None] | None = None,
    task: TaskOf = "",
    generator: torch.Generator | None = None,
    action_smoothing: float = 0.0,
    cameras: Sequence[str] = (),
    on_episode: Callable[[Episode], None] | None = None,
    label: str = "executed",
    env_state_group: str | None = None,
    successful_only: bool = False,
    keep_states: bool = False,
    max_steps: int | None = None,
) -> list[Episode]:
    """Run ``policy`` in all envs until ``num_episodes`` complete episodes were recorded.

    Only episodes that start at a reset are kept (an env whose ``episode_length_buf`` is not 0 when recording
    starts contributes from its next episode on). The executed action is the policy's action plus Gaussian
    ``action_noise`` (std, in the env's action units), low-pass filtered with ``action_smoothing``, clipped to a Box
    action space. ``label`` chooses the recorded action: ``"executed"`` (what the robot did: imperfect
    demonstrations) or ``"policy"`` (the policy's own action, clipped, at the state the noisy execution reached:
    DART, Laskey et al. 2017 — the noise visits the states a cloned policy drifts into, and the labels say how the
    expert recovers from them, so behaviour cloning learns the recovery instead of the noise).

    Args:
        env: the environment.
        policy: ``obs -> actions [N, A]``.
        num_episodes: how many episodes to return (the first to complete).
        action_noise: std of the Gaussian noise added to every action (imperfect demonstrations).
        obs_group: observation group stored as ``observation.state``.
        reset_policy: called with ``dones [N]`` after each step (chunked or recurrent policies).
        task: language goal stored with each episode (LeRobot's ``meta/tasks.parquet``): one string, or a function
            ``obs -> [N]`` strings (tasks whose goal changes per episode, e.g. an instruction drawn at reset), read
            at each episode's first step.
        generator: random generator of the action noise.
        action_smoothing: ``alpha`` in ``[0, 1)`` of the filter ``a_t = alpha a_{t-1} + (1 - alpha) pi(o_t)``, restarted
            at every episode; smooth demonstrations, like a person's teleoperation, are easier to clone than the
            step-to-step jitter of an RL policy. 0: off.
        cameras: camera names whose observation groups ``camera_<name>`` (uint8 ``[N, H, W, 3]``) are stored as
            ``Episode.images[name]``, the frame seen with each observation. Frames are kept on the CPU until
            their episode ends: ``N * H * W * 3`` bytes per camera and step of the longest open episode.
        on_episode: called with each kept episode as it completes (progress bars, logs).
        label: ``"executed"`` or ``"policy"`` (see above); the two differ only with noise or smoothing.
        env_state_group: observation group stored as ``Episode.env_state`` (``observation.environment_state``:
            privileged simulator state, an auxiliary training target), or None.
        successful_only: keep only episodes that end solved (the env must report ``extras["success"]``).
        keep_states: also keep each step's exact simulator state (``env.env_state(i)``) in ``Episode.states``
            (return-and-explore start states of the real-world loop's stand-in robot).
        max_steps: give up after this many env steps (default ``10 * max_episode_length * ceil(num_episodes /
            num_envs)``; raise it where ``successful_only`` drops many episodes).

    Returns:
        ``num_episodes`` episodes with observations, actions, rewards, dones, success flags (where the env reports
        ``extras["success"]``) and camera frames.

    Raises:
        ValueError: for a missing observation group or camera, camera frames that are not uint8 ``[N, H, W, 3]``,
            a non-positive episode count, ``action_smoothing`` outside ``[0, 1)``, an unknown ``label``, or
            ``successful_only`` with an env that does not report success.
        RuntimeError: when fewer than ``num_episodes`` episodes were kept within ``max_steps``.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}.")
    if not 0.0 <= action_smoothing < 1.0:
        raise ValueError(f"action_smoothing must be in [0, 1), got {action_smoothing}.")
    if label not in LABELS:
        raise ValueError(f"label must be one of {LABELS}, got {label!r}.")
    obs = env.get_observations()
    for name in (obs_group, env_state_group):
        if name is not None and name not in obs.keys():
            raise ValueError(f"The env has no observation group '{name}' (it has {sorted(obs.keys())}).")
    n = env.num_envs
    groups = _check_cameras(obs, cameras, n)
    bounds = _action_bounds(env)
    history: list[Step] = []
    offset = 0  # step number of history[0]: steps every open episode started after are dropped
    start = torch.zeros(n, dtype=torch.long)
    valid = (env.episode_length_buf == 0).cpu()
    episodes: list[Episode] = []
    limit = max_steps or 10 * int(torch.as_tensor(env.max_episode_length).max()) * max(1, -(-num_episodes // n))
    previous: torch.Tensor | None = None  # last executed actions, for the smoothing filter
    fresh = torch.ones(n, 1, dtype=torch.bool)  # envs at the first step of an episode: no filter
    for step in range(limit):
        actions = policy(obs)
        clean = actions
        if action_noise > 0:
            noise = torch.randn(actions.shape, generator=generator, device=generator.device if generator else None)
            actions = actions + action_noise * noise.to(actions.device)
        if action_smoothing > 0 and previous is not None:
            smoothed = action_smoothing * previous + (1.0 - action_smoothing) * actions
            actions = torch.where(fresh.to(actions.device), actions, smoothed)
        if bounds is not None:
            actions = torch.maximum(torch.minimum(actions, bounds[1]), bounds[0])
            clean = torch.maximum(torch.minimum(clean, bounds[1]), bounds[0])
        labels = actions if label == "executed" else clean
        states = [env.env_state(i) for i in range(n)] if keep_states else None  # type: ignore[attr-defined]
        next_obs, rewards, dones, extras = env.step(actions)
        success = extras.get("success")
        if successful_only and success is None:
            raise ValueError("successful_only needs an env that reports extras['success']; this one does not.")
        success = None if success is None else success.cpu().bool().reshape(n)
        previous, fresh = actions, dones.cpu().bool().reshape(n, 1)
        images = {name: obs[group].to("cpu", copy=True) for name, group in groups.items()}
        tasks = _tasks(task, obs, n)
        env_state = None if env_state_group is None else obs[env_state_group].cpu().float()
        history.append(
            (
                obs[obs_group].cpu(),
                labels.cpu(),
                rewards.cpu().float(),
                dones.cpu().bool(),
                images,
                tasks,
                env_state,
                success,
                states,
            )
        )
        if reset_policy is not None:
            reset_policy(dones)
        for i in dones.cpu().nonzero().squeeze(-1).tolist():
            if valid[i] and len(episodes) < num_episodes and (not successful_only or bool(success[i])):  # type: ignore[index]
                episodes.append(_episode(history[int(start[i]) - offset : step + 1 - offset], i))
                if on_episode is not None:
                    on_episode(episodes[-1])
            start[i], valid[i] = step + 1, True
        if len(episodes) >= num_episodes:
            return episodes
        del history[: int(start.min()) - offset]
        offset = int(start.min())
        obs = next_obs
    kept = "successful episodes" if successful_only else "episodes"
    raise RuntimeError(
        f"Only {len(episodes)} of {num_episodes} {kept} finished within {limit} steps; raise max_steps or check the "
        "policy."
    )


def episode_stats(episodes: Sequence[Episode]) -> dict[str, float]:
    """``success_rate`` (NaN where the env reported no success), ``mean_return`` (NaN without rewards) and the
    number of ``episodes``: how good recorded demonstrations (or the expert that made them) are."""
    ends = [ep.succeeded for ep in episodes]
    returns = [float(ep.rewards.sum()) for ep in episodes if ep.rewards is not None]
    return {
        "success_rate": float("nan") if None in ends else sum(map(bool, ends)) / max(len(ends), 1),
        "mean_return": sum(returns) / len(returns) if returns else float("nan"),
        "episodes": float(len(episodes)),
    }
