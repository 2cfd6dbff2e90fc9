"""Torch-native batched tasks; importing this package registers them."""

from rslkit.envs.tasks import pendulum  # noqa: F401
