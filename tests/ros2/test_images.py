"""The compressed-image tests of ``tests/deploy/test_ros2_images.py``, run in the ROS venv too: the node decodes
with the ROS venv's Pillow and numpy, not the main venv's."""

from __future__ import annotations

from tests.deploy.test_ros2_images import (  # noqa: F401 - collected here
    policy_path,
    test_compressed_images_drive_the_policy_and_bad_ones_hold,
    test_compressed_topics_are_named_by_their_suffix,
    test_other_formats_and_bad_bytes_are_refused,
    test_png_decodes_exactly_and_jpeg_within_a_tolerance,
)
