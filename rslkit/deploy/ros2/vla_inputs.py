"""The inputs of a VLA policy beside the joint state: the newest image of each camera and the instruction.

Each camera group ``camera_<name>`` of the policy takes the newest valid image of camera ``<name>`` (uint8 RGB
``[H, W, 3]`` of the exported size, from ``sensor_msgs/Image`` fields or a ``sensor_msgs/CompressedImage``'s JPEG /
PNG data; a mismatch or an undecodable image is a fault naming what is wrong, never a resize). The
instruction is text, looked up in the table stored in the exported model; an unknown one is refused and the
previous instruction stays. :meth:`VLAInputs.fault` says why the inputs cannot feed a tick (no image yet, a stale or
bad image, no instruction), and :meth:`VLAInputs.groups` gives the observation groups they add.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.ros2.images import compressed_image_array, image_array

CAMERA_PREFIX = "camera_"


class VLAInputs:
    """Camera images and the instruction of ``policy`` (a VLA export: uint8 camera groups, an instruction group).

    Args:
        policy: the exported policy (its camera groups and instruction table).
        image_timeout_s: largest accepted age of a camera's newest valid image.
        instruction: the starting instruction (empty: none until :meth:`set_instruction`).

    Raises:
        ValueError: when ``instruction`` is not in the policy's table (or the policy has none).
    """

    def __init__(self, policy: OnnxPolicy, image_timeout_s: float, instruction: str = "") -> None:
        self.policy, self.timeout_s = policy, image_timeout_s
        self.sizes = {g[len(CAMERA_PREFIX) :]: tuple(policy.obs_groups[g][:2]) for g in policy.camera_groups}
        """Camera name -> ``(height, width)`` the policy takes."""
        self.images: dict[str, np.ndarray] = {}
        self.arrivals: dict[str, float] = {}
        self.faults: dict[str, str] = {}
        self.instruction: str | None = None
        if instruction:
            self.set_instruction(instruction)

    @property
    def cameras(self) -> list[str]:
        """Camera names (``camera_<name>`` groups), in graph order."""
        return list(self.sizes)

    @property
    def takes_instruction(self) -> bool:
        """Whether the policy reads an instruction."""
        return self.policy.instruction_group is not None

    def set_instruction(self, text: str) -> None:
        """Follow ``text`` from the next inference on.

        Raises:
            ValueError: the policy takes no instruction, or ``text`` is not in its table (lists the known ones).
        """
        self.policy.instruction_embedding(text)  # raises for an unknown one
        self.instruction = text

    def on_image(self, now: float, camera: str, encoding: str, height: int, width: int, step: int, data: Any) -> None:
        """An image of ``camera`` arrived at ``now``; a bad one (encoding, size) becomes that camera's fault."""
        fault = self._size_fault(camera, height, width)
        if fault is not None:
            self.faults[camera] = fault
            return
        try:
            image = image_array(encoding, height, width, step, data)
        except ValueError as err:
            self.faults[camera] = f"camera '{camera}': {err}"
            return
        self._take(now, camera, image)

    def on_compressed_image(self, now: float, camera: str, data: Any) -> None:
        """A ``sensor_msgs/CompressedImage`` of ``camera`` (its ``data``: a JPEG or PNG file) arrived at ``now``;
        one that does not decode, or decodes to the wrong size, becomes that camera's fault."""
        try:
            image = compressed_image_array(data)
        except ValueError as err:
            self.faults[camera] = f"camera '{camera}': {err}"
            return
        fault = self._size_fault(camera, image.shape[0], image.shape[1])
        if fault is not None:
            self.faults[camera] = fault
            return
        self._take(now, camera, image)

    def _size_fault(self, camera: str, height: int, width: int) -> str | None:
        """Why a ``width x height`` image of ``camera`` is refused (None: it has the policy's size)."""
        expected = self.sizes[camera]
        if (height, width) == expected:
            return None
        return (
            f"camera '{camera}' sends {width}x{height} images but the policy takes {expected[1]}x{expected[0]} "
            "(width x height); set the camera driver to that resolution or resize upstream (the node does not "
            "resize)"
        )

    def _take(self, now: float, camera: str, image: np.ndarray) -> None:
        """``image`` (checked) is the newest of ``camera``, received at ``now``."""
        self.images[camera] = image
        self.arrivals[camera] = now
        self.faults.pop(camera, None)

    def fault(self, now: float) -> tuple[str, str] | None:
        """``(source, reason)`` why the inputs cannot feed a tick at ``now``, or None. Sources: ``bad_image`` (the
        newest image of a camera has the wrong size or encoding), ``no_image`` (none yet, or stale) and
        ``instruction`` (none set)."""
        for camera in self.sizes:
            if camera in self.faults:
                return "bad_image", self.faults[camera]
            arrival = self.arrivals.get(camera)
            if arrival is None:
                return "no_image", f"no image from camera '{camera}' yet"
            if now - arrival > self.timeout_s:
                age, limit = (now - arrival) * 1e3, self.timeout_s * 1e3
                return "no_image", f"camera '{camera}' image is stale ({age:.1f} ms old, timeout {limit:.1f} ms)"
        if self.takes_instruction and self.instruction is None:
            known = self.policy.instructions.texts if self.policy.instructions is not None else []
            return "instruction", (
                f"no instruction; set the instruction parameter or publish one (std_msgs/String) on the instruction "
                f"topic: one of {known}"
            )
        return None

    def groups(self) -> dict[str, Any]:
        """The observation groups these inputs add: ``camera_<name>`` images and the instruction text."""
        out: dict[str, Any] = {CAMERA_PREFIX + c: self.images[c] for c in self.sizes}
        if self.policy.instruction_group is not None:
            out[self.policy.instruction_group] = self.instruction
        return out
