"""Camera images as policy inputs: ``sensor_msgs/Image`` fields or ``sensor_msgs/CompressedImage`` data -> uint8
RGB ``[H, W, 3]``, checked, never resized.

The node refuses an image whose size differs from the policy's rather than resizing it: a resize changes what the
policy sees (interpolation, aspect ratio) and belongs upstream, where it can be checked (the camera driver's
resolution, or ``image_proc``'s resize node). ``sensor_msgs/CompressedImage`` (``image_transport``'s
``compressed`` transport) is taken as JPEG or PNG and decoded with Pillow, imported only for a compressed camera
topic (checked at start by :func:`require_decoder`): a node without one does not need it. Its ``format`` field is
informational (JPEG and PNG files carry their own colour order), so the bytes are decoded by their content.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

ENCODINGS = ("rgb8", "bgr8")
"""``sensor_msgs/Image`` encodings the node takes."""
COMPRESSED_FORMATS = ("JPEG", "PNG")
"""Image file formats (Pillow's names) a ``sensor_msgs/CompressedImage`` may carry."""
COMPRESSED_SUFFIX = "/compressed"
"""A camera topic ending in this is a ``sensor_msgs/CompressedImage`` topic (``image_transport``'s convention)."""


def is_compressed_topic(topic: str) -> bool:
    """Whether camera ``topic`` carries ``sensor_msgs/CompressedImage`` (its name ends in ``/compressed``)."""
    return topic.endswith(COMPRESSED_SUFFIX)


def require_decoder() -> None:
    """Check that compressed images can be decoded (at start, rather than failing on the first image).

    Raises:
        ValueError: when Pillow is not installed.
    """
    try:
        import PIL.Image  # noqa: F401
    except ImportError as err:
        raise ValueError(
            "A camera topic ends in /compressed (sensor_msgs/CompressedImage), which the node decodes with Pillow; "
            "install it in the node's environment (pip install 'pillow>=10') or subscribe to the raw topic."
        ) from err


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


def compressed_image_array(data: Any) -> np.ndarray:
    """The RGB image ``uint8 [H, W, 3]`` in a ``sensor_msgs/CompressedImage``'s ``data`` (a JPEG or PNG file).

    Raises:
        ValueError: when the bytes are not a decodable JPEG or PNG image (another format, truncated, garbage).
    """
    from PIL import Image, UnidentifiedImageError  # here: only compressed cameras need Pillow

    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    try:
        with Image.open(io.BytesIO(raw)) as img:
            if img.format not in COMPRESSED_FORMATS:
                raise ValueError(
                    f"compressed image is {img.format or 'of an unknown format'}; publish "
                    f"{' or '.join(COMPRESSED_FORMATS)} (image_transport's compressed transport) or a raw image"
                )
            return np.asarray(img.convert("RGB"), np.uint8).copy()
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError) as err:  # bad or truncated
        raise ValueError(
            f"compressed image of {len(raw)} bytes could not be decoded ({err}); publish a JPEG or PNG "
            "(image_transport's compressed transport) or a raw image"
        ) from err
