"""Keyboard and gamepad intervention sources: key/axis mapping to action deltas, takeover toggle and deadman, with
pynput's own key objects (its dummy backend: no display here) and a fake pad (pygame finds no device here)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rslkit.realworld.teleop import (
    DeltaCommand,
    GamepadTeleop,
    KeyboardTeleop,
    default_gamepad_axes,
    default_key_bindings,
    key_name,
)

OBS = {"policy": np.zeros(3, np.float32)}
POLICY = np.array([0.2, -0.2, 0.0], np.float32)


class FakeListener:
    def __init__(self, on_press, on_release) -> None:
        self.on_press, self.on_release = on_press, on_release
        self.started = self.stopped = False

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True


class FakeKey:
    """A special key as pynput gives it (``Key.space``: a name, no char)."""

    def __init__(self, name: str) -> None:
        self.name = name


@pytest.fixture(scope="module")
def keys():
    os.environ.setdefault("PYNPUT_BACKEND", "dummy")  # no X server here; the key classes are the same
    keyboard = pytest.importorskip("pynput.keyboard", reason="pynput not installed (pip install pynput)")
    return keyboard


def _keyboard(**kw) -> tuple[KeyboardTeleop, FakeListener]:
    made: list[FakeListener] = []

    def factory(**callbacks) -> FakeListener:
        made.append(FakeListener(**callbacks))
        return made[-1]

    teleop = KeyboardTeleop(3, listener=factory, **kw)
    return teleop, made[0]


def test_key_names(keys) -> None:
    assert key_name(keys.KeyCode.from_char("Q")) == "q"
    assert key_name(keys.KeyCode.from_vk(65)) == "vk65"
    assert key_name(FakeKey("space")) == "space"
    assert default_key_bindings(2, 0.1) == {"q": (0, 0.1), "a": (0, -0.1), "w": (1, 0.1), "s": (1, -0.1)}
    with pytest.raises(ValueError, match="bindings"):
        default_key_bindings(9, 0.1)


def test_keyboard_toggle_then_held_keys_move_the_command(keys) -> None:
    teleop, listener = _keyboard(speed=0.1)
    assert listener.started
    teleop.reset()
    assert teleop(OBS, POLICY) is None  # not taken over
    space, q, s = FakeKey("space"), keys.KeyCode.from_char("q"), keys.KeyCode.from_char("s")
    listener.on_press(space)
    listener.on_press(space)  # auto-repeat while held: still one toggle
    listener.on_release(space)
    np.testing.assert_allclose(teleop(OBS, POLICY), POLICY)  # starts at the policy's action
    listener.on_press(q)
    listener.on_press(s)
    np.testing.assert_allclose(teleop(OBS, POLICY), [0.3, -0.3, 0.0], atol=1e-6)
    np.testing.assert_allclose(teleop(OBS, np.ones(3, np.float32)), [0.4, -0.4, 0.0], atol=1e-6)  # integrates
    listener.on_release(s)
    for _ in range(20):
        out = teleop(OBS, POLICY)
    np.testing.assert_allclose(out, [1.0, -0.4, 0.0], atol=1e-6)  # clipped to [-1, 1]
    listener.on_press(space)  # hand back
    listener.on_release(space)
    assert teleop(OBS, POLICY) is None
    stats = teleop.episode_stats()
    assert stats["interventions"] == 1 and stats["intervention_steps"] == 23 and stats["steps"] == 25
    teleop.close()
    assert listener.stopped


def test_keyboard_hold_mode_and_reset_ends_a_takeover(keys) -> None:
    teleop, listener = _keyboard(mode="hold", toggle_key="t", bindings={"x": (2, 0.5)})
    t, x = keys.KeyCode.from_char("t"), keys.KeyCode.from_char("x")
    listener.on_press(x)
    assert teleop(OBS, POLICY) is None  # a steering key alone does not take over
    listener.on_press(t)
    np.testing.assert_allclose(teleop(OBS, POLICY), [0.2, -0.2, 0.5])
    listener.on_release(t)
    assert teleop(OBS, POLICY) is None
    toggled, listener2 = _keyboard()
    listener2.on_press(FakeKey("space"))
    assert toggled(OBS, POLICY) is not None
    toggled.reset()
    assert toggled(OBS, POLICY) is None
    with pytest.raises(ValueError, match="outside"):
        KeyboardTeleop(2, bindings={"x": (5, 0.1)}, listener=FakeListener)
    with pytest.raises(ValueError, match="mode"):
        KeyboardTeleop(2, mode="sometimes", listener=FakeListener)  # type: ignore[arg-type]


class FakePad:
    """A pad with 6 axes and 8 buttons whose state the test sets."""

    def __init__(self) -> None:
        self.axes = [0.0] * 6
        self.buttons = [False] * 8

    def get_numaxes(self) -> int:
        return len(self.axes)

    def get_axis(self, axis: int) -> float:
        return self.axes[axis]

    def get_numbuttons(self) -> int:
        return len(self.buttons)

    def get_button(self, button: int) -> bool:
        return self.buttons[button]


def test_gamepad_deadman_sticks_deadzone_and_buttons() -> None:
    pad, pumps = FakePad(), []
    teleop = GamepadTeleop(6, joystick=pad, pump=lambda: pumps.append(1), speed=0.1, deadzone=0.2)
    policy = np.zeros(6, np.float32)
    teleop.reset()
    pad.axes[0], pad.axes[1], pad.axes[3] = 1.0, -0.6, 0.1  # right, up (y flipped), within the deadzone
    assert teleop(OBS, policy) is None  # deadman (LB, button 4) not held
    pad.buttons[4] = True
    pad.buttons[1] = True  # B: gripper (action 5) down, fast
    out = teleop(OBS, policy)
    np.testing.assert_allclose(out, [0.1, 0.05, 0.0, 0.0, 0.0, -0.5], atol=1e-6)
    pad.buttons[4] = False
    assert teleop(OBS, policy) is None
    assert len(pumps) == 3
    assert teleop.episode_stats()["intervention_steps"] == 1
    assert default_gamepad_axes(2) == [(0, 0, 1.0), (1, 1, -1.0)]


def test_gamepad_toggle_mode_and_mapping_checks() -> None:
    pad = FakePad()
    teleop = GamepadTeleop(2, joystick=pad, mode="toggle", takeover_button=7)
    policy = np.array([0.5, 0.5], np.float32)
    pad.buttons[7] = True
    assert teleop(OBS, policy) is not None
    assert teleop(OBS, policy) is not None  # still held: no second toggle
    pad.buttons[7] = False
    assert teleop(OBS, policy) is not None
    pad.buttons[7] = True
    assert teleop(OBS, policy) is None
    with pytest.raises(ValueError, match="axes"):
        GamepadTeleop(2, joystick=pad, axes=[(9, 0, 1.0)])
    with pytest.raises(ValueError, match="takeover_button"):
        GamepadTeleop(6, joystick=pad, takeover_button=0)  # bound to the gripper


def test_delta_command_starts_at_the_policy_action() -> None:
    command = DeltaCommand()
    assert command(False, np.ones(2), np.zeros(2)) is None
    np.testing.assert_allclose(command(True, np.array([0.1, 0.0]), np.array([0.5, 2.0])), [0.6, 1.0])
    np.testing.assert_allclose(command(True, np.array([0.1, 0.0]), np.zeros(2)), [0.7, 1.0])
    assert command(False, np.zeros(2), np.zeros(2)) is None
    np.testing.assert_allclose(command(True, np.zeros(2), np.zeros(2)), [0.0, 0.0])


def test_pygame_without_a_pad_says_so(monkeypatch) -> None:
    pytest.importorskip("pygame", reason="pygame not installed (pip install pygame)")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    import pygame

    pygame.joystick.init()
    if pygame.joystick.get_count() > 0:
        pytest.skip("a real gamepad is plugged in")
    with pytest.raises(RuntimeError, match="No gamepad 0"):
        GamepadTeleop(2)
