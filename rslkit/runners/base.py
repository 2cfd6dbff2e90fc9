"""What every runner shares: its set-up, the iterate/log/save loop and the checkpoint envelope."""

from __future__ import annotations

import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import torch
from tensordict import TensorDict

from rslkit.envs.vec_env import VecEnv
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.run_config import RunCfg
from rslkit.runners.run_summary import RunSummary
from rslkit.utils.allocator import share_one_malloc_arena, tune_cpu_allocator
from rslkit.utils.checkpoint import checkpoint_must_fit, load_runner_checkpoint, save_checkpoint
from rslkit.utils.config import to_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.logger import RunLogger, format_summary
from rslkit.utils.validation import validate


class Algorithm(Protocol):
    """What the shared checkpoint code needs of an algorithm."""

    def state_dict(self) -> dict:
        """Everything to checkpoint (networks, optimizers, normalizers)."""

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""


CfgT = TypeVar("CfgT", bound=RunCfg)
AlgT = TypeVar("AlgT", bound=Algorithm)


class BaseRunner(ABC, Generic[CfgT, AlgT]):
    """Set-up, training loop and checkpoint envelope of a runner; subclasses build :attr:`alg` and :attr:`stats`.

    :meth:`learn` calls :meth:`_start_learning`, then per iteration :meth:`_iteration` and :meth:`_after_iteration`,
    logs the metrics and saves ``model_<iteration>.pt`` every ``cfg.save_interval`` iterations and after the last.
    Checkpoints hold ``algorithm``, ``iteration``, :meth:`_checkpoint_state` and ``run_info``.

    Args:
        env: the environment (rslkit task or any rsl_rl-style env).
        cfg: agent config.
        log_dir: run directory for checkpoints and logs; None for no files.
        device: training device (the env may live elsewhere; data is moved).
        dist_info: rank layout under torchrun; only rank 0 logs.
        run_info: extra entries for the checkpoint (task name, env config) so ``play.py`` can rebuild the env.
    """

    algorithm_name: str
    """Written to checkpoints; :meth:`load` takes only checkpoints of this algorithm."""
    distributed: bool = False
    """Whether the runner trains under torchrun (several ranks); the others refuse ``world_size > 1``."""
    alg: AlgT
    stats: EpisodeStats

    def __init__(
        self,
        env: VecEnv,
        cfg: CfgT,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        validate(cfg, "agent")
        self.env = env
        self.cfg = cfg
        self.device = torch.device(device)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.dist = dist_info or DistInfo()
        if self.dist.world_size > 1 and not self.distributed:
            raise ValueError(
                f"{self.algorithm_name} trains in one process; start train.py without torchrun (raise --num_envs "
                "to use more of the machine)."
            )
        self.run_info = run_info or {}
        self.iteration = 0
        """The next iteration to run (also what checkpoints store)."""
        self.interrupted = False
        """Whether the last :meth:`learn` stopped early on Ctrl-C or SIGTERM (after saving a checkpoint)."""
        self._stop_requested = False

    # ------------------------------------------------------------------ the trained policy
    @property
    @abstractmethod
    def policy(self) -> torch.nn.Module:
        """The deployable network (what export traces)."""

    @abstractmethod
    def inference_policy(self) -> Callable[[TensorDict], torch.Tensor]:
        """Deterministic step policy ``obs [N] -> actions [N, A]`` for evaluation, recording and play."""

    @abstractmethod
    def reset_inference(self, dones: torch.Tensor) -> None:
        """Reset the inference state (recurrent memory, open action chunks) of envs whose episode ended."""

    # ------------------------------------------------------------------ training loop
    def learn(self, num_iterations: int | None = None) -> dict[str, float]:
        """Run ``num_iterations`` iterations (default: up to ``cfg.max_iterations`` in total).

        Ctrl-C or SIGTERM (in the main thread) stops after the running iteration, saves a checkpoint and returns
        with :attr:`interrupted` set; a second Ctrl-C aborts at once.

        Returns:
            The metrics of the last iteration.

        Raises:
            ValueError: when there is nothing to run (``max_iterations`` already reached).
        """
        end = self.iteration + num_iterations if num_iterations is not None else self.cfg.max_iterations
        if end <= self.iteration:
            raise ValueError(
                f"Nothing to train: the run is at iteration {self.iteration} and max_iterations is {end}; "
                "raise --max_iterations to continue."
            )
        if self.device.type == "cpu":  # process-wide, so applied when training starts, never at import
            share_one_malloc_arena()
            tune_cpu_allocator()
        self._start_learning()
        logger = RunLogger(
            self.log_dir if self.dist.is_main else None,
            total_iterations=end,
            start_iteration=self.iteration,
            backends=self.cfg.logger,
            config={"agent": to_dict(self.cfg), **self.run_info},
            quiet=not self.dist.is_main,
            wandb_project=self.cfg.wandb_project,
        )
        metrics: dict[str, float] = {}
        summary = RunSummary(self.iteration)
        self.interrupted = self._stop_requested = False
        try:
            with self._stop_on_signals():
                while self.iteration < end and not self._stop_requested:
                    metrics = self._iteration()
                    self.iteration += 1
                    self._after_iteration(metrics, self.iteration == end)  # no final evaluation on Ctrl-C
                    logger.log(self.iteration - 1, metrics, format_summary(self.iteration - 1, end, metrics))
                    summary.observe(self.iteration - 1, metrics)
                    last = self.iteration == end or self._stop_requested  # read again: a signal may have come
                    if self.log_dir is not None and (self.iteration % self.cfg.save_interval == 0 or last):
                        self.save(self.log_dir / f"model_{self.iteration}.pt")
                self.interrupted = self._stop_requested
        finally:
            logger.close()
        if self.dist.is_main:
            checkpoint = self.log_dir / f"model_{self.iteration}.pt" if self.log_dir is not None else None
            print(summary.format(checkpoint, self.interrupted), flush=True)
        return metrics

    @contextmanager
    def _stop_on_signals(self) -> Iterator[None]:
        """While training, turn the first SIGINT / SIGTERM into a request to stop after the running iteration."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def request_stop(signum: int, _frame: Any) -> None:
            if self._stop_requested:
                raise KeyboardInterrupt
            self._stop_requested = True
            if self.dist.is_main:
                print(
                    f"\n{signal.Signals(signum).name}: stopping after iteration {self.iteration + 1} and saving a "
                    "checkpoint (Ctrl-C again to abort without saving).",
                    flush=True,
                )

        # A signal the process was told to ignore (SIGINT of a `nohup ... &` job) stays ignored.
        previous = {
            sig: signal.signal(sig, request_stop)
            for sig in (signal.SIGINT, signal.SIGTERM)
            if signal.getsignal(sig) is not signal.SIG_IGN
        }
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @abstractmethod
    def _start_learning(self) -> None:
        """Prepare a :meth:`learn` call (data, buffers, the first observation)."""

    @abstractmethod
    def _iteration(self) -> dict[str, float]:
        """Run iteration :attr:`iteration` and return its metrics."""

    def _after_iteration(self, metrics: dict[str, float], last: bool) -> None:
        """Add to ``metrics`` once :attr:`iteration` has advanced (``last``: the final iteration of :meth:`learn`)."""

    def _spread_episode_starts(self) -> None:
        """Randomize the envs' episode lengths so time-outs do not all happen at once."""
        self.env.episode_length_buf = torch.randint_like(
            self.env.episode_length_buf, high=int(self.env.max_episode_length)
        )
        self.stats.mark_partial()  # the first, shortened episodes are not real returns

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str | Path) -> None:
        """Write an atomic checkpoint: algorithm name, next iteration, :meth:`_checkpoint_state` and ``run_info``."""
        save_checkpoint(
            path,
            {
                "algorithm": self.algorithm_name,
                "iteration": self.iteration,
                **self._checkpoint_state(),
                **self.run_info,
            },
        )

    def load(self, path: str | Path, weights_only: bool = False) -> dict[str, Any]:
        """Resume from a checkpoint (or, with ``weights_only``, just take its network weights).

        Raises:
            ValueError: if the checkpoint was made by another algorithm or an incompatible network.
        """
        return self._load_data(path, load_runner_checkpoint(path, self.algorithm_name, self.device), weights_only)

    def _load_data(self, path: str | Path, data: dict[str, Any], weights_only: bool) -> dict[str, Any]:
        """:meth:`load` of the checkpoint ``data``, read from ``path`` and checked to be this algorithm's."""
        with checkpoint_must_fit(path):
            if weights_only:
                self._load_weights(data["alg"])
                return data
            self.alg.load_state_dict(data["alg"])
        self.iteration = data["iteration"]
        self._restore(data)
        return data

    @abstractmethod
    def _checkpoint_state(self) -> dict[str, Any]:
        """The runner's own checkpoint entries (``alg``, ``agent_cfg``, RNG and env state, ...)."""

    @abstractmethod
    def _load_weights(self, alg_state: dict[str, Any]) -> None:
        """Take the network weights of a checkpoint's ``alg`` entry (a ``weights_only`` load)."""

    @abstractmethod
    def _restore(self, data: dict[str, Any]) -> None:
        """Restore the rest of a full checkpoint, after ``alg`` and ``iteration``."""
