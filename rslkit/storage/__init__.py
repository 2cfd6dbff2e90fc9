"""Rollout storage for on-policy learning."""

from rslkit.storage.rollout_storage import RolloutStorage

__all__ = ["RolloutStorage"]
