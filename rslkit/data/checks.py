"""Checks that a dataset fits the environment a policy will run in."""

from __future__ import annotations

from rslkit.data.demonstrations import ACTION_KEY, OBS_KEY, Demonstrations


def check_matches_env(demos: Demonstrations, obs_dim: int, num_actions: int, where: str = "the env") -> None:
    """Raise if the dataset's observation or action size differs from the env's.

    Args:
        demos: the loaded dataset.
        obs_dim: size of the env's observation group the policy reads.
        num_actions: the env's action size.
        where: how to name the env in the message (e.g. ``"task 'pendulum'"``).

    Raises:
        ValueError: naming both sizes and what to do.
    """
    problems = []
    if demos.obs_dim != obs_dim:
        problems.append(f"'{OBS_KEY}' has {demos.obs_dim} dims but {where} observes {obs_dim}")
    if demos.action_dim != num_actions:
        problems.append(f"'{ACTION_KEY}' has {demos.action_dim} dims but {where} takes {num_actions} actions")
    if problems:
        raise ValueError(
            "The dataset does not match the environment: " + "; ".join(problems) + ". Record demonstrations on the "
            "same task (.venv/bin/python -m rslkit.record --checkpoint C --out DIR with a checkpoint of this task)."
        )
