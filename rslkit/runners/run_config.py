"""The fields every runner's config shares; each runner's config extends :class:`RunCfg`."""

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
