"""Fine-tune a fixture policy briefly with LoRA and new statistics, save it in LeRobot's format with its outputs,
for ``make_fixtures.py check-saved DIR`` (LeRobot loads it and compares)::

    PYTHONPATH=$PWD /work/main/.venv/bin/python tests/models/smolvla/save_for_lerobot.py /tmp/smolvla_saved
    /work/lerobot-ref/bin/python tests/models/smolvla/make_fixtures.py check-saved /tmp/smolvla_saved
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from rslkit.models.smolvla.policy import SmolVLAPolicy
from rslkit.models.smolvla.tuning import LEROBOT_LORA_TARGETS
from tests.models.smolvla.fixture_policy import INSTRUCTIONS, load, raw_obs

NAME = "interleaved_1cam"


def fine_tuned() -> tuple[SmolVLAPolicy, dict[str, torch.Tensor]]:
    """The fixture policy after 3 AdamW steps of LeRobot's loss on LoRA adapters (expert q/v and the projections),
    with statistics other than the checkpoint's."""
    torch.manual_seed(0)
    policy, data = load(NAME, policy={"backbone_trainable": "lora", "lora_targets": LEROBOT_LORA_TARGETS})
    policy.obs_normalizer.set_stats(data["state_raw"].mean(0), data["state_raw"].std(0))
    policy.action_normalizer.set_stats(data["actions_raw"].mean((0, 1)), data["actions_raw"].std((0, 1)))
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    inputs = policy.normalize_inputs(raw_obs(policy, data))
    policy.train()
    for _ in range(3):
        loss = policy.lerobot_loss(inputs, data["actions_raw"], data["noise"], data["time"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return policy.eval(), data


def main(out: Path) -> None:
    policy, data = fine_tuned()
    policy.save_lerobot(out)
    with torch.no_grad():
        obs = raw_obs(policy, data)
        chunk = policy.act_chunk(obs, x0=data["noise"])
        loss = policy.lerobot_loss(policy.normalize_inputs(obs), data["actions_raw"], data["noise"], data["time"])
    keep = ("state_raw", "actions_raw", "noise", "time", *(k for k in data if k.endswith(".uint8")))
    save_file(
        {**{k: data[k] for k in keep}, "chunk_raw": chunk, "loss": loss.reshape(1)}, out / "rslkit_io.safetensors"
    )
    what = f"{NAME} after 3 LoRA steps (adapters merged on save) and new mean/std statistics"
    (out / "rslkit_io.json").write_text(json.dumps({"instructions": INSTRUCTIONS, "what": what}))
    print("saved", out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
