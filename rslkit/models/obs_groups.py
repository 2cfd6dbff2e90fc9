"""Which observation groups feed the actor and the critic."""

from __future__ import annotations

from collections.abc import Sequence

from tensordict import TensorDict


def resolve_obs_groups(
    obs: TensorDict, actor_groups: Sequence[str], critic_groups: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Map ``actor``/``critic`` to lists of observation groups present in ``obs``.

    An empty ``critic_groups`` means the env's ``critic`` group if it has one (asymmetric actor-critic), else the
    actor's groups.

    Raises:
        ValueError: naming a missing or non-flat group and the groups the env provides.
    """
    actor = list(actor_groups)
    critic = list(critic_groups) or (["critic"] if "critic" in obs.keys() else actor)
    for role, groups in (("actor", actor), ("critic", critic)):
        if not groups:
            raise ValueError(f"No observation groups for the {role}; set agent.policy.{role}_obs_groups.")
        for g in groups:
            if g not in obs.keys():
                raise ValueError(
                    f"Observation group '{g}' for the {role} is not provided by the env, which has "
                    f"{sorted(obs.keys())}; set agent.policy.{role}_obs_groups."
                )
            if obs[g].dim() != 2:
                raise ValueError(f"Observation group '{g}' must be [num_envs, dim], got {list(obs[g].shape)}.")
    return {"actor": actor, "critic": critic}
