"""What a runner of an instruction-following (VLA) policy needs from its env: each env's instruction embedding
(evaluation reports success per instruction: :mod:`rslkit.runners.evaluation`).

The env names its instructions in ``env.instructions`` (strings) with an observation group ``goal`` holding each
env's index into them (``so101-pick-place``); an env without them follows one fixed instruction. Instructions are
embedded with a local sentence encoder (:class:`~rslkit.models.text_encoder.SentenceEncoder`; never downloaded).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict

from rslkit.envs.instruction_groups import INSTRUCTION_INDEX_GROUP
from rslkit.envs.vec_env import VecEnv
from rslkit.models.text_encoder import SentenceEncoder
from rslkit.models.vla.policy import INSTRUCTION_GROUP


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
        if instructions and INSTRUCTION_INDEX_GROUP in obs.keys():
            return self.embed(list(instructions))[obs[INSTRUCTION_INDEX_GROUP].reshape(-1).long().to(self.device)]
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
