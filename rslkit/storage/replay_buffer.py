"""Circular replay buffer for vectorized envs (tensordict-based), with n-step returns and demonstrations.

Layout: one ``[T, N]`` TensorDict (``T = capacity // num_envs`` time rows of ``N`` envs), so the steps of one env
are consecutive rows and n-step returns are assembled at sample time. Each row holds, per env::

    obs/<group> [D_g]  action [A]  reward []  next_obs/<group> [D_g]  terminated []  truncated []  next_valid []
    intervention []

``next_obs`` is the observation the env reached *before* an auto-reset (the final observation of an episode where
it ended). ``next_valid`` is False where the env ended an episode by truncation without reporting that final
observation (rslkit's torch tasks do not): such a transition cannot be bootstrapped and is given weight 0.
``intervention`` is True where a person drove the robot (HIL-SERL, Luo et al. 2024); False by default.

Demonstrations live in a second, separate ring (one ``[T_demo, 1]`` "env" of consecutive steps) and make up a fixed
fraction of every batch (RLPD-style symmetric sampling, Ball et al. 2023). HIL-SERL's human interventions go into
both rings: :meth:`ReplayBuffer.add` (or :meth:`~ReplayBuffer.add_sequence`) and
:meth:`~ReplayBuffer.add_to_demos`.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from tensordict import TensorDict

from rslkit.utils.validation import expect, finite

_GIB = 1024**3


@dataclass
class ReplayCfg:
    """Replay buffer settings. CLI: ``--agent.replay.<field>``."""

    capacity: int = 1_000_000
    """Transitions kept in total (over all envs); rounded down to a multiple of ``num_envs``."""
    storage: Literal["memory", "memmap"] = "memory"
    """``memory``: on the training device. ``memmap``: memory-mapped files on disk (larger than RAM, CPU only)."""
    memmap_dir: str = ""
    """Directory of the memory-mapped files (default: a new temporary directory)."""
    demo_fraction: float = 0.5
    """Share of every batch drawn from demonstrations, when there are any (RLPD uses 0.5)."""
    demo_capacity: int = 100_000
    """Transitions the demonstration ring holds (always in memory). Loaded demonstrations that are more are all
    kept (the ring grows to their number); transitions added later overwrite the oldest rows once it is full."""
    save_in_checkpoint: bool = False
    """Store the buffer contents in checkpoints so a resumed run is exactly the uninterrupted one (large files)."""
    max_memory_fraction: float = 0.8
    """Refuse a buffer that would take more than this share of the free memory (or disk, for memmap)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a buffer that cannot be built."""
        cap = self.capacity
        expect(isinstance(cap, int) and cap >= 2, "capacity", f"must be an integer >= 2 (steps x envs), got {cap}")
        expect(self.storage in ("memory", "memmap"), "storage", f"must be 'memory' or 'memmap', got {self.storage!r}")
        demo_cap = self.demo_capacity
        expect(isinstance(demo_cap, int) and demo_cap >= 1, "demo_capacity", f"must be an integer >= 1, got {demo_cap}")
        frac = self.demo_fraction
        expect(finite(frac) and 0 <= frac <= 1, "demo_fraction", f"must be in [0, 1], got {frac}")
        mem = self.max_memory_fraction
        expect(finite(mem) and mem > 0, "max_memory_fraction", f"must be a finite number > 0, got {mem}")


def available_memory_bytes(device: torch.device) -> int:
    """Free memory on ``device``: CUDA free memory, or the host's available RAM (psutil, else /proc/meminfo)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 2**62  # unknown: do not block


def transition_template(example_obs: TensorDict, num_actions: int) -> TensorDict:
    """One empty transition (batch ``[]``) with the fields and dtypes the buffer stores.

    Args:
        example_obs: observations of the groups to store, batch ``[N]`` (values are not used).
        num_actions: action dimension ``A``.
    """
    obs = TensorDict({k: torch.zeros(v.shape[1:], dtype=v.dtype) for k, v in example_obs.items()}, batch_size=[])
    return TensorDict(
        {
            "obs": obs,
            "action": torch.zeros(num_actions),
            "reward": torch.zeros(()),
            "next_obs": obs.clone(),
            "terminated": torch.zeros((), dtype=torch.bool),
            "truncated": torch.zeros((), dtype=torch.bool),
            "next_valid": torch.ones((), dtype=torch.bool),
            "intervention": torch.zeros((), dtype=torch.bool),
        },
        batch_size=[],
    )


def field_names(td: TensorDict) -> list[str]:
    """Sorted leaf names of ``td`` written as paths (``obs/policy``)."""
    return sorted("/".join(k) if isinstance(k, tuple) else k for k in td.keys(True, True))


def transition_bytes(template: TensorDict) -> int:
    """Bytes one transition takes in storage."""
    leaves: list[torch.Tensor] = list(template.values(include_nested=True, leaves_only=True))  # type: ignore[arg-type]
    return sum(int(v.numel() * v.element_size()) for v in leaves)


def _cpu_copy(t: torch.Tensor) -> torch.Tensor:
    """A plain CPU tensor with its own storage holding just ``t`` (not a view, not memory-mapped)."""
    return torch.empty(t.shape, dtype=t.dtype).copy_(t)


class RingStorage:
    """``[T, N]`` circular storage of transitions with n-step sampling (one for online data, one for demos)."""

    def __init__(self, template: TensorDict, horizon: int, num_envs: int, device: torch.device, memmap_dir: str = ""):
        self.horizon, self.num_envs, self.device = horizon, num_envs, device
        expanded = template.expand(horizon, num_envs)
        if memmap_dir:
            self.data = expanded.memmap_like(prefix=memmap_dir, existsok=True)
        else:
            self.data = expanded.clone().to(device)
        self.ptr = 0
        """Next time row to write."""
        self.size = 0
        """Filled time rows (``<= horizon``)."""

    def add(self, step: TensorDict) -> None:
        """Write one vectorized step, batch ``[N]``, at the write row (overwriting the oldest when full)."""
        self.data[self.ptr] = step.to(self.data.device)
        self.ptr = (self.ptr + 1) % self.horizon
        self.size = min(self.size + 1, self.horizon)

    def extend(self, steps: TensorDict) -> None:
        """Write ``M`` consecutive steps, batch ``[M, N]``, as ``M`` calls of :meth:`add` would, in at most two slice
        writes (the second where the ring wraps around); of more than ``horizon`` steps only the newest stay."""
        m, h = steps.batch_size[0], self.horizon
        if m == 0:
            return
        drop = max(0, m - h)  # rows an earlier write of this call would overwrite anyway
        start, rows = (self.ptr + drop) % h, steps[drop:].to(self.data.device)
        first = min(rows.batch_size[0], h - start)
        self.data[start : start + first] = rows[:first]
        if first < rows.batch_size[0]:
            self.data[: rows.batch_size[0] - first] = rows[first:]
        self.ptr = (self.ptr + m) % h
        self.size = min(self.size + m, h)

    @property
    def newest(self) -> int:
        """Time row written last (meaningful when ``size > 0``)."""
        return (self.ptr - 1) % self.horizon

    def count(self, key: str) -> int:
        """Stored rows where the bool field ``key`` is True."""
        return int(self.data.get(key)[: self.size].sum())

    def sample(self, batch_size: int, n_step: int, gamma: float) -> TensorDict:
        """Uniform transitions with n-step returns.

        For a sampled start ``t`` the return sums ``gamma^k r_{t+k}`` over the steps ``k < n_step`` that are stored
        and lie in the same episode; the bootstrap coefficient is ``gamma^K (1 - terminated_{t+K-1})`` for the ``K``
        steps summed, so a time-out bootstraps from its final observation and a termination does not.

        Returns:
            Batch ``[B]`` with ``obs``, ``action [B, A]``, ``reward [B]`` (n-step return), ``next_obs`` (the obs
            ``K`` steps later), ``discount [B]``, ``weight [B]`` (0 where no valid next observation exists) and
            ``intervention [B]`` (of the first step).
        """
        if self.size == 0:
            raise RuntimeError("Cannot sample from an empty replay storage.")
        dev = self.data.device
        offset = torch.randint(0, self.size, (batch_size,), device=dev)
        env = torch.randint(0, self.num_envs, (batch_size,), device=dev)
        oldest = (self.ptr - self.size) % self.horizon
        k = torch.arange(n_step, device=dev)
        rows = (oldest + offset[:, None] + k) % self.horizon  # [B, n] time rows of the chain
        flat = rows * self.num_envs + env[:, None]  # [B, n] indices into the flattened [T * N] storage
        reward = self._scalar("reward", flat).float()
        terminated = self._scalar("terminated", flat)
        valid = self._scalar("next_valid", flat)
        done = terminated | self._scalar("truncated", flat)
        stored = k[None] < (self.size - offset)[:, None]  # do not read past the newest row
        ended_before = (done.long().cumsum(1) - done.long()) > 0  # an earlier step of the chain ended the episode
        include = stored & ~ended_before & (valid | (k[None] == 0))  # a prefix of the n steps, never empty
        steps = include.sum(1)  # K in [1, n]
        last = (steps - 1)[:, None]
        powers = gamma ** torch.arange(n_step + 1, device=dev, dtype=reward.dtype)  # gamma^0 .. gamma^n
        out = self._rows(("obs", "action"), flat[:, 0])
        out["next_obs"] = self._rows(("next_obs",), flat.gather(1, last).squeeze(1))["next_obs"]
        out["reward"] = (include * powers[:n_step] * reward).sum(1)
        out["discount"] = powers[steps] * (~terminated.gather(1, last).squeeze(1)).float()
        out["weight"] = valid.gather(1, last).squeeze(1).float()
        out["intervention"] = self._scalar("intervention", flat[:, 0])
        return out

    def _scalar(self, key: str, flat: torch.Tensor) -> torch.Tensor:
        """Per-step scalar field at flat ``[T * N]`` indices (any shape)."""
        return self.data.get(key).reshape(-1).take(flat)

    def _rows(self, keys: tuple[str, ...], flat: torch.Tensor) -> TensorDict:
        """Fields ``keys`` at flat ``[T * N]`` indices ``[B]``, as a batch ``[B]``."""
        rows = self.data.select(*keys).apply(
            lambda t: t.reshape(-1, *t.shape[2:]).index_select(0, flat), batch_size=[flat.numel()]
        )
        assert rows is not None  # apply() returns None only when called in place
        return rows

    def state_dict(self) -> dict:
        """The filled rows ``[size, N]`` (a plain dict of CPU tensors), the write position and the fill.

        The rows are copied out: a view of the first rows would make ``torch.save`` write the whole preallocated
        storage. A wrapped buffer (``size == horizon``) is saved in storage order, so ``ptr`` restores as is.
        """
        rows = self.data[: self.size].apply(_cpu_copy)
        assert rows is not None  # apply() returns None only when called in place
        return {"data": rows.to_dict(), "ptr": self.ptr, "size": self.size, "horizon": self.horizon}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output (same layout); rows saved before ``intervention`` existed get False."""
        size = state["size"]
        data = TensorDict(state["data"], batch_size=[size, self.num_envs])
        if "intervention" not in data.keys():
            data["intervention"] = torch.zeros(size, self.num_envs, dtype=torch.bool)
        expected = self.data[:size]
        if data.shape != expected.shape or field_names(data) != field_names(expected):
            raise ValueError(
                f"Saved replay buffer has layout {list(data.shape)} with fields {field_names(data)}; "
                f"this buffer is {list(self.data.shape)}. Resume with the same num_envs and replay capacity."
            )
        self.data[:size] = data.to(self.data.device)
        self.ptr, self.size = state["ptr"] % self.horizon, size


class ReplayBuffer:
    """Online transitions of ``num_envs`` envs plus optional demonstrations, sampled with n-step returns.

    Args:
        example_obs: current observations of the groups to store, batch ``[N]``.
        num_actions: action dimension ``A`` (actions are stored in the policy's ``[-1, 1]`` range).
        cfg: capacity, storage kind, demo fraction.
        device: where the in-memory storage lives and where sampled batches are returned.

    Raises:
        ValueError: when the capacity holds less than two steps per env, or does not fit in free memory/disk.
    """

    def __init__(self, example_obs: TensorDict, num_actions: int, cfg: ReplayCfg, device: str | torch.device):
        self.cfg = cfg
        self.device = torch.device(device)
        self.num_envs = int(example_obs.batch_size[0])
        self.num_actions = num_actions
        self.template = transition_template(example_obs, num_actions)
        horizon = cfg.capacity // self.num_envs
        if horizon < 2:
            raise ValueError(
                f"Replay capacity {cfg.capacity} holds fewer than 2 steps of {self.num_envs} envs; set "
                f"agent.replay.capacity to at least {2 * self.num_envs} (typically 1000+ steps per env)."
            )
        if not 0.0 <= cfg.demo_fraction <= 1.0:
            raise ValueError(f"agent.replay.demo_fraction must be in [0, 1], got {cfg.demo_fraction}.")
        memmap_dir = ""
        if cfg.storage == "memmap":
            memmap_dir = cfg.memmap_dir or tempfile.mkdtemp(prefix="rslkit_replay_")
            Path(memmap_dir).mkdir(parents=True, exist_ok=True)
        elif cfg.storage != "memory":
            raise ValueError(f"agent.replay.storage must be 'memory' or 'memmap', got '{cfg.storage}'.")
        self._check_fits(horizon * self.num_envs, memmap_dir)
        self.memmap_dir = memmap_dir
        self.online = RingStorage(self.template, horizon, self.num_envs, self.device, memmap_dir)
        self.demos: RingStorage | None = None

    # ------------------------------------------------------------------ sizing
    def _check_fits(self, transitions: int, memmap_dir: str) -> None:
        need = transitions * transition_bytes(self.template)
        if memmap_dir:
            free, where = shutil.disk_usage(memmap_dir).free, f"disk at '{memmap_dir}'"
            hint = "lower agent.replay.capacity or point agent.replay.memmap_dir to a larger disk."
        else:
            free, where = available_memory_bytes(self.device), f"{self.device} memory"
            hint = (
                "lower agent.replay.capacity, or set agent.replay.storage memmap (and agent.replay.memmap_dir) to keep "
                "the buffer in memory-mapped files on disk."
            )
        if need > self.cfg.max_memory_fraction * free:
            raise ValueError(
                f"A replay buffer of {transitions:,} transitions ({transition_bytes(self.template)} bytes each) needs "
                f"{need / _GIB:.2f} GiB, but only {free / _GIB:.2f} GiB of {where} is free "
                f"(limit {self.cfg.max_memory_fraction:.0%}); {hint}"
            )

    @property
    def capacity(self) -> int:
        """Online transitions the buffer holds when full."""
        return self.online.horizon * self.num_envs

    def __len__(self) -> int:
        """Online transitions stored."""
        return self.online.size * self.num_envs

    @property
    def num_demos(self) -> int:
        """Demonstration transitions stored."""
        return 0 if self.demos is None else self.demos.size

    def nbytes(self) -> int:
        """Bytes of the online storage (allocated in full up front)."""
        return self.capacity * transition_bytes(self.template)

    # ------------------------------------------------------------------ writing
    def _steps(
        self,
        obs: TensorDict,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: TensorDict,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        next_valid: torch.Tensor | None,
        intervention: torch.Tensor | None,
        device: torch.device | None,
    ) -> TensorDict:
        """The stored fields of ``n = len(action)`` transitions, batch ``[n]``, with the optional flags filled in."""
        keys = list(self.template["obs"].keys())
        n = action.shape[0]
        return TensorDict(
            {
                "obs": obs.select(*keys),
                "action": action,
                "reward": reward,
                "next_obs": next_obs.select(*keys),
                "terminated": terminated.bool(),
                "truncated": truncated.bool(),
                "next_valid": torch.ones(n, dtype=torch.bool) if next_valid is None else next_valid.bool(),
                "intervention": torch.zeros(n, dtype=torch.bool) if intervention is None else intervention.bool(),
            },
            batch_size=[n],
            device=device,
        )

    def add(
        self,
        obs: TensorDict,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: TensorDict,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        next_valid: torch.Tensor | None = None,
        intervention: torch.Tensor | None = None,
    ) -> None:
        """Store one vectorized step.

        Args:
            obs: observations the actions were taken in, batch ``[N]`` (extra groups are ignored).
            action: ``[N, A]`` in ``[-1, 1]``.
            reward: ``[N]``.
            next_obs: observations reached before any auto-reset, batch ``[N]``.
            terminated: ``[N]`` bool, episode ended in a terminal state (no bootstrap).
            truncated: ``[N]`` bool, episode cut by a time limit (bootstrap from ``next_obs``).
            next_valid: ``[N]`` bool, False where ``next_obs`` is not the true next observation (default all True).
            intervention: ``[N]`` bool, True where a person chose the action (default all False).
        """
        args = (obs, action, reward, next_obs, terminated, truncated, next_valid, intervention)
        self.online.add(self._steps(*args, device=self.online.data.device))

    def add_sequence(
        self,
        obs: TensorDict,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: TensorDict,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        next_valid: torch.Tensor | None = None,
        intervention: torch.Tensor | None = None,
    ) -> None:
        """Store ``M`` consecutive steps of a single env (a buffer with ``num_envs == 1``, e.g. a robot's learner):
        the same as ``M`` calls of :meth:`add`, written in one slice (two where the ring wraps around).

        Args:
            obs, action, ...: as for :meth:`add`, with batch ``[M]`` (time) instead of ``[N]`` (envs).

        Raises:
            ValueError: for a buffer of more than one env.
        """
        if self.num_envs != 1:
            raise ValueError(
                f"add_sequence stores the steps of one env, but this buffer has {self.num_envs}; use add() for "
                "vectorized steps."
            )
        args = (obs, action, reward, next_obs, terminated, truncated, next_valid, intervention)
        self.online.extend(self._steps(*args, device=self.online.data.device).unsqueeze(1))

    def add_to_demos(
        self,
        obs: TensorDict,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: TensorDict,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        next_valid: torch.Tensor | None = None,
        intervention: torch.Tensor | None = None,
    ) -> None:
        """Append ``M`` steps of one env, batch ``[M]``, to the demonstration ring, creating it with ``demo_capacity``
        rows if there is none; once it is full they overwrite its oldest rows.

        HIL-SERL stores every intervention step both here and online (pass ``intervention``). The steps of one
        intervention are consecutive (``next_obs`` of a step is ``obs`` of the next), but the next intervention
        starts later in the episode, and n-step returns must not run from one into the other: a row (stored or new)
        that did not end its episode and is not followed by the step it led to is marked truncated, so its chain
        ends there and bootstraps from its own (valid) ``next_obs``.

        Args:
            obs, action, ...: as for :meth:`add`, with batch ``[M]`` of steps in time order.

        Raises:
            ValueError: for per-step shapes unlike the env's, non-finite values or actions outside ``[-1, 1]``.
        """
        if action.shape[0] == 0:
            return
        steps = self._steps(obs, action, reward, next_obs, terminated, truncated, next_valid, intervention, self.device)
        self._check_demos(steps)
        if self.demos is None:
            self.demos = RingStorage(self.template, self.cfg.demo_capacity, 1, self.device)
        steps = self._as_template(steps)
        self._cut_chains_between_segments(self.demos, steps)
        self.demos.extend(steps.unsqueeze(1))

    @staticmethod
    def _cut_chains_between_segments(storage: RingStorage, steps: TensorDict) -> None:
        """Set ``truncated`` on the rows of ``steps [M]`` (and on the newest row of ``storage``) that neither ended
        their episode nor are followed by the step they led to."""
        groups = list(steps["obs"].keys())

        def follows(before: TensorDict, after: TensorDict) -> torch.Tensor:  # [K] bool: after[k] is before[k]'s step
            same = [(before["next_obs", g] == after["obs", g]).reshape(before.batch_size[0], -1).all(1) for g in groups]
            return torch.stack(same).all(0)

        if steps.batch_size[0] > 1:
            cut = torch.zeros_like(steps["truncated"])
            cut[:-1] = ~follows(steps[:-1], steps[1:]) & ~steps["terminated"][:-1]
            steps.set("truncated", steps["truncated"] | cut)
        if storage.size > 0:
            newest = storage.data[storage.newest]  # [1]
            ended = newest["terminated"] | newest["truncated"]
            if not bool(ended | follows(newest, steps[:1])):
                storage.data.get("truncated")[storage.newest] = True

    def _check_demos(self, demos: TensorDict) -> None:
        """Raise ValueError for a missing or misshaped field, non-finite values or actions outside ``[-1, 1]``."""
        for key, want in self.template.items(include_nested=True, leaves_only=True):
            name = "/".join(key) if isinstance(key, tuple) else key
            if key not in demos.keys(include_nested=True, leaves_only=True):
                raise ValueError(f"Demonstrations lack field '{name}'; they need {field_names(self.template)}.")
            got = demos.get(key)
            if tuple(got.shape[1:]) != tuple(want.shape):
                raise ValueError(
                    f"Demonstration field '{name}' has per-step shape {list(got.shape[1:])} but the env gives "
                    f"{list(want.shape)}; record demonstrations with the same task and observation groups."
                )
            if got.is_floating_point() and not bool(torch.isfinite(got).all()):
                raise ValueError(f"Demonstration field '{name}' holds NaN or inf values.")
        if bool((demos["action"].float().abs() > 1.0 + 1e-6).any()):
            raise ValueError(
                "Demonstration actions must lie in [-1, 1] (the policy's normalized range); rescale them from the "
                "env's action bounds: a = 2 (u - low) / (high - low) - 1."
            )

    def _as_template(self, demos: TensorDict) -> TensorDict:
        """The template's fields of checked transitions ``[M]``, in its dtypes, on the training device."""
        m = demos.batch_size[0]
        rows = TensorDict({}, batch_size=[m], device=self.device)
        for key, want in self.template.items(include_nested=True, leaves_only=True):
            rows.set(key, demos.get(key).to(self.device, want.dtype).reshape(m, *want.shape))
        return rows

    def add_demonstrations(self, demos: TensorDict) -> None:
        """Keep demonstration transitions in their own ring, replacing earlier ones.

        The ring holds ``max(demo_capacity, M)`` rows: all of ``demos``, and room for :meth:`add_to_demos`.

        Args:
            demos: batch ``[M]`` of consecutive steps (episodes one after another) with ``obs``/``next_obs`` groups as
                stored online, ``action [M, A]`` in ``[-1, 1]``, ``reward [M]``, ``terminated [M]``, ``truncated [M]``
                (the last step of each episode must be terminated or truncated). ``next_valid`` (default True) and
                ``intervention`` (default False) are optional.

        Raises:
            ValueError: naming the field whose shape does not match the env, or out-of-range / non-finite values.
        """
        if demos.batch_dims != 1 or demos.batch_size[0] < 1:
            raise ValueError(f"Demonstrations need batch size [M] with M >= 1, got {list(demos.batch_size)}.")
        m = demos.batch_size[0]
        demos = demos.clone(False)
        for key, default in (("next_valid", True), ("intervention", False)):
            if key not in demos.keys():
                demos[key] = torch.full((m,), default, dtype=torch.bool, device=demos.device)
        self._check_demos(demos)
        storage = RingStorage(self.template, max(self.cfg.demo_capacity, m), 1, self.device)
        storage.extend(self._as_template(demos).unsqueeze(1))
        self.demos = storage

    def num_interventions(self) -> tuple[int, int]:
        """Intervention transitions stored ``(online, in demonstrations)``, counted from the stored flags."""
        return self.online.count("intervention"), 0 if self.demos is None else self.demos.count("intervention")

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int, n_step: int = 1, gamma: float = 0.99) -> TensorDict:
        """A batch of ``batch_size`` transitions with n-step returns (see :meth:`RingStorage.sample`).

        ``round(demo_fraction * batch_size)`` of them come from demonstrations when there are any.

        Returns:
            Batch ``[B]`` on the training device: ``obs``, ``action``, ``reward``, ``next_obs``, ``discount``,
            ``weight``, ``intervention`` and ``is_demo`` (bool).
        """
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}.")
        has_demos = self.demos is not None and self.demos.size > 0
        n_demo = round(self.cfg.demo_fraction * batch_size) if has_demos else 0
        if self.online.size == 0:
            n_demo = batch_size if has_demos else 0
        parts = []
        if batch_size - n_demo > 0:
            online = self.online.sample(batch_size - n_demo, n_step, gamma).to(self.device)
            online["is_demo"] = torch.zeros(online.batch_size[0], dtype=torch.bool, device=self.device)
            parts.append(online)
        if n_demo > 0:
            assert self.demos is not None
            demo = self.demos.sample(n_demo, n_step, gamma)
            demo["is_demo"] = torch.ones(n_demo, dtype=torch.bool, device=self.device)
            parts.append(demo)
        return parts[0] if len(parts) == 1 else TensorDict.cat(parts)  # type: ignore[return-value]

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Online and demonstration contents with write positions (and the demonstration ring's size; CPU tensors)."""
        return {"online": self.online.state_dict(), "demos": None if self.demos is None else self.demos.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output.

        Raises:
            ValueError: when the saved layout (num_envs, capacity, fields) differs from this buffer.
        """
        self.online.load_state_dict(state["online"])
        demos = state.get("demos")
        if demos is not None:  # saved before the ring had room to grow: exactly its rows
            self.demos = RingStorage(self.template, demos.get("horizon", demos["size"]), 1, self.device)
            self.demos.load_state_dict(demos)
