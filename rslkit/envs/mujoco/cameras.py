"""Camera observation groups of MuJoCo tasks: every env of a batched backend drawn by named cameras.

A task with cameras on returns, beside its vector groups, one group per camera: ``camera_<name>`` holding uint8
RGB images ``[N, H, W, 3]``, rows top-down (:mod:`rslkit.envs.camera_groups`). :class:`CameraRenderer` makes them:
for each env it loads the backend's state row into one ``MjData`` of a model to draw (same state layout as the
training model, with the cameras added), then draws it once per camera with one offscreen GL context
(:class:`~rslkit.envs.mujoco.render.Renderer`), which it reuses for the task's lifetime.

Speed is what data collection needs, so the drawing model is set up for it (:func:`configure_for_speed`): no
shadow map, no multisampling, an offscreen buffer of the image size, and no shadows, reflections or skybox in the
scene. Two qualities (``camera_quality``): ``fast`` draws the collision geometry (the training model's meshes and
primitives, MuJoCo's hidden geom group 3 switched on), ``visual`` the visual meshes. Rows whose state (and marker
positions) did not change since the previous call are not drawn again, so the extra observation pass of
``extras["final_obs"]`` only redraws the envs that were reset. Measured cost per frame: docs/cameras.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
import torch

from rslkit.envs.camera_groups import camera_group
from rslkit.envs.mujoco.render import Marker, Renderer, make_camera
from rslkit.utils.validation import expect

CAMERA_QUALITIES = ("fast", "visual")
"""``fast``: collision geometry (meshes and primitives of the training model); ``visual``: the visual meshes."""
QUALITY_GEOMGROUPS = {"fast": (0, 1, 3), "visual": (0, 1, 2)}
"""MuJoCo geom groups drawn per quality (SO-101: visual meshes are group 2, collision geoms group 3)."""
_OFF_SCENE_FLAGS = (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION, mujoco.mjtRndFlag.mjRND_SKYBOX)


def check_camera_cfg(cfg: Any, available: Sequence[str]) -> None:
    """Check a task config's ``cameras``, ``camera_width``, ``camera_height`` and ``camera_quality``.

    Raises:
        ConfigError: (a ``ValueError``) an unknown or repeated camera name (the message lists ``available``), a
            size below 1 pixel or an unknown quality.
    """
    names = tuple(cfg.cameras)
    valid = ", ".join(available) or "none (this task renders no cameras)"
    for name in names:
        expect(name in available, "cameras", f"unknown camera {name!r}; valid cameras: {valid}")
    expect(len(set(names)) == len(names), "cameras", f"names a camera twice: {names}")
    for field in ("camera_width", "camera_height"):
        size = getattr(cfg, field)
        expect(isinstance(size, int) and size >= 1, field, f"must be a positive number of pixels, got {size}")
    quality = cfg.camera_quality
    expect(quality in CAMERA_QUALITIES, "camera_quality", f"must be one of {CAMERA_QUALITIES}, got {quality!r}")


def configure_for_speed(model: mujoco.MjModel, width: int, height: int) -> None:
    """Make ``model`` cheap to draw at ``width x height``: no shadow map, no multisampling, an offscreen buffer of
    exactly the image size (in place; the physics is untouched)."""
    model.vis.quality.shadowsize = 0
    model.vis.quality.offsamples = 0
    model.vis.global_.offwidth = width
    model.vis.global_.offheight = height


def box_geoms(spec: mujoco.MjSpec) -> None:
    """Replace every mesh geom of ``spec`` by a box fitted to the mesh's bounding box (in place).

    The SO-101's meshes have ~320k triangles, on which software OpenGL spends its time; boxes draw several times faster
    (docs/benchmarks.md, section 9) and still show each link's pose. Geoms add no state: the state layout is unchanged.
    """
    spec.compiler.fitaabb = True
    for geom in spec.geoms:
        if geom.type == mujoco.mjtGeom.mjGEOM_MESH:
            geom.type = mujoco.mjtGeom.mjGEOM_BOX


class CameraRenderer:
    """Draws all N envs of a backend with named fixed cameras: ``render() -> {camera_<name>: [N, H, W, 3] uint8}``.

    Args:
        model: the model to draw, with the cameras; its ``mjSTATE_INTEGRATION`` size must equal the backend's state
            row (add cameras, lights and non-colliding geoms only). Its visual settings are changed for speed.
        backend: anything with ``get_state() -> [N, nstate]`` (the MuJoCo and Warp backends).
        cameras: names of fixed cameras of ``model``, one group per name in this order.
        width, height: image size in pixels.
        geomgroups: MuJoCo geom groups to draw (see :data:`QUALITY_GEOMGROUPS`).
        marker: radius and colour of the spheres drawn at ``marker_pos`` of :meth:`render` (e.g. a goal).

    Raises:
        ValueError: a camera ``model`` lacks (the message lists its cameras), a non-positive size, or state
            layouts that differ.
        RenderingUnavailableError: no headless OpenGL context (the message says what to install).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        backend: Any,
        cameras: Sequence[str],
        width: int = 64,
        height: int = 64,
        geomgroups: Sequence[int] = QUALITY_GEOMGROUPS["visual"],
        marker: Marker | None = None,
    ) -> None:
        if width < 1 or height < 1:
            raise ValueError(f"Image size must be positive, got {width}x{height}.")
        if not cameras:
            raise ValueError("Name at least one camera to render.")
        self._spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        nstate, backend_nstate = mujoco.mj_stateSize(model, self._spec), int(backend.get_state().shape[-1])
        if nstate != backend_nstate:
            raise ValueError(
                f"Camera model has {nstate} state values per env, the backend {backend_nstate}; build it from the "
                "training model's description, adding only cameras, lights and non-colliding geoms."
            )
        self.backend, self.model, self.names = backend, model, tuple(cameras)
        self.groups = tuple(camera_group(name) for name in self.names)
        self._cams = [make_camera(model, name) for name in self.names]  # ValueError lists the model's cameras
        configure_for_speed(model, width, height)
        self.renderer = Renderer(model, width, height, camera=self.names[0])
        self.renderer.option.geomgroup[:] = [int(g in geomgroups) for g in range(len(self.renderer.option.geomgroup))]
        for flag in _OFF_SCENE_FLAGS:
            self.renderer.scene.flags[flag] = 0
        self.marker = marker or Marker(pos=(0.0, 0.0, 0.0))
        self.data = mujoco.MjData(model)
        self._images = np.zeros((len(self.names), 0, height, width, 3), dtype=np.uint8)
        self._drawn: torch.Tensor | None = None
        """State rows (and marker positions) of the last images, ``[N, nstate + 3M]``: unchanged rows are reused."""

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` of the images."""
        return self.renderer.size

    def render(self, marker_pos: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Images of every env in the backend's current state, one group per camera.

        Args:
            marker_pos: ``[N, 3]`` or ``[N, M, 3]`` centres of spheres drawn into each env's images (world frame).

        Returns:
            ``{camera_<name>: [N, H, W, 3]}`` uint8 CPU tensors (new tensors each call), rows top-down.
        """
        states = self.backend.get_state().detach().cpu().double()
        n = states.shape[0]
        markers = torch.zeros(n, 0, 3, dtype=torch.float64)
        if marker_pos is not None:
            markers = marker_pos.detach().cpu().double().reshape(n, -1, 3)
        key = torch.cat((states, markers.flatten(1)), dim=1)
        if self._drawn is None or self._drawn.shape != key.shape:
            self._images = np.zeros((len(self.names), n, *self._images.shape[2:]), dtype=np.uint8)
            todo = torch.arange(n)
        else:
            todo = (key != self._drawn).any(dim=1).nonzero().squeeze(-1)
        for env_id in todo.tolist():
            self._draw(env_id, states[env_id].numpy(), markers[env_id].numpy())
        self._drawn = key
        return {group: torch.from_numpy(self._images[c].copy()) for c, group in enumerate(self.groups)}

    def _draw(self, env_id: int, state: np.ndarray, markers: np.ndarray) -> None:
        mujoco.mj_setState(self.model, self.data, state, self._spec)
        mujoco.mj_forward(self.model, self.data)
        spheres = [Marker(pos=p, radius=self.marker.radius, rgba=self.marker.rgba) for p in markers]
        for c, cam in enumerate(self._cams):
            self._images[c, env_id] = self.renderer.render(self.data, spheres, camera=cam)

    def close(self) -> None:
        """Free the GL context (the renderer cannot be used afterwards)."""
        self.renderer.close()


def task_cameras(spec: mujoco.MjSpec, backend: Any, cfg: Any, marker: Marker | None = None) -> CameraRenderer:
    """The :class:`CameraRenderer` of a task config's ``cameras``, ``camera_width/height`` and ``camera_quality``.

    Args:
        spec: the scene to draw with the cameras added, built with visual meshes for ``visual`` and without for
            ``fast`` (whose meshes are replaced here by boxes, :func:`box_geoms`); same state layout as the
            backend's model.
        backend: the task's physics backend.
        cfg: the task config (checked by :func:`check_camera_cfg`).
        marker: radius and colour of the task's marker spheres (e.g. a goal), if it draws any.
    """
    if cfg.camera_quality == "fast":
        box_geoms(spec)
    return CameraRenderer(
        spec.compile(),
        backend,
        cfg.cameras,
        cfg.camera_width,
        cfg.camera_height,
        QUALITY_GEOMGROUPS[cfg.camera_quality],
        marker,
    )
