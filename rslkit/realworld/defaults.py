"""The settings a real-world run starts from, on top of the task's SAC recipe (before the user's overrides).

The task recipes are tuned for hundreds of parallel envs; one robot needs the RLPD / HIL-SERL recipe instead:
1-step targets, LayerNorm critics, a high update-to-data ratio, batch 256, and learning from the first few hundred
transitions. Measured on pendulum with one env (docs/benchmarks.md, section 8).

Each default is a typed partial config: ``{dotted field path: value}`` of the agent config (``--agent.*``) or the
actor's :class:`~rslkit.realworld.actor_config.ActorCfg` (``--actor.*``), applied before the command line's flags.
"""

from __future__ import annotations

from typing import Any

from rslkit.realworld.actor_config import ActorCfg
from rslkit.utils.config import apply_overrides

AgentDefaults = dict[str, Any]
"""Agent config field path -> value, e.g. ``{"algorithm.utd_ratio": 10}``."""

REALWORLD_AGENT: AgentDefaults = {
    "algorithm.n_step": 1,
    "algorithm.utd_ratio": 10,
    "algorithm.batch_size": 256,
    "algorithm.actor_lr": 1e-3,
    "algorithm.critic_lr": 1e-3,
    "algorithm.alpha_lr": 1e-3,
    "algorithm.tau": 0.01,
    "policy.critic_layer_norm": True,
    "learning_starts": 200,
    "replay.capacity": 200_000,
    "save_interval": 50,
}
"""Applied to every task; the flags of the command line come after and win."""

TASK_AGENT: dict[str, AgentDefaults] = {
    "pendulum": {"algorithm.gamma": 0.99},
}
"""Per task, after :data:`REALWORLD_AGENT`."""

TASK_ACTOR: dict[str, dict[str, Any]] = {
    # 200-step episodes (10 s): new weights every second, and one episode of random actions first
    "pendulum": {"swap_every": 20, "random_steps": 200},
}
"""Per task, the actor settings a real-world run starts from."""


def agent_defaults(task: str) -> AgentDefaults:
    """The agent defaults of a real-world run of ``task``."""
    return {**REALWORLD_AGENT, **TASK_AGENT.get(task, {})}


def actor_cfg(task: str, overrides: list[str]) -> ActorCfg:
    """The actor settings of ``task``: :class:`ActorCfg`'s defaults, then the task's, then ``overrides``."""
    cfg = ActorCfg()
    for path, value in TASK_ACTOR.get(task, {}).items():
        setattr(cfg, path, value)
    apply_overrides({"actor": cfg}, overrides)
    return cfg
