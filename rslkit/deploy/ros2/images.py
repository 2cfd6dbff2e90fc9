"""Camera images as policy inputs: ``sensor_msgs/Image`` fields -> uint8 RGB ``[H, W, 3]``, checked, never resized.

The node refuses an image whose size differs from the policy's rather than resizing it: a resize changes what the
policy sees (interpolation, aspect ratio) and belongs upstream, where it can be checked (the camera driver's
resolution, or ``image_proc``'s resize node). ``sensor_msgs/CompressedImage`` is not taken: decoding JPEG / PNG
needs an image library the ROS venv does not carry; publish raw images (``image_transport``'s ``raw``
transport, or a ``republish`` node that decompresses).
"""

from __future__ import annotations

from typing import Any

import numpy as np

ENCODINGS = ("rgb8", "bgr8")
"""``sensor_msgs/Image`` encodings the node takes."""


def image_array(encoding: str, height: int, width: int, step: int, data: Any) -> np.ndarray:
    """The RGB image ``uint8 [height, width, 3]`` in a ``sensor_msgs/Image``'s fields (a copy: ``data`` may be
    reused by the middleware).

    Args:
        encoding: ``rgb8`` or ``bgr8`` (channels reversed to RGB).
        height, width: pixels.
        step: bytes per row (``>= 3 * width``; rows may be padded).
        data: the pixel bytes (``bytes``, ``array.array('B')`` or a uint8 array).

    Raises:
        ValueError: for another encoding, or fewer bytes than ``step * height`` / a ``step`` below ``3 * width``.
    """
    if encoding not in ENCODINGS:
        raise ValueError(
            f"image encoding '{encoding}' is not supported; publish {' or '.join(ENCODINGS)} (set the camera "
            "driver's pixel format, or convert upstream)"
        )
    buffer = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1)
    if step < 3 * width or buffer.size < step * height:
        raise ValueError(
            f"image of {width}x{height} {encoding} has step {step} and {buffer.size} bytes; a valid image has step "
            f">= {3 * width} and step * height = {step * height} bytes"
        )
    rows = buffer[: step * height].reshape(height, step)[:, : 3 * width].reshape(height, width, 3)
    return np.ascontiguousarray(rows[..., ::-1] if encoding == "bgr8" else rows)
