"""Compressed camera images (``sensor_msgs/CompressedImage``: JPEG / PNG decoded with Pillow) as policy inputs:
decoded pixels, and the holds a bad one causes. Pillow is a ROS-venv dependency (Makefile ``ROS_DEPS``); the main
venv has it through matplotlib, and these skip where it is missing. ``tests/ros2/test_images.py`` runs them in the
ROS venv too."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.controller import ControlOutput, PolicyController
from rslkit.deploy.ros2.images import compressed_image_array, is_compressed_topic
from tests.ros2.camera_policy import camera_policy

PIL_Image = pytest.importorskip("PIL.Image", reason="compressed images need Pillow (pip install pillow)")

J = ["j0", "j1", "j2"]
STATE, VELOCITY = [0.1, -0.2, 0.3], [0.0, 0.5, 0.0]


def encode(rgb: np.ndarray, fmt: str, **options: object) -> bytes:
    """``uint8 [H, W, 3]`` (or ``[H, W]``) as an image file of Pillow format ``fmt``."""
    out = io.BytesIO()
    PIL_Image.fromarray(rgb).save(out, format=fmt, **options)
    return out.getvalue()


def noise(height: int = 16, width: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def smooth(height: int = 16, width: int = 16) -> np.ndarray:
    """A gradient image: JPEG keeps it within a few levels (noise it does not)."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([8 * x + 40, 8 * y + 30, 4 * (x + y) + 60], axis=-1).astype(np.uint8)


def test_png_decodes_exactly_and_jpeg_within_a_tolerance() -> None:
    rgb = noise()
    np.testing.assert_array_equal(compressed_image_array(encode(rgb, "PNG")), rgb)
    gray = rgb[..., 0]  # other PNG modes come out as RGB
    np.testing.assert_array_equal(compressed_image_array(encode(gray, "PNG")), np.repeat(gray[..., None], 3, -1))
    decoded = compressed_image_array(np.frombuffer(encode(rgb, "PNG"), np.uint8))  # data as a uint8 array
    np.testing.assert_array_equal(decoded, rgb)
    image = smooth()
    jpeg = compressed_image_array(encode(image, "JPEG", quality=95))
    assert jpeg.dtype == np.uint8 and jpeg.shape == (16, 16, 3)
    error = np.abs(jpeg.astype(int) - image.astype(int))
    assert error.max() <= 12 and error.mean() < 3, (error.max(), error.mean())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (lambda: encode(noise(), "GIF"), "compressed image is GIF; publish JPEG or PNG"),
        (lambda: encode(noise(), "BMP"), "compressed image is BMP; publish JPEG or PNG"),
        (lambda: b"not an image at all", "compressed image of 19 bytes could not be decoded"),
        (lambda: b"", "compressed image of 0 bytes could not be decoded"),
        (lambda: encode(noise(), "PNG")[:60], "could not be decoded"),  # truncated
    ],
)
def test_other_formats_and_bad_bytes_are_refused(data, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compressed_image_array(data())


def test_compressed_topics_are_named_by_their_suffix() -> None:
    assert is_compressed_topic("camera/front/image_raw/compressed")
    assert not is_compressed_topic("camera/front/image_raw")
    assert not is_compressed_topic("camera/front/compressed_raw")


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return camera_policy(tmp_path_factory.mktemp("camera") / "camera.onnx")


def _tick(ctrl: PolicyController, k: int) -> ControlOutput:
    out = ctrl.on_joint_state(k / 50.0, J, STATE, VELOCITY)
    assert out is not None
    return out


def test_compressed_images_drive_the_policy_and_bad_ones_hold(policy_path: Path) -> None:
    cfg = ControllerCfg(J, 50.0, observation=["joint_pos", "joint_vel"])
    raw, compressed = PolicyController(OnnxPolicy(policy_path), cfg), PolicyController(OnnxPolicy(policy_path), cfg)
    rgb = noise(seed=1)
    raw.on_image(0.0, "front", "rgb8", 16, 16, 48, rgb.tobytes())
    compressed.on_compressed_image(0.0, "front", encode(rgb, "PNG"))
    expected = _tick(raw, 0)
    out = _tick(compressed, 0)
    assert expected.status == out.status == "run"
    np.testing.assert_array_equal(out.positions, expected.positions)  # PNG: the same pixels, the same command
    for k, (data, reason) in enumerate(
        [
            (encode(noise(32, 24), "PNG"), "camera 'front' sends 24x32 images but the policy takes 16x16"),
            (encode(rgb, "GIF"), "camera 'front': compressed image is GIF; publish JPEG or PNG"),
            (b"\xff\xd8garbage", "camera 'front': compressed image of 9 bytes could not be decoded"),
        ],
        start=1,
    ):
        compressed.on_compressed_image(k / 50.0, "front", data)  # a fault, never an exception
        out = _tick(compressed, k)
        assert out.status == "hold" and reason in out.reason, out.reason
        np.testing.assert_array_equal(out.positions, expected.positions)  # holds the last command
    assert compressed.counts["hold:bad_image"] == 3
    compressed.on_compressed_image(4 / 50.0, "front", encode(smooth(), "JPEG", quality=95))
    raw.on_image(4 / 50.0, "front", "rgb8", 16, 16, 48, smooth().tobytes())
    out, expected = _tick(compressed, 4), _tick(raw, 4)
    assert out.status == "run"
    np.testing.assert_allclose(out.positions, expected.positions, atol=0.05)  # JPEG: close, not equal
    with pytest.raises(ValueError, match=r"no camera 'side'; its cameras are \['front'\]"):
        compressed.on_compressed_image(0.1, "side", encode(rgb, "PNG"))
