"""Proximal Policy Optimization (Schulman et al. 2017) for batched, auto-resetting environments."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.nn as nn
from tensordict import TensorDict

from rslkit.algorithms.gae import compute_gae
from rslkit.models.actor_critic import ActorCritic
from rslkit.models.recurrent import Hidden
from rslkit.storage.rollout_storage import MiniBatch, RolloutStorage

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
    ~5,500 samples with 256-256-256, the fastest split measured for each (docs/benchmarks.md); whole mini-batches on
    GPUs. 0: whole mini-batches. Feed-forward policies only."""
    parallel_update: bool | None = None
    """Backpropagate the actor's and the critic's losses on two CPU threads at once, each with half of torch's
    intra-op threads. The networks share no trainable parameter, so the gradients are exactly those of the joint
    loss. On 2 busy cores it avoids OpenMP stalls (2.2-2.7x rsl_rl's steps/s at load average 3-5); on 2 quiet cores
    it measured +18 % (64-64) and -13 % (256-256-256) against the sequential update (docs/benchmarks.md).
    None: on when the policy is on the CPU and torch may use >= 2 threads."""


def _detach_hidden(hidden: Hidden | None) -> Hidden | None:
    """Copy a hidden state out of inference mode so it can enter autograd in the update."""
    if hidden is None:
        return None
    if isinstance(hidden, tuple):
        return hidden[0].clone(), hidden[1].clone()
    return hidden.clone()


class PPO:
    """PPO with GAE, clipped surrogate and value losses, entropy bonus, KL-adaptive learning rate, grad-norm
    clipping, and observation normalization updated after optimization (so the first ratio is exactly 1)."""

    def __init__(
        self, policy: ActorCritic, cfg: PPOCfg, num_steps: int, obs: TensorDict, device: torch.device | str
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
        self.storage = RolloutStorage(num_steps, obs, policy.dist.raw_dim, num_params, self.device)
        self._pending: tuple | None = None
        self.distributed = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size() if self.distributed else 1
        self._actor_thread: ThreadPoolExecutor | None = None

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
        time_outs = extras.get("time_outs")
        if time_outs is not None:
            rewards = rewards + self.cfg.gamma * value * time_outs.to(self.device, torch.float32)
        dones = dones.to(self.device).bool()
        self.storage.add(obs, raw, log_prob, value, rewards, dones, params)
        self.policy.reset(dones)
        self._pending = None

    def compute_returns(self, last_obs: TensorDict) -> None:
        """GAE over the stored rollout, bootstrapped with ``V(last_obs)``."""
        st = self.storage
        last_values = self.policy.value(last_obs)
        st.advantages, st.returns = compute_gae(
            st.rewards, st.values, st.dones, last_values, self.cfg.gamma, self.cfg.lam
        )
        if not self.cfg.normalize_advantage_per_mini_batch:
            st.advantages = (st.advantages - st.advantages.mean()) / (st.advantages.std() + 1e-8)

    # ------------------------------------------------------------------ update
    def update(self) -> dict[str, float]:
        """Optimize the clipped PPO objective over the rollout, then update observation normalizers.

        Returns:
            Mean surrogate loss, value loss, entropy, approximate KL, clip fraction and the first mini-batch's mean
            ratio (1 by construction).
        """
        c = self.cfg
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
        return out

    def _update_mini_batch(self, batch: MiniBatch, parallel: bool = False) -> dict[str, torch.Tensor]:
        """One optimizer step on ``batch``; gradients are accumulated over micro-batches (same gradient, better
        cache use on CPU), the actor's and the critic's on two threads when ``parallel``."""
        c = self.cfg
        if c.normalize_advantage_per_mini_batch:
            adv = batch.advantages
            batch.advantages = (adv - adv.mean()) / (adv.std() + 1e-8)
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

    def _accumulate_gradients(self, batch: MiniBatch, weight: float, parallel: bool = False) -> dict[str, torch.Tensor]:
        """Backpropagate ``weight *`` the PPO loss of ``batch``; return its (unweighted) statistics.

        The loss ``L = L^CLIP + c_v L^VF - c_e H`` splits into an actor part (``L^CLIP - c_e H``) and a critic part
        (``c_v L^VF``) over disjoint parameters, so each part is backpropagated on its own (on two threads when
        ``parallel``).
        """
        actor_x, critic_x = self.policy.normalized_inputs(batch.obs)
        actor_h, critic_h = batch.hidden if batch.hidden is not None else (None, None)
        if not parallel:
            stats = self._actor_backward(actor_x, actor_h, batch, weight)
            return {**stats, **self._critic_backward(critic_x, critic_h, batch, weight)}
        if self._actor_thread is None:
            self._actor_thread = ThreadPoolExecutor(1, "rslkit-ppo-actor")
        threads = torch.get_num_threads()  # this thread's share, set by update()
        actor_job = self._actor_thread.submit(
            self._in_worker, threads, self._actor_backward, actor_x, actor_h, batch, weight
        )
        critic_stats = self._critic_backward(critic_x, critic_h, batch, weight)
        return {**actor_job.result(), **critic_stats}

    def _actor_backward(
        self, actor_x: torch.Tensor, hidden: Hidden | None, batch: MiniBatch, weight: float
    ) -> dict[str, torch.Tensor]:
        """Backpropagate ``weight * (L^CLIP - c_e H)``; return surrogate, entropy, KL, clip fraction, mean ratio."""
        c = self.cfg
        log_prob, entropy, params = self.policy.evaluate_actor(actor_x, batch.actions, hidden, batch.resets)
        advantages = batch.advantages
        # L^CLIP = E[min(r A, clip(r, 1 - eps, 1 + eps) A)],  r = pi(a|s) / pi_old(a|s)
        ratio = torch.exp(log_prob - batch.log_probs)
        surrogate = -torch.min(ratio * advantages, ratio.clamp(1 - c.clip_param, 1 + c.clip_param) * advantages).mean()
        entropy_mean = entropy.mean()
        (weight * (surrogate - c.entropy_coef * entropy_mean)).backward()
        with torch.no_grad():
            return {
                "surrogate": surrogate.detach(),
                "entropy": entropy_mean.detach(),
                "kl": self.policy.dist.kl(batch.dist_params, params).mean(),
                "clip_fraction": ((ratio - 1).abs() > c.clip_param).float().mean(),
                "ratio_mean": ratio.detach().mean(),
            }

    def _critic_backward(
        self, critic_x: torch.Tensor, hidden: Hidden | None, batch: MiniBatch, weight: float
    ) -> dict[str, torch.Tensor]:
        """Backpropagate ``weight * c_v * L^VF`` (optionally clipped around the rollout's values)."""
        c = self.cfg
        values = self.policy.evaluate_critic(critic_x, hidden, batch.resets)
        if c.use_clipped_value_loss:
            values_clipped = batch.values + (values - batch.values).clamp(-c.clip_param, c.clip_param)
            value_loss = torch.max((values - batch.returns) ** 2, (values_clipped - batch.returns) ** 2).mean()
        else:
            value_loss = ((values - batch.returns) ** 2).mean()
        (weight * c.value_loss_coef * value_loss).backward()
        return {"value": value_loss.detach()}

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
        """Policy (with normalizers), optimizer and learning rate."""
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.learning_rate = state["learning_rate"]
