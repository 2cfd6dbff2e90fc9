"""Torch-native batched tasks; importing this package registers them."""

from rslkit.envs.tasks import (  # noqa: F401
    cartpole,
    cartpole_swingup,
    go2_flat,  # Unitree Go2 locomotion
    pendulum,
    point_reach,
    so101_lift,  # SO-101 cube lifting
    so101_pick_place,  # SO-101 language-conditioned pick and place
    so101_reach,
)
