"""Batched C MuJoCo backend: equality with sequential mj_step, derived fields, resets, bad controls, state."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from rslkit.envs.mujoco import ModelNotFoundError, MujocoBackend, MujocoBackendCfg, load_so101
from rslkit.envs.mujoco.models import so101_spec

try:
    MODEL = load_so101()
    _FORCE_SPEC = so101_spec()
except ModelNotFoundError as err:  # only the model files may be missing; anything else must fail loudly
    pytest.skip(f"SO-101 model missing ({err})", allow_module_level=True)

# SO-101 with acceleration-stage sensors (every actuator's force): only a step computes them.
for _actuator in range(MODEL.nu):
    _FORCE_SPEC.add_sensor(
        name=f"force_{_actuator}",
        type=mujoco.mjtSensor.mjSENS_ACTUATORFRC,
        objtype=mujoco.mjtObj.mjOBJ_ACTUATOR,
        objname=MODEL.actuator(_actuator).name,
    )
FORCE_MODEL = _FORCE_SPEC.compile()

STATE = mujoco.mjtState.mjSTATE_INTEGRATION


def _random_ctrl(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    low = torch.as_tensor(MODEL.actuator_ctrlrange[:, 0])
    high = torch.as_tensor(MODEL.actuator_ctrlrange[:, 1])
    return low + (high - low) * torch.rand(n, MODEL.nu, generator=g, dtype=torch.float64)


def _sequential(state: np.ndarray, ctrls: list[torch.Tensor], decimation: int) -> tuple[np.ndarray, np.ndarray]:
    """Step one MjData per env with mj_step from ``state`` rows: (final states, sensordata at the final state)."""
    states, sensors = [], []
    for i, row in enumerate(state):
        data = mujoco.MjData(MODEL)
        mujoco.mj_setState(MODEL, data, row, STATE)
        for ctrl in ctrls:
            data.ctrl[:] = ctrl[i].numpy()
            for _ in range(decimation):
                mujoco.mj_step(MODEL, data)
        out = np.empty(mujoco.mj_stateSize(MODEL, STATE))
        mujoco.mj_getState(MODEL, data, out, STATE)
        mujoco.mj_forward(MODEL, data)
        states.append(out)
        sensors.append(data.sensordata.copy())
    return np.stack(states), np.stack(sensors)


@pytest.mark.parametrize("threads", [1, 2])
def test_matches_sequential_mj_step(threads: int) -> None:
    n, decimation = 8, 5
    backend = MujocoBackend(MODEL, n, MujocoBackendCfg(sim_threads=threads, decimation=decimation))
    start = _random_ctrl(n, 0)
    backend.set_joint_state(torch.arange(n), start, ctrl=start)
    before = backend.get_state().numpy()
    ctrls = [_random_ctrl(n, s) for s in (1, 2, 3)]
    for ctrl in ctrls:
        backend.step(ctrl)
    states, sensors = _sequential(before, ctrls, decimation)
    np.testing.assert_array_equal(backend.state.numpy(), states)  # bit-identical, warm start included
    np.testing.assert_allclose(backend.sensordata().numpy(), sensors, rtol=0, atol=1e-12)


def test_derived_fields_are_current() -> None:
    backend = MujocoBackend(MODEL, 4, MujocoBackendCfg(sim_threads=1))
    backend.step(_random_ctrl(4, 0))
    ee = mujoco.mj_name2id(MODEL, mujoco.mjtObj.mjOBJ_SITE, "gripperframe")
    site = backend.site_xpos()[:, ee]
    torch.testing.assert_close(backend.sensordata()[:, backend.sensor_slice("ee_pos")], site)
    for i in range(4):
        data = mujoco.MjData(MODEL)
        data.qpos[:] = backend.qpos[i].numpy()
        mujoco.mj_kinematics(MODEL, data)
        np.testing.assert_allclose(backend.xpos()[i].numpy(), data.xpos, atol=1e-12)
        np.testing.assert_allclose(site[i].numpy(), data.site_xpos[ee], atol=1e-12)
    assert backend.xpos().shape == (4, MODEL.nbody, 3) and backend.qpos.shape == (4, MODEL.nq)
    with pytest.raises(ValueError, match="no sensor 'nope'"):
        backend.sensor_slice("nope")


def test_reset_and_set_joint_state_touch_only_given_envs() -> None:
    backend = MujocoBackend(MODEL, 4, MujocoBackendCfg(sim_threads=1))
    backend.step(_random_ctrl(4, 0))
    before = backend.get_state()
    q = torch.full((2, MODEL.nq), 0.1, dtype=torch.float64)
    backend.set_joint_state(torch.tensor([1, 3]), q, ctrl=q[:, : MODEL.nu])
    assert torch.equal(backend.state[[0, 2]], before[[0, 2]])
    assert torch.equal(backend.qpos[[1, 3]], q) and bool((backend.qvel[[1, 3]] == 0).all())
    backend.reset(torch.tensor([0]))
    torch.testing.assert_close(backend.qpos[0], torch.as_tensor(MODEL.qpos0))
    assert torch.equal(backend.state[2], before[2])


def _steps_with_resets(threads: int) -> torch.Tensor:
    """Sensor readings ``[12, 8, nsensordata]`` of 8 envs over 6 steps, some reset or forwarded after each step."""
    backend = MujocoBackend(FORCE_MODEL, 8, MujocoBackendCfg(sim_threads=threads, decimation=5))
    force = backend.sensor_slice("force_0").start
    readings = []
    for seed in range(1, 7):
        backend.step(_random_ctrl(8, seed))
        stepped = backend.sensordata()
        assert bool((stepped[:, force] != 0).all())  # the step computed every env's actuator force
        if seed % 2:
            ids = torch.tensor([1, 4, 6])
            q = _random_ctrl(3, 10 + seed)
            backend.set_joint_state(ids, q, ctrl=q)
            after = backend.sensordata()
            # as one MjData per env would have them: zero after the reset (mj_resetData), not another env's
            assert bool((after[ids, force:] == 0).all())
        else:
            backend.forward(torch.tensor([0, 5]))
            after = backend.sensordata()
            assert torch.equal(after[:, force:], stepped[:, force:])  # forward leaves the last step's values
        readings += [stepped, after]
    return torch.stack(readings)


def test_sensors_of_reset_envs_do_not_depend_on_sim_threads() -> None:
    """Acceleration-stage sensors after resets and forwards are the same at every thread count, run to run.

    The stepping pool shares one MjData among the simulations a thread runs; a reset or forward computes only the
    position and velocity stages, so without the backend's per-env copy these columns came from whichever env that
    thread had stepped last (go2-flat's critic saw another env's foot contacts after a reset).
    """
    single = _steps_with_resets(1)
    for threads in (2, 2, 4):
        assert torch.equal(_steps_with_resets(threads), single), f"sim_threads={threads}"


def test_non_finite_controls_raise_and_leave_state_intact() -> None:
    backend = MujocoBackend(MODEL, 6, MujocoBackendCfg(sim_threads=2))
    backend.step(_random_ctrl(6, 0))
    before = backend.get_state()
    ctrl = _random_ctrl(6, 1)
    ctrl[2, 0] = float("nan")
    ctrl[4, 3] = float("inf")
    with pytest.raises(ValueError, match=r"Non-finite controls for env indices \[2, 4\]"):
        backend.step(ctrl)
    assert torch.equal(backend.state, before)
    with pytest.raises(ValueError, match="shape"):
        backend.step(torch.zeros(6, MODEL.nu + 1, dtype=torch.float64))
    ctrl[2, 0] = ctrl[4, 3] = 0.0
    backend.step(ctrl)  # still usable


def test_state_round_trip_is_exact() -> None:
    a = MujocoBackend(MODEL, 3, MujocoBackendCfg(sim_threads=1))
    a.step(_random_ctrl(3, 0))
    saved = a.get_state()
    a.step(_random_ctrl(3, 1))
    b = MujocoBackend(MODEL, 3, MujocoBackendCfg(sim_threads=2))
    b.set_state(saved)
    b.step(_random_ctrl(3, 1))
    assert torch.equal(a.state, b.state) and torch.equal(a.xpos(), b.xpos())
    with pytest.raises(ValueError, match="same model and num_envs"):
        MujocoBackend(MODEL, 2).set_state(saved)


def test_bad_config() -> None:
    with pytest.raises(ValueError, match="decimation"):
        MujocoBackend(MODEL, 2, MujocoBackendCfg(decimation=0))
    with pytest.raises(ValueError, match="num_envs"):
        MujocoBackend(MODEL, 0)
