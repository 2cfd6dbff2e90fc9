"""The actor mode's weight loader: ONNX policies pushed by the learner, made ready off the control thread.

A thread polls the client's newest weights (a reference under a lock), builds the
:class:`~rslkit.deploy.onnx_policy.OnnxPolicy` they hold (an ONNX Runtime session: milliseconds) and checks it
against the running one; the control loop only takes the ready policy at an episode boundary.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

import numpy as np

from rslkit.deploy.metadata import PolicyMetadata
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.onnx_weights import onnx_policy_from_arrays
from rslkit.deploy.ros2.controller import policy_mismatch

log = logging.getLogger(__name__)
LatestWeights = Callable[[], "tuple[int, Mapping[str, np.ndarray]] | None"]


class WeightLoader:
    """Turns the newest weights ``latest()`` returns into a policy ready to swap in.

    Args:
        latest: ``ActorClient.latest_weights``.
        running: metadata of the policy the node runs (a new one must share its layout).
        task: the task every policy must come from (empty: not checked).
        intra_op_threads: ONNX Runtime threads of the new sessions.
        poll_s: how often ``latest`` is asked.
    """

    def __init__(
        self,
        latest: LatestWeights,
        running: PolicyMetadata,
        task: str = "",
        intra_op_threads: int = 1,
        poll_s: float = 0.05,
    ) -> None:
        self.latest, self.running, self.task = latest, running, task
        self.intra_op_threads, self.poll_s = intra_op_threads, poll_s
        self._lock = threading.Lock()
        self._ready: tuple[int, OnnxPolicy] | None = None
        self._seen: int | None = None  # the newest version looked at (loaded or refused)
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rslkit-actor-weights", daemon=True)
        self._thread.start()

    def take(self) -> tuple[int, OnnxPolicy] | None:
        """The newest ready ``(version, policy)`` not taken yet (None: nothing new); returns at once."""
        with self._lock:
            ready, self._ready = self._ready, None
        return ready

    def close(self) -> None:
        """Stop the thread."""
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            weights = self.latest()
            if weights is None or (self._seen is not None and weights[0] <= self._seen):
                continue
            version, arrays = weights
            self._seen = version
            try:
                policy = self.load(arrays)
            except ValueError as err:
                self.refused += 1
                log.error("actor: weights version %d refused, the node keeps its policy: %s", version, err)
                continue
            with self._lock:
                self._ready = (version, policy)
            log.info("actor: weights version %d ready; swapped in at the next episode boundary", version)

    def load(self, arrays: Mapping[str, np.ndarray]) -> OnnxPolicy:
        """The policy in ``arrays``, checked against the running one.

        Raises:
            ValueError: no ONNX policy, another task, or another layout.
        """
        policy = onnx_policy_from_arrays(arrays, self.intra_op_threads, check_outputs=False)
        if self.task and policy.meta.task != self.task:
            raise ValueError(f"it was exported from task {policy.meta.task!r}, not {self.task!r} (--actor.task)")
        mismatch = policy_mismatch(self.running, policy.meta)
        if mismatch:
            raise ValueError(mismatch)
        return policy
