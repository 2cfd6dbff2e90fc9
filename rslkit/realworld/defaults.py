"""The agent settings a real-world run starts from, on top of the task's SAC recipe (before the user's overrides).

The task recipes are tuned for hundreds of parallel envs; one robot needs the RLPD / HIL-SERL recipe instead:
1-step targets, LayerNorm critics, a high update-to-data ratio, batch 256, and learning from the first few hundred
transitions. Measured on pendulum with one env (docs/benchmarks.md, section 8).
"""

from __future__ import annotations

REALWORLD_OVERRIDES: list[str] = [
    "--agent.algorithm.n_step", "1",
    "--agent.algorithm.utd_ratio", "10",
    "--agent.algorithm.batch_size", "256",
    "--agent.algorithm.actor_lr", "1e-3",
    "--agent.algorithm.critic_lr", "1e-3",
    "--agent.algorithm.alpha_lr", "1e-3",
    "--agent.algorithm.tau", "0.01",
    "--agent.policy.critic_layer_norm", "true",
    "--agent.learning_starts", "200",
    "--agent.replay.capacity", "200000",
    "--agent.save_interval", "50",
]  # fmt: skip
"""Applied to every task; the flags of the command line come after and win."""

TASK_OVERRIDES: dict[str, list[str]] = {
    "pendulum": ["--agent.algorithm.gamma", "0.99"],
}
"""Per task, after :data:`REALWORLD_OVERRIDES`."""


ACTOR_OVERRIDES: dict[str, list[str]] = {
    # 200-step episodes (10 s): new weights every second, and one episode of random actions first
    "pendulum": ["--actor.swap_every", "20", "--actor.random_steps", "200"],
}
"""Per task, the actor settings (``--actor.*``) a real-world run starts from."""


def realworld_overrides(task: str) -> list[str]:
    """The agent defaults of a real-world run of ``task`` as command-line overrides."""
    return [*REALWORLD_OVERRIDES, *TASK_OVERRIDES.get(task, [])]


def actor_overrides(task: str) -> list[str]:
    """The actor defaults of a real-world run of ``task`` (before the command line's ``--actor.*``)."""
    return list(ACTOR_OVERRIDES.get(task, []))
