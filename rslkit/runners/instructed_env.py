"""What a runner of an instruction-following (VLA) policy needs from its env: each env's instruction embedding and
an evaluation that reports success per instruction.

The env names its instructions in ``env.instructions`` (strings) with an observation group ``goal`` holding each
env's index into them (``so101-pick-place``); an env without them follows one fixed instruction. Instructions are
embedded with a local sentence encoder (:class:`~rslkit.models.text_encoder.SentenceEncoder`; never downloaded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDict

from rslkit.envs.instruction_groups import INSTRUCTION_INDEX_GROUP
from rslkit.envs.vec_env import VecEnv
from rslkit.models.text_encoder import SentenceEncoder
from rslkit.models.vla.policy import INSTRUCTION_GROUP

GOAL_GROUP = INSTRUCTION_INDEX_GROUP
"""Observation group of each env's instruction index (into ``env.instructions``)."""


class EnvInstructions:
    """Raw instruction embeddings ``[N, E]`` of an env's episodes, cached per text.

    Args:
        env: the env (``instructions`` + a ``goal`` group, or neither).
        text_encoder: sentence encoder name or local directory (:class:`SentenceEncoder`).
        language_dim: the policy's embedding size ``E``; the encoder must match it.
        device: where embeddings live.
        instruction: the one instruction of every env, for envs that name none ("": the env must).
    """

    def __init__(
        self, env: VecEnv, text_encoder: str, language_dim: int, device: torch.device, instruction: str = ""
    ) -> None:
        self.env, self.text_encoder, self.language_dim = env, text_encoder, language_dim
        self.device, self.instruction = device, instruction
        self._encoder: SentenceEncoder | None = None
        self._embeddings: dict[str, torch.Tensor] = {}

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """Raw sentence embeddings ``[len(texts), E]`` (the encoder is loaded on first use).

        Raises:
            ValueError: the encoder's size is not ``language_dim``.
        """
        new = [t for t in dict.fromkeys(texts) if t not in self._embeddings]
        if new:
            if self._encoder is None:
                self._encoder = SentenceEncoder(self.text_encoder)
                if self._encoder.dim != self.language_dim:
                    raise ValueError(
                        f"The text encoder {self.text_encoder!r} embeds into {self._encoder.dim} dimensions, the "
                        f"policy reads {self.language_dim}: use the encoder the policy was trained with "
                        f"(--agent.text_encoder), or for a new policy set --agent.policy.language_dim "
                        f"{self._encoder.dim}."
                    )
            self._embeddings.update(zip(new, self._encoder.encode(new).to(self.device)))
        return torch.stack([self._embeddings[t] for t in texts])

    def __call__(self, obs: TensorDict) -> torch.Tensor:
        """Each env's raw instruction embedding ``[N, E]``.

        Raises:
            ValueError: the env provides no instructions and no fixed instruction is set.
        """
        instructions = getattr(self.env, "instructions", None)
        if instructions and GOAL_GROUP in obs.keys():
            return self.embed(list(instructions))[obs[GOAL_GROUP].reshape(-1).long().to(self.device)]
        if self.instruction:
            return self.embed([self.instruction]).expand(obs.batch_size[0], -1)
        raise ValueError(
            "The env gives no instruction (no `instructions` with a 'goal' observation group): set "
            "--agent.instruction TEXT, the instruction every env follows."
        )

    def add_to(self, obs: TensorDict) -> TensorDict:
        """``obs`` (shallow copy) with the ``instruction`` group added: the VLA policy's input."""
        out = obs.clone(recurse=False)
        out.set(INSTRUCTION_GROUP, self(obs).to(obs.device))
        return out


@dataclass
class InstructedEpisodes:
    """Per env, one evaluation episode: ``returns``, ``lengths``, ``success`` (bool) and ``goal`` (instruction index;
    0 for an env without instructions), all ``[N]`` on the CPU."""

    returns: torch.Tensor
    lengths: torch.Tensor
    success: torch.Tensor
    goal: torch.Tensor

    def metrics(self) -> dict[str, float]:
        """``Eval/mean_return``, ``Eval/mean_episode_length``, ``Eval/success_rate`` and, per instruction index
        ``g``, ``Eval/success/<g>``."""
        out = {
            "Eval/mean_return": float(self.returns.mean()),
            "Eval/mean_episode_length": float(self.lengths.mean()),
            "Eval/success_rate": float(self.success.float().mean()),
        }
        for g in self.goal.unique().tolist():
            out[f"Eval/success/{g}"] = float(self.success[self.goal == g].float().mean())
        return out


@torch.inference_mode()
def run_instructed_episodes(
    env: VecEnv,
    policy: Callable[[TensorDict], torch.Tensor],
    reset_inference: Callable[[torch.Tensor | None], None],
) -> InstructedEpisodes:
    """One episode per env from a reset (where the env can reset) with the step policy ``policy``; the global RNG
    is restored afterwards, so evaluations do not change the training run. Success is the env's
    ``extras["success"]`` where an episode ends."""
    with torch.random.fork_rng():
        if hasattr(env, "reset"):
            env.reset()
        reset_inference(None)
        obs = env.get_observations()
        n = env.num_envs
        goal = obs[GOAL_GROUP].reshape(-1).long().cpu() if GOAL_GROUP in obs.keys() else torch.zeros(n).long()
        returns, lengths = torch.zeros(n), torch.zeros(n)
        success, done = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
        for _ in range(int(torch.as_tensor(env.max_episode_length).max()) + 1):
            obs, rewards, dones, extras = env.step(policy(obs))
            dones = dones.cpu().bool()
            returns += rewards.cpu() * ~done
            lengths += (~done).float()
            success |= dones & ~done & extras.get("success", torch.zeros_like(dones)).cpu().bool()
            done |= dones
            reset_inference(dones)
            if bool(done.all()):
                break
    return InstructedEpisodes(returns, lengths, success, goal)


def evaluate_instructed(
    env: VecEnv,
    policy: Callable[[TensorDict], torch.Tensor],
    reset_inference: Callable[[torch.Tensor | None], None],
) -> dict[str, float]:
    """The metrics (:meth:`InstructedEpisodes.metrics`) of :func:`run_instructed_episodes`."""
    return run_instructed_episodes(env, policy, reset_inference).metrics()
