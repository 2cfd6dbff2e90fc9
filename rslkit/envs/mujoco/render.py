"""Offscreen rendering of batched MuJoCo tasks: one env's state, copied into a visual model, drawn to pixels.

Training models drop their visual meshes (they cost time and never collide); rendering uses a *visual* model of the
same robot (meshes kept, a floor and lights added) whose ``mjSTATE_INTEGRATION`` rows have the same layout, so a
row of :meth:`MujocoBackend.get_state` loads into it with ``mujoco.mj_setState``. Any physics backend whose
``get_state()`` returns those rows (``[N, nstate]``) can be drawn.

**The render hook.** A task that can be watched implements :class:`RenderableTask`: ``render_frame(env_id, width,
height) -> [H, W, 3] uint8`` and ``step_dt`` (simulated seconds per ``step``). ``play.py --video`` uses nothing
else. A MuJoCo task adopts it in a few lines::

    def render_frame(self, env_id=0, width=320, height=240):
        if self._renderer is None or self._renderer.size != (width, height):
            self._renderer = BackendRenderer(load_my_robot(visual=True), self.backend, width, height, camera="front")
        return self._renderer.render(env_id)

**OpenGL without a display.** The GL context is OSMesa (software; Debian package ``libosmesa6``, which ``make``
installs) or EGL (GPU drivers, or Mesa's software EGL). ``MUJOCO_GL=egl`` or ``MUJOCO_GL=osmesa`` picks one; by
default OSMesa is used when its library is present, else EGL. The choice is made per process, at the first render
(PyOpenGL binds one platform). Its cost per frame on a CPU: docs/benchmarks.md, section 9 (the ``BackendRenderer``
rows).
"""

from __future__ import annotations

import ctypes.util
import os
import weakref
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import mujoco
import numpy as np

GL_BACKENDS = ("osmesa", "egl")
"""Headless OpenGL platforms MuJoCo can render with, in the order tried when ``MUJOCO_GL`` names neither."""
_LIBRARIES = {"osmesa": "OSMesa", "egl": "EGL"}
_INSTALL_HINT = (
    "Install a headless OpenGL library: `apt-get install -y libosmesa6` (software rendering, what `make` installs) "
    "and run with MUJOCO_GL=osmesa, or use a GPU driver with EGL and MUJOCO_GL=egl."
)


class RenderingUnavailableError(RuntimeError):
    """No headless OpenGL context can be created; the message says what to install."""


@runtime_checkable
class RenderableTask(Protocol):
    """What ``play.py --video`` needs from a task."""

    step_dt: float
    """Simulated seconds per ``step`` (sets the video's frame rate)."""

    def reset(self) -> Any:
        """Reset every env (``play.py --video`` films from a reset)."""
        ...

    def step(self, actions: Any) -> Any:
        """The VecEnv step."""
        ...

    def render_frame(self, env_id: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        """RGB image ``[height, width, 3]`` (uint8) of env ``env_id`` in its current state."""
        ...


@dataclass
class Marker:
    """A sphere drawn into the scene (e.g. a goal), not part of the physics."""

    pos: tuple[float, float, float] | np.ndarray
    radius: float = 0.015
    rgba: tuple[float, float, float, float] = (0.1, 0.9, 0.2, 0.6)


@dataclass
class CameraPose:
    """A free camera looking at ``lookat`` from ``distance`` metres, ``azimuth`` / ``elevation`` in degrees."""

    lookat: tuple[float, float, float] = (0.0, 0.0, 0.0)
    distance: float = 1.0
    azimuth: float = 90.0
    elevation: float = -30.0


def gl_backend() -> str:
    """The headless GL platform rendering will use: ``MUJOCO_GL`` if it names one, else the first installed.

    Raises:
        RenderingUnavailableError: ``MUJOCO_GL`` is not set to a headless platform and none is installed.
    """
    requested = os.environ.get("MUJOCO_GL", "").strip().lower()
    if requested in GL_BACKENDS:
        return requested
    bound = os.environ.get("PYOPENGL_PLATFORM", "").strip().lower()
    if bound in GL_BACKENDS:  # PyOpenGL is already bound to this platform in this process
        return bound
    for name in GL_BACKENDS:
        if ctypes.util.find_library(_LIBRARIES[name]):
            return name
    raise RenderingUnavailableError(f"No headless OpenGL library found (looked for OSMesa and EGL). {_INSTALL_HINT}")


def make_camera(model: mujoco.MjModel, camera: str | int | CameraPose | None) -> mujoco.MjvCamera:
    """The ``MjvCamera`` of ``camera``: a fixed camera of ``model`` (name or id), a :class:`CameraPose` (free
    camera) or None (MuJoCo's default free camera, framing the whole model).

    Raises:
        ValueError: ``model`` has no such camera (the message lists its cameras).
    """
    cam = mujoco.MjvCamera()
    if camera is None:
        mujoco.mjv_defaultFreeCamera(model, cam)
    elif isinstance(camera, CameraPose):
        cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        cam.lookat[:] = camera.lookat
        cam.distance = camera.distance
        cam.azimuth = camera.azimuth
        cam.elevation = camera.elevation
    else:
        cam_id = camera if isinstance(camera, int) else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if not 0 <= cam_id < model.ncam:
            names = [model.camera(i).name for i in range(model.ncam)]
            raise ValueError(f"Model has no camera {camera!r}; its cameras: {names} (or None: free camera).")
        cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
        cam.fixedcamid = cam_id
    return cam


def _create_gl_context(width: int, height: int):
    """An OpenGL context of at least ``width x height`` pixels, made current."""
    name = gl_backend()
    try:
        if name == "osmesa":
            from mujoco.osmesa import GLContext
        else:
            from mujoco.egl import GLContext  # type: ignore[no-redef]
        context = GLContext(width, height)
        context.make_current()
    except (ImportError, OSError, RuntimeError, AttributeError) as err:
        raise RenderingUnavailableError(f"Could not create a {name} OpenGL context ({err}). {_INSTALL_HINT}") from err
    return context


def _free_gl(gl, context: mujoco.MjrContext) -> None:
    from OpenGL.error import Error as GLError

    try:
        gl.make_current()
    except GLError:
        # At interpreter exit mujoco.egl's own atexit hook may have terminated the EGL display first: the driver
        # has released the context with it, and nothing is left to free.
        return
    context.free()
    gl.free()


class Renderer:
    """Offscreen renderer of one ``MjModel``: ``render(data) -> [H, W, 3]`` uint8 pixels.

    Args:
        model: the model to draw (its offscreen buffer is enlarged to ``width x height`` if smaller).
        width, height: image size in pixels.
        camera: name or id of a fixed camera of the model, a :class:`CameraPose`, or None: MuJoCo's default free
            camera (framing the whole model).

    Raises:
        RenderingUnavailableError: no headless OpenGL context (the message says what to install).
        ValueError: unknown camera or non-positive size.
    """

    def __init__(
        self, model: mujoco.MjModel, width: int = 320, height: int = 240, camera: str | int | CameraPose | None = None
    ) -> None:
        if width < 1 or height < 1:
            raise ValueError(f"Image size must be positive, got {width}x{height}.")
        self.model = model
        self.size = (width, height)
        model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), width)
        model.vis.global_.offheight = max(int(model.vis.global_.offheight), height)
        self._camera = make_camera(model, camera)
        self._gl = _create_gl_context(model.vis.global_.offwidth, model.vis.global_.offheight)
        self._scene = mujoco.MjvScene(model, maxgeom=max(1000, 2 * model.ngeom))
        self._option = mujoco.MjvOption()
        self._perturb = mujoco.MjvPerturb()
        self._context = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._context)
        self._rect = mujoco.MjrRect(0, 0, width, height)
        self._pixels = np.empty((height, width, 3), dtype=np.uint8)
        # Runs at close() or, at the latest, at interpreter exit while the GL library is still loaded.
        self._free = weakref.finalize(self, _free_gl, self._gl, self._context)

    @property
    def option(self) -> mujoco.MjvOption:
        """What is drawn (``geomgroup`` flags, ``flags``); change it before :meth:`render`."""
        return self._option

    @property
    def scene(self) -> mujoco.MjvScene:
        """The scene drawn into (its ``flags``: shadows, reflections, skybox)."""
        return self._scene

    def render(
        self,
        data: mujoco.MjData,
        markers: tuple[Marker, ...] | list[Marker] = (),
        camera: mujoco.MjvCamera | None = None,
    ) -> np.ndarray:
        """Pixels ``[H, W, 3]`` (uint8, a new array) of ``data`` (its kinematics must be current), seen by
        ``camera`` (from :func:`make_camera`; None: the renderer's own camera)."""
        if self._context is None:
            raise RuntimeError("Renderer was closed; create a new one.")
        self._gl.make_current()
        cam = self._camera if camera is None else camera
        mujoco.mjv_updateScene(
            self.model, data, self._option, self._perturb, cam, mujoco.mjtCatBit.mjCAT_ALL, self._scene
        )
        for marker in markers:
            self._add_sphere(marker)
        mujoco.mjr_render(self._rect, self._scene, self._context)
        mujoco.mjr_readPixels(self._pixels, None, self._rect, self._context)
        return np.flipud(self._pixels).copy()  # OpenGL rows run bottom-up

    def _add_sphere(self, marker: Marker) -> None:
        if self._scene.ngeom >= self._scene.maxgeom:
            raise RuntimeError(f"Scene is full ({self._scene.maxgeom} geoms); draw fewer markers.")
        geom = self._scene.geoms[self._scene.ngeom]
        size = np.array([marker.radius, 0.0, 0.0])
        pos = np.asarray(marker.pos, dtype=np.float64)
        rgba = np.asarray(marker.rgba, dtype=np.float32)
        mujoco.mjv_initGeom(geom, mujoco.mjtGeom.mjGEOM_SPHERE, size, pos, np.eye(3).ravel(), rgba)
        self._scene.ngeom += 1

    def close(self) -> None:
        """Free the GL resources (also done at interpreter exit if never called)."""
        self._free()
        self._context = None

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class BackendRenderer:
    """Draws one env of a batched physics backend with a visual model of the same robot.

    Args:
        visual_model: same bodies, joints and actuators as the backend's model (visual meshes, floor and lights
            may differ): its ``mjSTATE_INTEGRATION`` size must equal the backend's state row.
        backend: anything with ``get_state() -> [N, nstate]`` (``MujocoBackend`` and the other MuJoCo backends).
        width, height, camera: see :class:`Renderer`.

    Raises:
        ValueError: the state layouts differ.
        RenderingUnavailableError: no headless OpenGL context (the message says what to install).
    """

    def __init__(
        self,
        visual_model: mujoco.MjModel,
        backend,
        width: int = 320,
        height: int = 240,
        camera: str | int | CameraPose | None = None,
    ) -> None:
        self._spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        nstate = mujoco.mj_stateSize(visual_model, self._spec)
        backend_nstate = int(backend.get_state().shape[-1])
        if nstate != backend_nstate:
            raise ValueError(
                f"Visual model has {nstate} state values per env, the backend {backend_nstate}; build the visual "
                "model from the same robot description (same bodies, joints, actuators) as the training model."
            )
        self.backend = backend
        self.model = visual_model
        self.data = mujoco.MjData(visual_model)
        self.renderer = Renderer(visual_model, width, height, camera)

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` of the images."""
        return self.renderer.size

    def render(self, env_id: int = 0, markers: tuple[Marker, ...] | list[Marker] = ()) -> np.ndarray:
        """Pixels ``[H, W, 3]`` (uint8) of env ``env_id`` in the backend's current state."""
        states = self.backend.get_state()
        if not 0 <= env_id < states.shape[0]:
            raise ValueError(f"env_id {env_id} is out of range for {states.shape[0]} envs.")
        row = states[env_id].detach().cpu().double().numpy()
        mujoco.mj_setState(self.model, self.data, row, self._spec)
        mujoco.mj_forward(self.model, self.data)
        return self.renderer.render(self.data, markers)

    def close(self) -> None:
        """Free the GL resources."""
        self.renderer.close()
