"""Camera features of a LeRobotDataset: names, feature keys, declared frame shapes, image-frame validation.

Camera ``front`` is the feature ``observation.images.front`` (:func:`~rslkit.envs.camera_groups.dataset_image_key`).
A dataset whose camera feature lies outside that prefix (LeRobot's PushT has ``observation.image``) names the camera
by its full key, so that every camera feature has a name and names map back to keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from rslkit.envs.camera_groups import DATASET_IMAGE_PREFIX, dataset_image_key

CAMERA_DTYPES = ("image", "video")
"""LeRobot feature dtypes that hold camera frames (PNG in parquet, or MP4 files)."""
ALL_CAMERAS = "all"
"""``cameras=`` value that asks for every camera of a dataset."""


def camera_key(name: str) -> str:
    """Feature key of camera ``name``: ``observation.images.<name>``, or ``name`` itself when it is a full key."""
    return name if name.startswith("observation.") else dataset_image_key(name)


def camera_name(key: str) -> str:
    """Camera name of feature ``key`` (the inverse of :func:`camera_key`)."""
    return key[len(DATASET_IMAGE_PREFIX) :] if key.startswith(DATASET_IMAGE_PREFIX) else key


def dataset_cameras(features: Mapping[str, dict]) -> dict[str, str]:
    """``{camera name: feature key}`` of the image and video features, in the order of ``meta/info.json``."""
    return {
        camera_name(k): k for k, ft in features.items() if isinstance(ft, dict) and ft.get("dtype") in CAMERA_DTYPES
    }


def select_cameras(root: Path, features: Mapping[str, dict], cameras: Sequence[str] | str) -> dict[str, str]:
    """``{name: key}`` of the requested cameras (``"all"``: every one, ``()``: none).

    Raises:
        ValueError: for a camera the dataset lacks, listing the ones it has.
    """
    available = dataset_cameras(features)
    if cameras == ALL_CAMERAS:
        return available
    if isinstance(cameras, str):
        cameras = [cameras]
    out = {}
    for requested in cameras:
        name = camera_name(requested)
        if name not in available:
            raise ValueError(
                f"Dataset '{root}' has no camera '{requested}'; its cameras are {sorted(available) or 'none'} "
                f"(features {sorted(available.values())}). Ask for one of them, or for none to train on state."
            )
        out[name] = available[name]
    return out


def declared_frame_shape(root: Path, key: str, feature: dict) -> tuple[int, int, int]:
    """``(H, W, 3)`` of a camera feature, from its ``shape`` and ``names`` (channels first or last).

    Raises:
        ValueError: for a shape that is not three positive sizes with 3 (RGB) channels.
    """
    shape = feature.get("shape")
    names = [str(n).lower() for n in (feature.get("names") or [])]
    fix = f"fix feature '{key}' in meta/info.json of '{root}' (LeRobot writes [height, width, 3])"
    if not isinstance(shape, (list, tuple)) or len(shape) != 3 or not all(isinstance(s, int) and s > 0 for s in shape):
        raise ValueError(f"Camera feature '{key}' has shape {shape!r}, not [H, W, C]; {fix}.")
    h, w, c = (shape[1], shape[2], shape[0]) if names and names[0].startswith("channel") else tuple(shape)
    if c != 3:
        raise ValueError(f"Camera feature '{key}' has {c} channels; rslkit reads RGB (3 channels) only; {fix}.")
    return int(h), int(w), 3


def check_frames(name: str, frames: torch.Tensor, length: int) -> None:
    """Raise unless ``frames`` of camera ``name`` is uint8 ``[length, H, W, 3]`` with ``H, W >= 1``.

    Raises:
        ValueError: naming the camera, the shape and dtype found and the expected ones.
    """
    shape = tuple(frames.shape)
    if frames.dtype != torch.uint8 or len(shape) != 4 or shape[0] != length or shape[-1] != 3 or 0 in shape:
        raise ValueError(
            f"Camera '{name}' must hold uint8 frames [{length}, H, W, 3] (RGB, one per step), got {frames.dtype} "
            f"{list(frames.shape)}."
        )
