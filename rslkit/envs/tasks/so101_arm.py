"""What the SO-101 tasks share: the batched MuJoCo arm, its joint and control tables, position targets stepped
through the backend, exact resume, the joint observations and rendering."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rslkit.envs.torch_task import TorchTask

if TYPE_CHECKING:
    from rslkit.envs.mujoco.cameras import CameraRenderer
    from rslkit.envs.mujoco.render import BackendRenderer, CameraPose, Marker

# Kept here so that importing a task module (which registers the task) needs no MuJoCo.
ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
GRIPPER = "gripper"


def import_mujoco(task: str) -> Any:
    """The ``mujoco`` module, imported when a task is built (registration must work without MuJoCo)."""
    try:
        import mujoco
    except ImportError as err:
        raise ImportError(f"{task} needs MuJoCo >= 4.0 ({err}); install it with `pip install -e '.[mujoco]'`.") from err
    return mujoco


class SO101ArmTask(TorchTask):
    """An SO-101 task: :meth:`_build_arm` makes the batched physics and the tables of the joints the policy drives
    (``self._act``: their actuators; ``_qpos_ids`` / ``_dof_ids``: their positions and velocities; control ranges
    ``_ctrl_low`` / ``_ctrl_high``, midpoints ``_ctrl_mid`` and half-widths ``_ctrl_half`` of every actuator).
    A subclass reads its cached fields from the backend in :meth:`_refresh`."""

    backend: Any
    _cameras: CameraRenderer | None
    _renderer: BackendRenderer | None

    def _build_arm(self, model: Any, joints: Sequence[str], sim: str, sim_threads: int, decimation: int) -> None:
        """The backend (``--sim``) for ``model`` and the tables of ``joints`` (each driven by its actuator)."""
        mujoco = import_mujoco(type(self).__name__)
        from rslkit.envs.mujoco.backend import MujocoBackendCfg
        from rslkit.envs.mujoco.factory import make_backend

        backend_cfg = MujocoBackendCfg(sim_threads=sim_threads, decimation=decimation)
        self.backend = make_backend(model, self.num_envs, backend_cfg, sim=sim, device=self.device)
        # Joint and control constants live where the backend keeps its tensors (CPU, or the GPU for --sim warp).
        sim_device = self.backend.qpos.device
        act_ids = [int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, j)) for j in joints]
        self._act = torch.tensor(act_ids, device=sim_device)
        joint_ids = [int(model.actuator_trnid[a, 0]) for a in act_ids]
        self._qpos_ids = torch.tensor([int(model.jnt_qposadr[j]) for j in joint_ids], device=sim_device)
        self._dof_ids = torch.tensor([int(model.jnt_dofadr[j]) for j in joint_ids], device=sim_device)
        ctrl_range = torch.as_tensor(model.actuator_ctrlrange, dtype=torch.float64, device=sim_device)
        self._ctrl_low, self._ctrl_high = ctrl_range[:, 0], ctrl_range[:, 1]
        self._ctrl_mid = 0.5 * (self._ctrl_low + self._ctrl_high)
        self._ctrl_half = 0.5 * (self._ctrl_high - self._ctrl_low)
        self.last_action = torch.zeros(self.num_envs, self.num_actions, device=self.device)
        self._prev_action = self.last_action.clone()
        self._cameras = None
        self._renderer = None
        """``render_frame``'s renderer, built at its first call."""

    @property
    def step_dt(self) -> float:
        """Simulated seconds per :meth:`step`."""
        return self.cfg.decimation * float(self.backend.model.opt.timestep)

    @abstractmethod
    def _refresh(self) -> None:
        """Read the task's cached fields (positions, contacts) of every env from the backend."""

    # ----------------------------------------------------------------- state
    def load_state_dict(self, state: dict) -> None:
        """Restore a state saved by :meth:`state_dict`, MuJoCo's integration state included (exact resume)."""
        super().load_state_dict(state)
        self.backend.forward()
        self._refresh()

    def _after_state_rows_written(self, env_ids: torch.Tensor) -> None:
        """After :meth:`start_episode_from`: derived MuJoCo fields of ``env_ids``, then the task's cached reads."""
        self.backend.forward(env_ids.cpu())
        self._refresh()

    # ----------------------------------------------------------------- stepping
    def _pre_step(self) -> None:
        self._prev_action.copy_(self.last_action)

    def _controls(self) -> torch.Tensor:
        """The controls the actuators hold now ``[N, nu]`` (float64; warp keeps float32)."""
        return self.backend.ctrl.to(self._ctrl_mid, copy=True)

    def _step_controls(self, ctrl: torch.Tensor, actions: torch.Tensor) -> None:
        """Step the physics with ``ctrl`` (clipped to the control ranges); ``actions`` become :attr:`last_action`."""
        self.backend.step(torch.minimum(torch.maximum(ctrl, self._ctrl_low), self._ctrl_high))
        self.last_action = actions.detach().clone()
        self._refresh()

    def _joint_observations(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The driven joints' positions normalized to ``[-1, 1]`` by their control ranges and velocities / 10."""
        q = self.backend.qpos[:, self._qpos_ids]
        q_norm = ((q - self._ctrl_mid[self._act]) / self._ctrl_half[self._act]).to(self.device, torch.float32)
        qd = (0.1 * self.backend.qvel[:, self._dof_ids]).to(self.device, torch.float32)
        return q_norm, qd

    # ----------------------------------------------------------------- rendering
    def _render(
        self,
        env_id: int,
        size: tuple[int, int],
        visual_model: Callable[[], Any],
        camera: CameraPose,
        markers: Sequence[Marker] = (),
    ) -> np.ndarray:
        """Env ``env_id`` drawn with ``visual_model()`` (built, with its renderer, at the first call of a size)."""
        from rslkit.envs.mujoco.render import BackendRenderer

        if self._renderer is None or self._renderer.size != size:
            if self._renderer is not None:
                self._renderer.close()
            self._renderer = BackendRenderer(visual_model(), self.backend, *size, camera=camera)
        return self._renderer.render(env_id, markers=list(markers))

    def close(self) -> None:
        """Release the renderers (cameras, ``render_frame``; their GL contexts) and the physics."""
        for renderer in (self._cameras, self._renderer):
            if renderer is not None:
                renderer.close()
        self._cameras = self._renderer = None
        self.backend.close()
