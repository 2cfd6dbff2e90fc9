"""The learner's transport sink: arriving transitions into the journal and the replay buffer, once each.

The server calls the sink from one thread at a time; the learner's training thread samples the same buffer, so
both hold :attr:`ReplaySink.lock`. For every message the sink drops rows it stored before (by seq and by (actor,
episode, step) key, with :class:`~rslkit.link.sink.Watermarks`), appends the new rows to the journal (fsynced),
writes them into the online buffer and, where a human intervened, into the demonstration buffer too (HIL-SERL),
and returns the actor's watermark, which the server sends back as the acknowledgement.

Next to the buffer's rows the sink keeps their keys (actor, seq, policy version), so a checkpoint says exactly which
transitions it holds (the tests count them) and the staleness of every row is known.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.link import wire
from rslkit.link.journal import Journal
from rslkit.link.sink import Watermarks
from rslkit.link.transitions import TransitionBatch, Transitions, TransitionSchema, select
from rslkit.storage.replay_buffer import ReplayBuffer


@dataclass
class ArrivalStats:
    """What arrived since the learner last asked (one log line's worth)."""

    transitions: int = 0
    interventions: int = 0
    duplicates: int = 0
    staleness_sum: int = 0
    staleness_max: int = 0
    episodes: list[tuple[str, float, int, int]] = field(default_factory=list)
    """``(actor_id, return, length, interventions)`` of each episode that ended."""


class RowKeys:
    """``(actor index, seq, policy version)`` of every online row, in the buffer's ring order."""

    def __init__(self, capacity: int) -> None:
        self.keys = np.full((capacity, 3), -1, np.int64)
        self.actor_ids: list[str] = []

    def index_of(self, actor_id: str) -> int:
        """The actor's index (a new one for an actor never seen)."""
        if actor_id not in self.actor_ids:
            self.actor_ids.append(actor_id)
        return self.actor_ids.index(actor_id)

    def write(self, start: int, actor: int, seq: np.ndarray, version: np.ndarray) -> None:
        """Keys of rows ``start, start + 1, ...`` (modulo the capacity)."""
        rows = (start + np.arange(len(seq))) % len(self.keys)
        self.keys[rows, 0], self.keys[rows, 1], self.keys[rows, 2] = actor, seq, version

    def state_dict(self, size: int) -> dict[str, Any]:
        """The keys of the first ``size`` rows (the filled part of the buffer), for checkpoints."""
        return {"keys": torch.from_numpy(self.keys[:size].copy()), "actor_ids": list(self.actor_ids)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (a buffer of at least as many rows)."""
        keys = state["keys"].numpy()
        if keys.ndim != 2 or keys.shape[1] != 3 or len(keys) > len(self.keys):
            raise ValueError(f"Saved row keys of shape {keys.shape} do not fit a buffer of {len(self.keys)} rows.")
        self.keys[: len(keys)] = keys
        self.actor_ids = list(state["actor_ids"])


class ReplaySink:
    """Stores validated transitions messages (see module doc); the server's ``sink``.

    Args:
        buffer: the learner's replay buffer (one env: rows are consecutive transitions).
        schema: the transitions' schema (for the journal).
        journal: where stored messages go before they are acknowledged; None: acks mean "in memory".
        watermarks: restored from the checkpoint the buffer came from.
        keys: the keys of the buffer's rows (restored likewise).
        max_message_bytes: limit of one journal message.
    """

    def __init__(
        self,
        buffer: ReplayBuffer,
        schema: TransitionSchema,
        journal: Journal | None,
        watermarks: Watermarks,
        keys: RowKeys,
        max_message_bytes: int = wire.DEFAULT_MAX_BYTES,
    ) -> None:
        if buffer.num_envs != 1:
            raise ValueError(f"The real-world learner's buffer must hold one env's rows, not {buffer.num_envs}.")
        self.buffer, self.schema, self.journal = buffer, schema, journal
        self.watermarks, self.keys, self.max_message_bytes = watermarks, keys, max_message_bytes
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        """Notified whenever transitions were stored."""
        self.version = 0
        """The learner's current weights version (for the staleness of arriving rows)."""
        self.received = 0
        """Online transitions stored over the run (restored from checkpoints)."""
        self._stats = ArrivalStats()
        self._episodes: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0, 0])
        self._new_obs: list[TensorDict] = []

    def __call__(self, actor_id: str, message: Transitions) -> int:
        """Store the rows of ``message`` not stored yet; returns the actor's watermark."""
        with self.lock:
            b = message.batch
            rows = self.watermarks.new_rows(actor_id, message.seq, b.episode, b.step)
            self._stats.duplicates += int((~rows).sum())
            if rows.any():
                batch, seq = select(b, rows), message.seq[rows]
                if self.journal is not None:
                    fresh = Transitions(actor_id, seq, batch, self.schema)
                    self.journal.append(wire.encode(fresh, self.max_message_bytes))
                self._store(actor_id, seq, batch)
            watermark = self.watermarks.advance(actor_id, int(message.seq[-1]), b.episode[rows], b.step[rows])
            self.arrived.notify_all()
            return watermark

    def replay(self, messages: Any) -> int:
        """Store journal messages (:class:`~rslkit.link.transitions.Transitions`, their sender the actor) a resumed
        learner lacks; returns the transitions stored (the rest were in the checkpoint already)."""
        before = self.received
        with self.lock:
            for message in messages:
                b = message.batch
                rows = self.watermarks.new_rows(message.sender, message.seq, b.episode, b.step)
                if rows.any():
                    self._store(message.sender, message.seq[rows], select(b, rows))
                self.watermarks.advance(message.sender, int(message.seq[-1]), b.episode[rows], b.step[rows])
        return self.received - before

    def _store(self, actor_id: str, seq: np.ndarray, batch: TransitionBatch) -> None:
        obs = TensorDict({g: torch.from_numpy(a) for g, a in batch.obs.items()}, batch_size=[len(seq)])
        next_obs = TensorDict({g: torch.from_numpy(a) for g, a in batch.next_obs.items()}, batch_size=[len(seq)])
        done, truncated = torch.from_numpy(batch.done), torch.from_numpy(batch.truncated)
        fields: dict[str, Any] = {
            "obs": obs,
            "action": torch.from_numpy(batch.action).float(),
            "reward": torch.from_numpy(batch.reward),
            "next_obs": next_obs,
            "terminated": done & ~truncated,
            "truncated": truncated,
            "intervention": torch.from_numpy(batch.intervention),
        }
        start = self.buffer.online.ptr
        self.buffer.add_sequence(**fields)
        self.keys.write(start, self.keys.index_of(actor_id), seq, batch.policy_version)
        human = batch.intervention
        if human.any():
            self.buffer.add_to_demos(**{k: v[torch.from_numpy(human)] for k, v in fields.items()})
        self._new_obs.append(obs)
        self.received += len(seq)
        self._account(actor_id, batch)

    def _account(self, actor_id: str, batch: TransitionBatch) -> None:
        s = self._stats
        s.transitions += len(batch)
        s.interventions += int(batch.intervention.sum())
        staleness = np.maximum(self.version - batch.policy_version, 0)
        s.staleness_sum += int(staleness.sum())
        s.staleness_max = max(s.staleness_max, int(staleness.max()))
        episode = self._episodes[actor_id]
        for reward, done, human in zip(batch.reward, batch.done, batch.intervention):
            episode[0] += float(reward)
            episode[1] += 1
            episode[2] += int(human)
            if done:
                s.episodes.append((actor_id, episode[0], int(episode[1]), int(episode[2])))
                episode[:] = [0.0, 0, 0]

    def take_stats(self) -> ArrivalStats:
        """What arrived since the last call (then reset)."""
        with self.lock:
            stats, self._stats = self._stats, ArrivalStats()
            return stats

    def take_new_obs(self) -> TensorDict | None:
        """Observations stored since the last call, batch ``[M]`` (to fold into the normalizers), or None."""
        with self.lock:
            obs, self._new_obs = self._new_obs, []
        return TensorDict.cat(obs) if obs else None  # type: ignore[return-value]
