"""ReinFlow over a VLA policy (pi_RL's Flow-Noise: ReinFlow inside a VLA action expert), with an asymmetric critic.

The actor is the noisy chain of a :class:`~rslkit.models.vla.VLAPolicy`: each of its K Euler steps is Gaussian
around the action expert's step, with a bounded noise net that reads the chain sample, the flow time and the pooled
observation tokens, so the chain's likelihood is exact (:class:`~rslkit.models.flow.NoisyFlowChain`). The actor reads
what the policy reads (cameras, instruction embedding, proprioceptive state); the critic ``V(s)`` reads a privileged
state group of the simulator (asymmetric actor-critic), which the deployed policy never needs. Loss, advantages and
update are ReinFlow's (:class:`~rslkit.algorithms.reinflow.ReinFlow`).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rslkit.algorithms.reinflow import ReinFlow, ReinFlowCfg
from rslkit.models.flow.chain import FlowChain
from rslkit.models.vla.policy import VLAPolicy


class VLAReinFlow(ReinFlow):
    """:class:`ReinFlow` whose actor is a VLA policy's chain and whose critic reads ``critic_group``.

    Args:
        chain: the stochastic chain (Flow-Noise or Flow-SDE) around a :class:`VLAPolicy`
            (:func:`~rslkit.algorithms.reinflow.make_chain`).
        cfg: ReinFlow settings.
        num_steps: decisions per env and iteration.
        obs: an observation batch ``[N]`` with the policy's groups (the instruction embedding included) and
            ``critic_group``.
        critic_group: the privileged state group of the critic (normalized by running statistics).
        device: training device.

    Raises:
        ValueError: the chain's policy is not a VLA policy, or ``obs`` lacks a group the actor or critic reads.
    """

    def __init__(
        self,
        chain: FlowChain,
        cfg: ReinFlowCfg,
        num_steps: int,
        obs: TensorDict,
        critic_group: str,
        device: torch.device | str = "cpu",
    ) -> None:
        policy = chain.policy
        if not isinstance(policy, VLAPolicy):
            raise ValueError(f"VLAReinFlow fine-tunes a VLAPolicy, got a {type(policy).__name__}; use ReinFlow.")
        missing = [g for g in policy.input_groups if g not in obs.keys()]
        if missing:
            raise ValueError(
                f"The VLA policy reads the observation groups {policy.input_groups}; {missing} missing (have "
                f"{sorted(obs.keys())}): render the cameras (--env.cameras) and add the instruction embedding."
            )
        self.vla = policy
        super().__init__(
            chain, cfg, num_steps, obs, policy.cfg.state_group, device, critic_group, actor_groups=policy.input_groups
        )

    def normalized_obs(self, obs: TensorDict) -> TensorDict:
        """The actor's inputs ``[B]``: normalized state, instruction embedding and ``[0, 1]`` images."""
        return self.vla.normalize_inputs(obs)
