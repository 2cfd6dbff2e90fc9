"""The transition schema of a task: what both sides of the loop build from the same env (torch side)."""

from __future__ import annotations

from rslkit.envs.vec_env import VecEnv
from rslkit.link.transitions import TransitionSchema
from rslkit.link.wire import ArraySpec


def transition_schema(env: VecEnv, groups: list[str]) -> TransitionSchema:
    """The observation ``groups`` as the env gives them (float32, without the batch dim) and float32 actions."""
    obs = env.get_observations()
    missing = [g for g in groups if g not in obs.keys()]
    if missing:
        raise ValueError(f"The env has no observation group(s) {missing}; it gives {sorted(obs.keys())}.")
    specs = {g: ArraySpec(tuple(obs[g].shape[1:]), "float32") for g in groups}
    return TransitionSchema(specs, ArraySpec((env.num_actions,), "float32"))
