"""Camera observation groups: how an env exposes images beside its vector groups (no torch or MuJoCo import).

A task with cameras returns one observation group per camera, named ``camera_<name>`` and holding uint8 images
``[N, H, W, 3]`` (RGB, rows top-down). Recorders, datasets and reward models find the images by this prefix; a
LeRobotDataset stores camera ``<name>`` as the feature ``observation.images.<name>``.
"""

from __future__ import annotations

from collections.abc import Iterable

CAMERA_PREFIX = "camera_"
"""Observation groups whose name starts with this hold images ``[N, H, W, 3]`` uint8."""
DATASET_IMAGE_PREFIX = "observation.images."
"""LeRobot's feature-name prefix for camera streams."""


def camera_group(name: str) -> str:
    """Observation group of camera ``name``: ``camera_<name>``.

    Raises:
        ValueError: for an empty name or one that already carries the prefix.
    """
    if not name or name.startswith(CAMERA_PREFIX):
        raise ValueError(f"Camera names are bare (e.g. 'front'), got {name!r}; its group is '{CAMERA_PREFIX}<name>'.")
    return CAMERA_PREFIX + name


def camera_names(groups: Iterable[str]) -> list[str]:
    """Bare camera names among observation group names, in their order (``camera_front`` -> ``front``)."""
    return [g[len(CAMERA_PREFIX) :] for g in groups if g.startswith(CAMERA_PREFIX)]


def dataset_image_key(name: str) -> str:
    """LeRobot feature name of camera ``name``: ``observation.images.<name>``."""
    return DATASET_IMAGE_PREFIX + name
