"""Proximal Policy Optimization (Schulman et al. 2017) for batched, auto-resetting environments."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar

import torch
import torch.distributed as dist
import torch.nn as nn
from tensordict import TensorDict

from rslkit.algorithms.gae import bootstrap_time_outs, compute_gae, normalize_advantages
from rslkit.algorithms.ppo_losses import clip_fraction, value_loss
from rslkit.algorithms.staleness import StalenessCfg, policy_loss
from rslkit.algorithms.symmetry import Mirror, SymmetryCfg, augment, check_policy, mirror_loss
from rslkit.models.actor_critic import ActorCritic
from rslkit.models.recurrent import Hidden
from rslkit.models.rnd import RandomNetworkDistillation, RndCfg
from rslkit.storage.rollout_storage import MiniBatch, RolloutStorage
from rslkit.utils.validation import expect, finite

_ActorOut = TypeVar("_ActorOut")
_CriticOut = TypeVar("_CriticOut")

MICRO_BATCH_BYTES = 64 * 2**20
"""Activation budget of a default CPU micro-batch (see ``PPOCfg.micro_batch_size``)."""


@dataclass
class PPOCfg:
    """PPO hyperparameters (defaults follow rsl_rl)."""

    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    clip_param: float = 0.2
    gamma: float = 0.99
    lam: float = 0.95
    value_loss_coef: float = 1.0
    entropy_coef: float = 0.01
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0
    use_clipped_value_loss: bool = True
    schedule: Literal["adaptive", "fixed"] = "adaptive"
    """``adaptive``: lr x/÷ lr_factor when the KL leaves [desired_kl / 2, 2 desired_kl]."""
    desired_kl: float = 0.01
    lr_factor: float = 1.5
    min_lr: float = 1e-5
    max_lr: float = 1e-2
    normalize_advantage_per_mini_batch: bool = False
    micro_batch_size: int | None = None
    """Gradients of a mini-batch are accumulated over micro-batches of this many samples: the same update in less
    memory. None: on the CPU, the most samples whose hidden activations (actor and critic, before and after the
    activation function) fit in ``MICRO_BATCH_BYTES`` (64 MiB): whole 24,576-sample mini-batches with 64-64 networks,
    ~5,500 samples with 256-256-256, the fastest split measured for each (docs/benchmarks.md, section 1); whole
    mini-batches on GPUs. 0: whole mini-batches. Feed-forward policies only."""
    parallel_update: bool | None = None
    """Backpropagate the actor's and the critic's losses on two CPU threads at once, each with half of torch's
    intra-op threads. The networks share no trainable parameter, so the gradients are exactly those of the joint
    loss. On 2 busy cores it avoids OpenMP stalls; on 2 quiet cores it is faster than the sequential update with
    small networks and slower with wide ones (docs/benchmarks.md, section 1).
    None: on when the policy is on the CPU and torch may use >= 2 threads."""
    staleness: StalenessCfg = field(default_factory=StalenessCfg)
    """How samples of older policy versions are treated (decoupled PPO, A-3PO, M2PO); the default is plain PPO."""
    symmetry_cfg: SymmetryCfg = field(default_factory=SymmetryCfg)
    """Mirror-symmetry augmentation and mirror loss (rsl_rl's ``symmetry_cfg``; :mod:`rslkit.algorithms.symmetry`);
    off by default."""
    rnd_cfg: RndCfg = field(default_factory=RndCfg)
    """Random Network Distillation curiosity (rsl_rl's ``rnd_cfg``; :mod:`rslkit.models.rnd`); off while its weight
    is 0."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field PPO cannot run with."""
        for name in ("num_learning_epochs", "num_mini_batches"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        for name in ("clip_param", "learning_rate", "max_grad_norm"):
            value = getattr(self, name)
            expect(finite(value) and value > 0, name, f"must be a finite number > 0, got {value}")
        for name in ("value_loss_coef", "entropy_coef"):
            value = getattr(self, name)
            expect(finite(value) and value >= 0, name, f"must be a finite number >= 0, got {value}")
        expect(finite(self.gamma) and 0 < self.gamma <= 1, "gamma", f"must be in (0, 1], got {self.gamma}")
        expect(finite(self.lam) and 0 <= self.lam <= 1, "lam", f"must be in [0, 1], got {self.lam}")
        expect(
            self.schedule in ("adaptive", "fixed"), "schedule", f"must be 'adaptive' or 'fixed', got {self.schedule!r}"
        )
        if self.schedule == "adaptive":
            expect(finite(self.desired_kl) and self.desired_kl > 0, "desired_kl", f"must be > 0, got {self.desired_kl}")
            expect(finite(self.lr_factor) and self.lr_factor >= 1, "lr_factor", f"must be >= 1, got {self.lr_factor}")
            expect(finite(self.min_lr) and self.min_lr > 0, "min_lr", f"must be a finite number > 0, got {self.min_lr}")
            expect(
                finite(self.max_lr) and self.max_lr >= self.min_lr,
                "max_lr",
                f"must be finite and >= min_lr ({self.min_lr}), got {self.max_lr}",
            )
        size = self.micro_batch_size
        expect(size is None or size >= 0, "micro_batch_size", f"must be None, 0 (off) or >= 1, got {size}")


def _detach_hidden(hidden: Hidden | None) -> Hidden | None:
    """Copy a hidden state out of inference mode so it can enter autograd in the update."""
    if hidden is None:
        return None
    if isinstance(hidden, tuple):
        return hidden[0].clone(), hidden[1].clone()
    return hidden.clone()


class PPO:
    """PPO with GAE, clipped surrogate and value losses, entropy bonus, KL-adaptive learning rate, grad-norm
    clipping, and observation normalization updated after optimization (so the first ratio is exactly 1); with
    ``symmetry_cfg`` mirrored samples and a mirror loss, with ``rnd_cfg`` RND curiosity.

    Args:
        policy: the actor-critic to train.
        cfg: hyperparameters.
        num_steps: rollout steps per env per update.
        obs: an observation of the env (sizes of the stored groups).
        device: training device.
        mirror: the task's mirror; needed (only) when ``cfg.symmetry_cfg`` is on.
        control_period: the env's seconds per step; RND's weight is per second of it (None: per step).
    """

    def __init__(
        self,
        policy: ActorCritic,
        cfg: PPOCfg,
        num_steps: int,
        obs: TensorDict,
        device: torch.device | str,
        mirror: Mirror | None = None,
        control_period: float | None = None,
    ) -> None:
        if cfg.num_mini_batches < 1 or cfg.num_learning_epochs < 1:
            raise ValueError("num_mini_batches and num_learning_epochs must be >= 1.")
        self.cfg = cfg
        self.device = torch.device(device)
        self.policy = policy.to(self.device)
        self.learning_rate = cfg.learning_rate
        # The fused Adam kernel (CPU and CUDA, torch >= 2.4) is one op per step instead of one per parameter.
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.learning_rate, fused=True)
        num_params = len(policy.dist.params(torch.zeros(1, policy.dist.head_dim, device=self.device)))
        groups = list(dict.fromkeys([*policy.obs_groups["actor"], *policy.obs_groups["critic"]]))
        rnd_groups = list(cfg.rnd_cfg.obs_groups) or policy.obs_groups["critic"]
        if cfg.rnd_cfg.enabled:
            groups = list(dict.fromkeys([*groups, *rnd_groups]))
        self.storage = RolloutStorage(num_steps, obs, policy.dist.raw_dim, num_params, self.device, groups)
        self._pending: tuple | None = None
        self.distributed = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size() if self.distributed else 1
        self._actor_thread: ThreadPoolExecutor | None = None
        self.version = 0
        """Policy version: the number of updates made. Samples record the version that acted."""
        self.mirror = self._check_mirror(mirror)
        """The task's mirror while symmetry is on, else None."""
        self.rnd: RandomNetworkDistillation | None = None
        """RND curiosity while ``rnd_cfg.weight > 0``, else None."""
        self._intrinsic_sum = torch.zeros((), device=self.device)
        self._intrinsic_steps = 0
        if cfg.rnd_cfg.enabled:
            if self.distributed:
                raise ValueError("RND trains its predictor on one process; set --agent.algorithm.rnd_cfg.weight 0 "
                                 "under torchrun.")  # fmt: skip
            weight = cfg.rnd_cfg.weight * (control_period or 1.0)
            num_envs = self.storage.num_envs
            self.rnd = RandomNetworkDistillation(obs, rnd_groups, num_envs, cfg.rnd_cfg, weight).to(self.device)

    def _check_mirror(self, mirror: Mirror | None) -> Mirror | None:
        """``mirror`` when symmetry is on (refusing policies it cannot serve), None when it is off."""
        if not self.cfg.symmetry_cfg.enabled:
            return None
        if mirror is None:
            raise ValueError("Symmetry is on but PPO got no mirror; set --agent.algorithm.symmetry_cfg."
                             "data_augmentation_func (go2 or package.module:factory).")  # fmt: skip
        check_policy(self.policy.cfg.distribution, self.policy.is_recurrent)
        return mirror

    # ------------------------------------------------------------------ rollout
    def begin_rollout(self) -> None:
        """Record the hidden states the rollout starts from (call outside inference mode)."""
        if self.policy.is_recurrent:
            n = self.storage.num_envs
            self.policy.ensure_hidden(n, self.device)
            actor_h, critic_h = self.policy.hidden_states()
            self.storage.hidden0 = (_detach_hidden(actor_h), _detach_hidden(critic_h))  # type: ignore[assignment]

    def act(self, obs: TensorDict) -> torch.Tensor:
        """Sample env actions ``[N, A]`` for ``obs`` and remember what the update needs."""
        raw, log_prob, value, params = self.policy.act(obs)
        self._pending = (obs, raw, log_prob, value, params)
        return self.policy.to_env(raw)

    def process_env_step(self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        """Store the transition; bootstrap time-outs with ``r += gamma * V(s_t)``; reset finished hidden states."""
        if self._pending is None:
            raise RuntimeError("process_env_step called before act().")
        obs, raw, log_prob, value, params = self._pending
        rewards = rewards.to(self.device, torch.float32)
        rewards = bootstrap_time_outs(rewards, value, extras.get("time_outs"), self.cfg.gamma)
        dones = dones.to(self.device).bool()
        self.storage.add(obs, raw, log_prob, value, rewards, dones, params, self.version)
        self.policy.reset(dones)
        self._pending = None

    def intrinsic_reward(self, obs: TensorDict) -> torch.Tensor:
        """RND's intrinsic reward ``[N]`` of the states ``obs`` a rollout step reached (added to the env's reward
        before :meth:`process_env_step`); only while RND is on."""
        if self.rnd is None:
            raise RuntimeError("intrinsic_reward needs RND: set --agent.algorithm.rnd_cfg.weight > 0.")
        reward = self.rnd.intrinsic_reward(obs)
        self._intrinsic_sum += reward.mean()
        self._intrinsic_steps += 1
        return reward

    def compute_returns(self, last_obs: TensorDict) -> None:
        """GAE over the stored rollout, bootstrapped with ``V(last_obs)``."""
        st = self.storage
        last_values = self.policy.value(last_obs)
        st.advantages, st.returns = compute_gae(
            st.rewards, st.values, st.dones, last_values, self.cfg.gamma, self.cfg.lam
        )
        if not self.cfg.normalize_advantage_per_mini_batch:
            st.advantages = normalize_advantages(st.advantages)

    # ------------------------------------------------------------------ update
    def update(self) -> dict[str, float]:
        """Optimize the clipped PPO objective over the rollout, then update observation normalizers.

        With ``staleness.objective="decoupled"`` (or an M2 threshold) and ``proximal="recompute"``, the log-probs of
        the stored actions under the pre-update policy (``pi_prox``) are computed first, in one pass without
        gradients.

        Returns:
            Mean surrogate loss, value loss, entropy, approximate KL, clip fraction, the first mini-batch's mean
            ratio (1 by construction with fresh data or the decoupled objective), and the samples' staleness
            (versions behind the pre-update policy, mean and max).
        """
        c = self.cfg
        staleness = (self.version - self.storage.versions).float()
        if c.staleness.needs_proximal and c.staleness.proximal == "recompute":
            self.storage.proximal_log_probs = self._proximal_log_probs()
        if self.policy.is_recurrent:
            batches = self.storage.recurrent_mini_batches(c.num_mini_batches, c.num_learning_epochs)
        else:
            batches = self.storage.mini_batches(c.num_mini_batches, c.num_learning_epochs)
        sums: dict[str, torch.Tensor] = {}
        first_ratio = None
        n = 0
        threads = torch.get_num_threads()
        parallel = self._use_parallel_update(threads)
        if parallel:
            torch.set_num_threads(max(1, threads // 2))  # per calling thread; the actor's worker sets its own
        try:
            for batch in batches:
                stats = self._update_mini_batch(batch, parallel)
                if self.rnd is not None:
                    stats["rnd"] = self.rnd.fit(batch.obs)
                if first_ratio is None:
                    first_ratio = stats["ratio_mean"]
                for key, value in stats.items():
                    sums[key] = sums.get(key, 0.0) + value
                n += 1
        finally:
            if parallel:
                torch.set_num_threads(threads)
        self.policy.update_normalization(self.storage.obs)
        self.storage.clear()
        out = {k: float(v) / n for k, v in sums.items()}
        out["first_ratio"] = float(first_ratio) if first_ratio is not None else 1.0
        out["staleness_mean"], out["staleness_max"] = float(staleness.mean()), float(staleness.max())
        self.version += 1
        return out

    def pop_intrinsic_reward_mean(self) -> float:
        """The mean intrinsic reward per step since the last call (0 before any step); RND only."""
        mean = float(self._intrinsic_sum) / max(1, self._intrinsic_steps)
        self._intrinsic_sum.zero_()
        self._intrinsic_steps = 0
        return mean

    @torch.no_grad()
    def _proximal_log_probs(self) -> torch.Tensor:
        """``log pi_prox [T, N]``: the stored actions' log-probs under the current (pre-update) policy."""
        if self.policy.is_recurrent:
            raise ValueError(
                "staleness.proximal='recompute' needs a feed-forward policy; use proximal='loglinear' (A-3PO) with a "
                "recurrent one."
            )
        st = self.storage
        obs, actions = st.obs.flatten(0, 1), st.actions.flatten(0, 1)
        actor_x, _ = self.policy.normalized_inputs(obs)
        out = torch.cat(
            [
                self.policy.evaluate_actor(actor_x[i : i + 65536], actions[i : i + 65536], None, None)[0]
                for i in range(0, actions.shape[0], 65536)
            ]
        )
        return out.view(st.num_steps, st.num_envs)

    def _update_mini_batch(self, batch: MiniBatch, parallel: bool = False) -> dict[str, torch.Tensor]:
        """One optimizer step on ``batch``; gradients are accumulated over micro-batches (same gradient, better
        cache use on CPU), the actor's and the critic's on two threads when ``parallel``."""
        c = self.cfg
        if c.normalize_advantage_per_mini_batch:
            batch.advantages = normalize_advantages(batch.advantages)
        size = batch.advantages.shape[0]
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, torch.Tensor] = {}
        for chunk in self._micro_batches(batch):
            weight = chunk.advantages.shape[0] / size
            for key, value in self._accumulate_gradients(chunk, weight, parallel).items():
                sums[key] = sums.get(key, 0.0) + weight * value
        if c.schedule == "adaptive":
            self._adapt_learning_rate(sums["kl"])
        if self.distributed:
            self._all_reduce_gradients()
        nn.utils.clip_grad_norm_(self._actor_params(), c.max_grad_norm)
        nn.utils.clip_grad_norm_(self._critic_params(), c.max_grad_norm)
        self.optimizer.step()
        return sums

    def _micro_batches(self, batch: MiniBatch) -> list[MiniBatch]:
        size = self.cfg.micro_batch_size
        if size is None:
            size = self._default_micro_batch_size() if self.device.type == "cpu" else 0
        if size <= 0 or self.policy.is_recurrent or batch.advantages.shape[0] <= size:
            return [batch]
        return batch.split(size)

    def _default_micro_batch_size(self) -> int:
        cfg = self.policy.cfg
        floats_per_sample = 2 * (sum(cfg.actor_hidden_dims) + sum(cfg.critic_hidden_dims))
        return max(1024, MICRO_BATCH_BYTES // (4 * max(1, floats_per_sample)))

    def _accumulate_gradients(self, batch: MiniBatch, share: float, parallel: bool = False) -> dict[str, torch.Tensor]:
        """Backpropagate ``share *`` the PPO loss of ``batch`` (:meth:`loss`); return its (unweighted) statistics.

        The actor and the critic share no trainable parameter, so their forward and backward passes run on two
        threads when ``parallel`` (the actor's on a worker); the loss between them is computed here. With symmetry
        on, :meth:`_accumulate_symmetric` does it instead.
        """
        if self.mirror is not None:
            return self._accumulate_symmetric(batch, self.mirror, share, parallel)
        actor_x, critic_x = self.policy.normalized_inputs(batch.obs)
        actor_h, critic_h = batch.hidden if batch.hidden is not None else (None, None)
        (log_prob, entropy, params), values = self._actor_and_critic(
            partial(self.policy.evaluate_actor, actor_x, batch.actions, actor_h, batch.resets),
            partial(self.policy.evaluate_critic, critic_x, critic_h, batch.resets),
            parallel,
        )
        actor_loss, critic_loss, stats = self.loss(batch, log_prob, entropy, values, share)
        self._actor_and_critic(actor_loss.backward, critic_loss.backward, parallel)
        return self._with_kl(stats, batch.dist_params, params)

    def _with_kl(
        self, stats: dict[str, torch.Tensor], old: tuple[torch.Tensor, ...], new: tuple[torch.Tensor, ...]
    ) -> dict[str, torch.Tensor]:
        """``stats`` with ``kl``: the mean KL from the rollout's distributions ``old`` to ``new``."""
        if "kl_prox" in stats:  # decoupled: the trust region is around pi_prox, whose parameters are not stored
            stats["kl"] = stats.pop("kl_prox")
        else:
            with torch.no_grad():
                stats["kl"] = self.policy.dist.kl(old, new).mean()
        return stats

    def _accumulate_symmetric(
        self, batch: MiniBatch, mirror: Mirror, share: float, parallel: bool
    ) -> dict[str, torch.Tensor]:
        """:meth:`_accumulate_gradients` with symmetry (:mod:`rslkit.algorithms.symmetry`): the batch doubled with
        its mirror image (``use_data_augmentation``), the mirror loss added (``use_mirror_loss``) and logged as
        ``symmetry``; entropy and KL over the original samples."""
        sym, n = self.cfg.symmetry_cfg, batch.advantages.shape[0]
        if sym.use_data_augmentation:
            batch = augment(batch, mirror)
        actor_x, critic_x = self.policy.normalized_inputs(batch.obs)
        (log_prob, entropy, params), values = self._actor_and_critic(
            partial(self.policy.evaluate_actor, actor_x, batch.actions),
            partial(self.policy.evaluate_critic, critic_x),
            parallel,
        )
        actor_loss, critic_loss, stats = self.loss(batch, log_prob, entropy[:n], values, share)
        mean = self.policy.dist.mode(params)
        if sym.use_data_augmentation:
            mean, mirrored_mean = mean[:n], mean[n:]
        else:
            mirrored_x, _ = self.policy.normalized_inputs(mirror.observations(batch.obs))
            mirrored_mean = self.policy.dist.mode(self.policy.dist.params(self.policy.actor(mirrored_x)))
        symmetry = mirror_loss(mirrored_mean, mean, mirror)
        if sym.use_mirror_loss:
            actor_loss = actor_loss + share * sym.mirror_loss_coeff * symmetry
        stats["symmetry"] = symmetry.detach()
        self._actor_and_critic(actor_loss.backward, critic_loss.backward, parallel)
        return self._with_kl(stats, batch.dist_params, tuple(p[:n] for p in params))

    def loss(
        self, batch: MiniBatch, log_prob: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, share: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The PPO loss of ``batch`` (Schulman et al. 2017, eq. 9, negated to be minimized):

            L = -L^CLIP + c_1 L^VF - c_2 S,   L^CLIP = E[min(r A, clip(r, 1 - eps, 1 + eps) A)],   r = pi / pi_old

        split into the actor's part ``-L^CLIP - c_2 S`` and the critic's ``c_1 L^VF`` (no parameter in common, so
        the two parts' gradients are those of ``L``). ``L^VF`` is clipped around the rollout's values when
        ``use_clipped_value_loss`` (PPO2 / rsl_rl, not in the paper). With ``staleness.objective="decoupled"``,
        ``-L^CLIP`` is replaced by the decoupled surrogate ``-L^dec`` (:mod:`rslkit.algorithms.staleness`).

        Args:
            batch: the rollout's log-probs, values, returns and advantages ``[B]``.
            log_prob, entropy: ``[B]`` of the policy being trained; values: its critic's ``V(s) [B]``.
            share: the batch's fraction of its mini-batch (micro-batches), which scales both parts.

        Returns:
            ``(share * actor part, share * critic part, statistics)``.
        """
        c = self.cfg
        # -L^CLIP (eq. 7) with r = pi_theta / pi_old, or the decoupled -L^dec with u = pi_theta / pi_prox
        surrogate, ratio, stale_stats = policy_loss(
            c.staleness, log_prob, batch.log_probs, batch.advantages, c.clip_param,
            batch.proximal_log_probs, batch.versions, self.version,
        )  # fmt: skip
        value_clip = c.clip_param if c.use_clipped_value_loss else None
        value = value_loss(values, batch.returns, batch.values, value_clip)  # L^VF
        entropy_mean = entropy.mean()  # S[pi_theta]
        actor_loss = share * (surrogate - c.entropy_coef * entropy_mean)
        critic_loss = share * c.value_loss_coef * value
        with torch.no_grad():
            stats = {
                "surrogate": surrogate.detach(),
                "entropy": entropy_mean.detach(),
                "clip_fraction": clip_fraction(ratio, c.clip_param),
                "ratio_mean": ratio.detach().mean(),
                "value": value.detach(),
                **{k: v.detach() for k, v in stale_stats.items()},
            }
        return actor_loss, critic_loss, stats

    def _actor_and_critic(
        self, actor_fn: Callable[[], _ActorOut], critic_fn: Callable[[], _CriticOut], parallel: bool
    ) -> tuple[_ActorOut, _CriticOut]:
        """``(actor_fn(), critic_fn())``; when ``parallel``, ``actor_fn`` runs on the worker thread meanwhile."""
        if not parallel:
            return actor_fn(), critic_fn()
        if self._actor_thread is None:
            self._actor_thread = ThreadPoolExecutor(1, "rslkit-ppo-actor")
        threads = torch.get_num_threads()  # this thread's share, set by update()
        actor_job = self._actor_thread.submit(self._in_worker, threads, actor_fn)
        critic_out = critic_fn()
        return actor_job.result(), critic_out

    @staticmethod
    def _in_worker(threads: int, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the worker with ``threads`` intra-op threads (a per-thread setting in torch)."""
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return fn(*args)

    def _use_parallel_update(self, threads: int) -> bool:
        setting = self.cfg.parallel_update
        if setting is None:
            return self.device.type == "cpu" and threads >= 2
        if setting and self.device.type != "cpu":
            raise ValueError("parallel_update runs the actor and critic on two CPU threads; set it False on a GPU.")
        return setting

    def _actor_params(self) -> list[nn.Parameter]:
        p = self.policy
        params = list(p.actor.parameters()) + list(p.dist.parameters())
        return params + (list(p.actor_memory.parameters()) if p.actor_memory is not None else [])

    def _critic_params(self) -> list[nn.Parameter]:
        p = self.policy
        return list(p.critic.parameters()) + (list(p.critic_memory.parameters()) if p.critic_memory else [])

    def _adapt_learning_rate(self, kl: torch.Tensor) -> None:
        c = self.cfg
        if self.distributed:
            kl = kl.clone()
            dist.all_reduce(kl)
            kl /= self.world_size
        kl_value = float(kl)
        if kl_value > 2.0 * c.desired_kl:
            self.learning_rate = max(c.min_lr, self.learning_rate / c.lr_factor)
        elif 0.0 < kl_value < 0.5 * c.desired_kl:
            self.learning_rate = min(c.max_lr, self.learning_rate * c.lr_factor)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate

    def _all_reduce_gradients(self) -> None:
        params = [p for p in self.policy.parameters() if p.grad is not None]
        flat = torch.cat([p.grad.reshape(-1) for p in params])  # type: ignore[union-attr]
        dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for p in params:
            numel = p.numel()
            p.grad.copy_(flat[offset : offset + numel].view_as(p))  # type: ignore[union-attr]
            offset += numel

    def broadcast_parameters(self) -> None:
        """Make every rank start from rank 0's parameters and normalizer statistics."""
        if self.distributed:
            for tensor in self.policy.state_dict().values():
                dist.broadcast(tensor, src=0)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Policy (with normalizers), optimizer and learning rate; with RND its module and optimizer."""
        state = {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate,
            "version": self.version,
        }
        if self.rnd is not None:
            state["rnd"] = self.rnd.state_dict()
            state["rnd_optimizer"] = self.rnd.optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.learning_rate = state["learning_rate"]
        self.version = int(state.get("version", 0))  # checkpoints before policy versions start at 0
        if self.rnd is not None:
            if "rnd" not in state:
                raise ValueError("This checkpoint was trained without RND; resume it with "
                                 "--agent.algorithm.rnd_cfg.weight 0, or start a new run.")  # fmt: skip
            self.rnd.load_state_dict(state["rnd"])
            self.rnd.optimizer.load_state_dict(state["rnd_optimizer"])
