"""Keyboard and gamepad intervention sources: a person nudges the policy's action and takes over with a key.

Both implement :class:`~rslkit.realworld.interventions.InterventionSource`. When the person takes over (a toggle key, or
a deadman button held), the command starts at the policy's action of that step and then moves by the device's
per-step deltas (keys held, stick deflection), clipped to ``[-1, 1]``: the arm keeps going where the policy sent it
until the person steers it. Letting go (toggle again, release the deadman) hands control back.

Libraries, imported when a device is built (optional extra ``teleop``):

- keyboard: ``pynput`` (``pip install pynput``); it needs a display (X11) or, on a headless Linux robot, root and
  ``PYNPUT_BACKEND=uinput`` (reads ``/dev/input``).
- gamepad: ``pygame`` joysticks (``pip install pygame``); no window needed: without a display SDL's dummy video
  driver is used, and joystick events are read while the process has no focus.

Both take their device through the constructor (``listener=``, ``joystick=``) so the mapping is tested without
hardware. numpy only (no torch): it runs on the robot side.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from rslkit.realworld.interventions import InterventionCounter, as_action

if TYPE_CHECKING:
    from rslkit.envs.expert import Observation

TakeoverMode = Literal["toggle", "hold"]
"""``toggle``: a press takes over, the next hands back. ``hold``: intervening while held (a deadman button)."""


class DeltaCommand:
    """The intervention action of a device: starts at the policy's action on takeover, then integrates deltas."""

    def __init__(self) -> None:
        self.command: np.ndarray | None = None

    def __call__(self, active: bool, delta: np.ndarray, policy_action: np.ndarray) -> np.ndarray | None:
        """The new command (``active``), or None (not intervening; the next takeover starts afresh)."""
        if not active:
            self.command = None
            return None
        start = as_action(policy_action, policy_action) if self.command is None else self.command
        self.command = np.clip(start + delta.astype(np.float32), -1.0, 1.0)
        return self.command.copy()


class _Teleop(ABC):
    """A device a person steers with: takes over when :meth:`_taking_over`, then commands the policy's action plus
    the integrated :meth:`delta` (:class:`DeltaCommand`); interventions are counted per episode."""

    def __init__(self, num_actions: int, mode: TakeoverMode) -> None:
        if mode not in ("toggle", "hold"):
            raise ValueError(f"mode must be 'toggle' or 'hold', got {mode!r}.")
        self.num_actions, self.mode = num_actions, mode
        self.counter = InterventionCounter()
        self._command = DeltaCommand()
        self._toggled = False

    @abstractmethod
    def delta(self) -> np.ndarray:
        """``[A]``: the change per step the person commands now."""

    @abstractmethod
    def _taking_over(self) -> bool:
        """Whether the person intervenes at this step."""

    def reset(self) -> None:
        """New episode: a toggled takeover ends (a held key or deadman button keeps intervening)."""
        self._toggled = False
        self._command(False, np.zeros(self.num_actions, np.float32), np.zeros(self.num_actions, np.float32))
        self.counter.start_episode()

    def __call__(self, obs: Observation, policy_action: np.ndarray) -> np.ndarray | None:
        """The person's command while taken over, else None."""
        action = self._command(self._taking_over(), self.delta(), policy_action)
        self.counter.count(action is not None)
        return action

    def episode_stats(self) -> dict[str, float]:
        """See :meth:`InterventionCounter.episode_stats`."""
        return self.counter.episode_stats()


# ---------------------------------------------------------------------------------------------------- keyboard
DEFAULT_KEY_PAIRS = ("qa", "ws", "ed", "rf", "tg", "yh", "uj", "ik")
"""Per action dimension ``i``: the first key of pair ``i`` raises it, the second lowers it."""


def default_key_bindings(num_actions: int, speed: float) -> dict[str, tuple[int, float]]:
    """Key -> (action index, change per step): ``q``/``a`` move action 0 up/down, ``w``/``s`` action 1, ..."""
    if num_actions > len(DEFAULT_KEY_PAIRS):
        raise ValueError(f"Default keys cover {len(DEFAULT_KEY_PAIRS)} actions, not {num_actions}: pass bindings.")
    bindings = {}
    for i, pair in enumerate(DEFAULT_KEY_PAIRS[:num_actions]):
        bindings[pair[0]], bindings[pair[1]] = (i, speed), (i, -speed)
    return bindings


def key_name(key: Any) -> str:
    """A name for a pynput key: its character in lower case (``KeyCode``), the name of a special key (``Key.space``
    -> ``space``), or ``vk<code>`` for a key with neither."""
    char = getattr(key, "char", None)
    if char:
        return str(char).lower()
    name = getattr(key, "name", None)
    if name:
        return str(name)
    return f"vk{getattr(key, 'vk', None)}"


def _pynput_listener(**callbacks: Any) -> Any:
    try:
        from pynput import keyboard
    except ImportError as err:
        raise ImportError(
            f"KeyboardTeleop needs pynput ({err}): `pip install pynput`; it needs a display (X11), or on a headless "
            "Linux machine root and PYNPUT_BACKEND=uinput."
        ) from err
    return keyboard.Listener(**callbacks)


class KeyboardTeleop(_Teleop):
    """Take over with a key and steer the action with held keys (pynput).

    Args:
        num_actions: ``A``.
        bindings: key name (see :func:`key_name`) -> (action index, change per step while held); default
            :func:`default_key_bindings`.
        speed: change per step of the default bindings (action units; 0.05 crosses the range in 40 steps).
        toggle_key: the key that takes over (``space``).
        mode: ``toggle`` or ``hold`` (intervening while ``toggle_key`` is held).
        listener: ``listener(on_press=f, on_release=g)`` -> an object with ``start()`` and ``stop()`` that calls
            them with pynput key objects (default: ``pynput.keyboard.Listener``).
    """

    def __init__(
        self,
        num_actions: int,
        bindings: Mapping[str, tuple[int, float]] | None = None,
        speed: float = 0.05,
        toggle_key: str = "space",
        mode: TakeoverMode = "toggle",
        listener: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__(num_actions, mode)
        self.bindings = dict(bindings) if bindings is not None else default_key_bindings(num_actions, speed)
        bad = {k: v for k, v in self.bindings.items() if not 0 <= v[0] < num_actions}
        if bad:
            raise ValueError(f"Key bindings {bad} name action indices outside [0, {num_actions}).")
        self.toggle_key = toggle_key
        self._held: set[str] = set()
        self._lock = threading.Lock()
        make = listener or _pynput_listener
        self._listener = make(on_press=self.on_press, on_release=self.on_release)
        self._listener.start()

    def on_press(self, key: Any) -> None:
        """pynput callback (its listener thread). Auto-repeat presses of a held key are ignored."""
        name = key_name(key)
        with self._lock:
            if name == self.toggle_key and name not in self._held and self.mode == "toggle":
                self._toggled = not self._toggled
            self._held.add(name)

    def on_release(self, key: Any) -> None:
        """pynput callback (its listener thread)."""
        with self._lock:
            self._held.discard(key_name(key))

    @property
    def active(self) -> bool:
        """Whether the person has taken over."""
        with self._lock:
            return self._toggled if self.mode == "toggle" else self.toggle_key in self._held

    def _taking_over(self) -> bool:
        return self.active

    def delta(self) -> np.ndarray:
        """``[A]``: the change per step of the keys held now."""
        out = np.zeros(self.num_actions, np.float32)
        with self._lock:
            held = set(self._held)
        for name in held:
            if name in self.bindings:
                index, step = self.bindings[name]
                out[index] += step
        return out

    def reset(self) -> None:
        """New episode: the person starts not intervening (a toggled takeover ends)."""
        with self._lock:
            super().reset()

    def close(self) -> None:
        """Stop the key listener."""
        self._listener.stop()


# ---------------------------------------------------------------------------------------------------- gamepad
class Joystick(Protocol):
    """What :class:`GamepadTeleop` reads of a device (``pygame.joystick.Joystick`` has it)."""

    def get_numaxes(self) -> int: ...
    def get_axis(self, axis: int) -> float: ...
    def get_numbuttons(self) -> int: ...
    def get_button(self, button: int) -> bool | int: ...


STICK_AXES = (0, 1, 3, 4)
"""Left x, left y, right x, right y of an Xbox-layout pad under SDL2 (2 and 5 are the triggers, at -1 at rest)."""


def default_gamepad_axes(num_actions: int) -> list[tuple[int, int, float]]:
    """(axis, action index, scale): the sticks drive actions 0-3, y axes flipped so that up raises."""
    return [(axis, i, -1.0 if axis in (1, 4) else 1.0) for i, axis in enumerate(STICK_AXES[:num_actions])]


def default_gamepad_buttons(num_actions: int, speed: float) -> dict[int, tuple[int, float]]:
    """Button -> (action index, change per step): Y/X raise/lower action 4, A/B raise/lower action 5 (a gripper on
    the SO-101 tasks) five times faster, so that one short press opens or closes it."""
    buttons = {3: (4, speed), 2: (4, -speed), 0: (5, 5 * speed), 1: (5, -5 * speed)}
    return {b: v for b, v in buttons.items() if v[0] < num_actions}


def _pygame_joystick(index: int) -> tuple[Joystick, Callable[[], None]]:
    # Before SDL starts: no window is needed, and a gamepad must be read while another window has the focus.
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS", "1")
    try:
        import pygame
    except ImportError as err:
        raise ImportError(f"GamepadTeleop needs pygame ({err}): `pip install pygame`.") from err
    pygame.display.init()
    pygame.joystick.init()
    count = pygame.joystick.get_count()
    if index >= count:
        raise RuntimeError(f"No gamepad {index}: pygame sees {count} joystick(s). Plug one in (check `ls /dev/input`).")
    return pygame.joystick.Joystick(index), pygame.event.pump


class GamepadTeleop(_Teleop):
    """Take over with a deadman (or toggle) button and steer with the sticks and buttons (pygame).

    Per step, stick deflection ``x`` (after the ``deadzone``, rescaled to reach 1 at full deflection) changes its
    action by ``scale * speed * x``; a held button by its binding's change.

    Args:
        num_actions: ``A``.
        axes: (axis, action index, scale) triples; default :func:`default_gamepad_axes`.
        buttons: button -> (action index, change per step); default :func:`default_gamepad_buttons`.
        speed: change per step at full stick deflection.
        deadzone: stick values within it read 0.
        takeover_button: the deadman (``hold``) or toggle button; 4 = LB on an Xbox-layout pad.
        mode: ``hold`` (intervening while the button is held) or ``toggle``.
        joystick: a device with the :class:`Joystick` methods (default: pygame joystick ``index``).
        pump: called once per step before reading (default: ``pygame.event.pump`` with the pygame device).
    """

    def __init__(
        self,
        num_actions: int,
        axes: Sequence[tuple[int, int, float]] | None = None,
        buttons: Mapping[int, tuple[int, float]] | None = None,
        speed: float = 0.05,
        deadzone: float = 0.1,
        takeover_button: int = 4,
        mode: TakeoverMode = "hold",
        joystick: Joystick | None = None,
        pump: Callable[[], None] | None = None,
        index: int = 0,
    ) -> None:
        super().__init__(num_actions, mode)
        if not 0.0 <= deadzone < 1.0:
            raise ValueError(f"deadzone must be in [0, 1), got {deadzone}.")
        if joystick is None:
            joystick, default_pump = _pygame_joystick(index)
            pump = pump or default_pump
        self.joystick, self._pump = joystick, pump or (lambda: None)
        self.axes = list(axes) if axes is not None else default_gamepad_axes(num_actions)
        self.buttons = dict(buttons) if buttons is not None else default_gamepad_buttons(num_actions, speed)
        self.speed, self.deadzone = speed, deadzone
        self.takeover_button = takeover_button
        self._check_mapping()
        self._was_pressed = False

    def _check_mapping(self) -> None:
        n_axes, n_buttons = self.joystick.get_numaxes(), self.joystick.get_numbuttons()
        for axis, index, _ in self.axes:
            if not (0 <= axis < n_axes and 0 <= index < self.num_actions):
                raise ValueError(
                    f"Axis binding ({axis} -> action {index}): the pad has {n_axes} axes, the policy "
                    f"{self.num_actions} actions."
                )
        for button, (index, _) in self.buttons.items():
            if not (0 <= button < n_buttons and 0 <= index < self.num_actions):
                raise ValueError(
                    f"Button binding ({button} -> action {index}): the pad has {n_buttons} buttons, "
                    f"the policy {self.num_actions} actions."
                )
        if not 0 <= self.takeover_button < n_buttons or self.takeover_button in self.buttons:
            raise ValueError(
                f"takeover_button {self.takeover_button} must be one of the pad's {n_buttons} buttons "
                "and bound to nothing else."
            )

    def _stick(self, axis: int) -> float:
        x = float(self.joystick.get_axis(axis))
        if abs(x) <= self.deadzone:
            return 0.0
        return float(np.sign(x)) * min((abs(x) - self.deadzone) / (1.0 - self.deadzone), 1.0)

    def delta(self) -> np.ndarray:
        """``[A]``: the change per step of the sticks and buttons as they are now."""
        out = np.zeros(self.num_actions, np.float32)
        for axis, index, scale in self.axes:
            out[index] += scale * self.speed * self._stick(axis)
        for button, (index, step) in self.buttons.items():
            if self.joystick.get_button(button):
                out[index] += step
        return out

    def _taking_over(self) -> bool:
        self._pump()
        pressed = bool(self.joystick.get_button(self.takeover_button))
        if self.mode == "hold":
            return pressed
        if pressed and not self._was_pressed:
            self._toggled = not self._toggled
        self._was_pressed = pressed
        return self._toggled
