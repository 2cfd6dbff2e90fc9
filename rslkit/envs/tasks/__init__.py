"""Torch-native batched tasks; importing this package registers them."""

from rslkit.envs.tasks import cartpole, cartpole_swingup, pendulum, point_reach, so101_reach  # noqa: F401
