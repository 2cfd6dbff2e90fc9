"""The fields every runner's config shares (:class:`RunCfg`), those of the runners that collect rollouts by stepping
envs (:class:`RolloutCfg`: PPO, SAC, ReinFlow) and of the step-policy ones among them (:class:`EnvRunCfg`: PPO,
SAC)."""

from __future__ import annotations

from dataclasses import dataclass

from rslkit.utils.validation import expect

LOGGERS = ("tensorboard", "wandb")


@dataclass
class RunCfg:
    """Length, checkpoints and logging of a run. CLI: ``--agent.<field>`` (``--max_iterations`` too)."""

    max_iterations: int = 300
    """Total iterations of the run (a resumed run continues up to this number)."""
    save_interval: int = 50
    """Iterations between checkpoints (the last iteration, Ctrl-C and SIGTERM always save)."""
    logger: tuple[str, ...] = ("tensorboard",)
    """Any of ``tensorboard``, ``wandb`` (``metrics.csv`` and the console are always written)."""
    wandb_project: str = "rslkit"
    """W&B project of ``logger=wandb`` runs (``pip install wandb``; ``wandb login`` once)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the loop cannot run with."""
        expect(self.max_iterations >= 0, "max_iterations", f"must be >= 0, got {self.max_iterations}")
        expect(self.save_interval >= 1, "save_interval", f"must be >= 1, got {self.save_interval}")
        unknown = [b for b in self.logger if b not in LOGGERS]
        expect(not unknown, "logger", f"has unknown backends {unknown}; use any of {', '.join(LOGGERS)}")


@dataclass
class RolloutCfg(RunCfg):
    """A run whose iterations collect a rollout by stepping envs (PPO, SAC, ReinFlow). CLI: ``--agent.<field>``."""

    num_steps_per_env: int = 24
    """Env steps (a chunk runner: decisions) per env and iteration (PPO: the rollout length)."""
    check_for_nan: bool = True
    """Raise when observations or rewards are non-finite (names the env indices)."""

    def check(self) -> None:
        """:meth:`RunCfg.check`, and a rollout of at least one step."""
        super().check()
        steps = self.num_steps_per_env
        expect(isinstance(steps, int) and steps >= 1, "num_steps_per_env", f"must be an integer >= 1, got {steps}")


@dataclass
class EnvRunCfg(RolloutCfg):
    """A run of a step policy that collects its data by stepping envs (on- and off-policy RL). CLI:
    ``--agent.<field>``."""

    init_at_random_ep_len: bool = False
    """Spread initial episode lengths so time-outs do not all happen at once."""
    episode_stats_window: int = 100
    """Finished episodes averaged for the return / length / success figures."""

    def check(self) -> None:
        """:meth:`RolloutCfg.check`, and a statistics window of at least one episode."""
        super().check()
        window = self.episode_stats_window
        expect(
            isinstance(window, int) and window >= 1, "episode_stats_window", f"must be an integer >= 1, got {window}"
        )
