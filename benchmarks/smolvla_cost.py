"""Full-size SmolVLA cost on this machine: parameters, peak RSS and seconds per BC update, chunk latency.

The real sizes (SmolVLM2-500M-Video-Instruct's config written locally, SmolVLA's defaults: 16 of 32 text layers,
expert at 0.75 width, chunk 50, 10 Euler steps, 512 px images), random weights (no VLA or VLM weights ship on
PyPI; cost does not depend on the values). Each mode runs in its own child process (peak RSS per mode):

- ``full``: the VLM and the expert train (LeRobot's ``train_expert_only=false``, ``freeze_vision_encoder=false``);
- ``expert-only``: LeRobot's defaults (the VLM frozen; the expert, projections and state projection train);
- ``lora``: only LoRA adapters (rank 8) on LeRobot's default targets train;
- ``latency``: one chunk at batch 1, 10 Euler steps, with the prefix KV cache and without it.

An update is one ``FlowBC.update`` (rslkit's vla-bc step: rectified-flow loss, AdamW, gradient clipping and the
EMA copy, which holds a second set of weights) at ``--batch`` 4 on random images, state and actions::

    PYTHONPATH=$PWD python benchmarks/smolvla_cost.py            # ~10-20 min on 2 cores
    PYTHONPATH=$PWD python benchmarks/smolvla_cost.py --image-size 256 --modes expert-only latency

``benchmarks/gpu_smolvla.py`` runs the same on CUDA with bf16 autocast.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

MODES = ("full", "expert-only", "lora", "latency")
TOKENIZER = C.REPO_ROOT / "tests" / "models" / "smolvla" / "fixtures" / "vlm"
"""A small word-level tokenizer (the parity fixtures'); the text config keeps SmolVLM2's 49,280-token vocabulary."""


def write_vlm(directory: Path, image_size: int) -> Path:
    """SmolVLM2-500M-Video-Instruct's architecture as a local config (+ a tokenizer), no weights."""
    from transformers import SmolVLMConfig

    directory.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, directory / name)
    config = SmolVLMConfig(
        vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                           image_size=image_size, patch_size=16),
        text_config=dict(model_type="llama", hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                         num_attention_heads=15, num_key_value_heads=5, head_dim=64, vocab_size=49280,
                         max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0),
        scale_factor=4, image_token_id=49190,
    )  # fmt: skip
    config.save_pretrained(directory)
    return directory


def build_policy(spec: dict[str, Any]) -> Any:
    """A full-size SmolVLA from scratch for ``spec`` (mode, image size, cameras, device, bf16)."""
    from rslkit.models.smolvla.policy import SmolVLAPolicy
    from rslkit.models.smolvla.settings import SmolVLACfg
    from rslkit.models.smolvla.tuning import LEROBOT_LORA_TARGETS
    from rslkit.models.vla.config import VLAPolicyCfg

    mode = spec["mode"]
    settings = SmolVLACfg(train_expert_only=mode != "full", freeze_vision_encoder=mode != "full", bf16=spec["bf16"],
                          gradient_checkpointing=spec.get("gradient_checkpointing", False))  # fmt: skip
    cameras = tuple(f"camera{i}" for i in range(spec["cameras"]))
    cfg = VLAPolicyCfg(backbone="smolvla", backbone_path=spec["vlm_dir"], cameras=cameras, horizon=50,
                       num_inference_steps=10, vlm_layers=16, smolvla=settings,
                       image_size=(spec["image_size"], spec["image_size"]))  # fmt: skip
    if mode == "lora":
        cfg.backbone_trainable, cfg.lora_targets = "lora", LEROBOT_LORA_TARGETS
    return SmolVLAPolicy(6, 6, cfg)


def random_batch(policy: Any, batch: int, image_size: int, device: str) -> Any:
    """Raw observation groups ``[batch]`` (uint8 images, state, a tokenized instruction) for ``policy``."""
    import torch
    from tensordict import TensorDict

    from rslkit.envs.camera_groups import camera_group
    from rslkit.models.vla.policy import INSTRUCTION_GROUP

    instruction = policy.encode_instructions(["pick the red cube and put it into the blue bowl"] * batch)
    groups = {"policy": torch.randn(batch, 6), INSTRUCTION_GROUP: instruction}
    for camera in policy.cameras:
        groups[camera_group(camera)] = torch.randint(0, 256, (batch, image_size, image_size, 3), dtype=torch.uint8)
    return TensorDict(groups, batch_size=[batch]).to(device)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _peak_gpu_mib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """One mode's measurement (in a child process)."""
    import torch

    from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg

    torch.manual_seed(0)
    device = spec["device"]
    t0 = time.perf_counter()
    policy = build_policy(spec)
    out: dict[str, Any] = {"build_s": time.perf_counter() - t0}
    out["params_total"] = sum(p.numel() for p in policy.parameters())
    out["params_trainable"] = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    if spec["mode"] == "latency":
        policy = policy.to(device).eval()
        obs = random_batch(policy, 1, spec["image_size"], device)
        for use_cache in (True, False):
            policy.cfg.smolvla.use_cache = use_cache
            times = []
            with torch.no_grad():
                for _ in range(spec["repeats"] + 1):
                    _sync(device)
                    t0 = time.perf_counter()
                    policy.act_chunk(obs)
                    _sync(device)
                    times.append(time.perf_counter() - t0)
            out[f"chunk_s_cache_{'on' if use_cache else 'off'}"] = statistics.median(times[1:])
            out[f"chunk_s_cache_{'on' if use_cache else 'off'}_all"] = times
    else:
        alg = FlowBC(policy, FlowBCCfg(learning_rate=1e-4, batch_size=spec["batch"]), device)
        obs = random_batch(policy, spec["batch"], spec["image_size"], device)
        actions = torch.randn(spec["batch"], 50, 6, device=device)
        times = []
        for _ in range(spec["repeats"] + 1):
            _sync(device)
            t0 = time.perf_counter()
            alg.update(obs, actions)
            _sync(device)
            times.append(time.perf_counter() - t0)
        out["update_s"] = statistics.median(times[1:])
        out["update_s_all"] = times
    out["peak_gpu_mib"] = _peak_gpu_mib(device)
    out["peak_rss_mib"] = C.peak_rss_mib()
    return out


def main(argv: list[str] | None = None, device: str = "cpu", bf16: bool = False, name: str = "smolvla_cost") -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--image-size", type=int, default=512, help="camera images and the vision encoder's size")
    parser.add_argument("--cameras", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats after one warm-up")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per child (2 ran 20x slower than 1 on 2 shared cores)"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per mode")
    parser.add_argument("--note", default="", help="what else loaded the machine")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        import torch

        spec = json.loads(args.child)
        torch.set_num_threads(spec["threads"])
        C.write_child_result(args.result, {**spec, **run(spec)})
        return
    with tempfile.TemporaryDirectory() as tmp:
        vlm_dir = str(write_vlm(Path(tmp) / "smolvlm2-500m", args.image_size))
        runs = []
        for mode in args.modes:
            spec = {"run_id": mode, "mode": mode, "vlm_dir": vlm_dir, "image_size": args.image_size,
                    "cameras": args.cameras, "batch": args.batch, "repeats": args.repeats, "threads": args.threads,
                    "device": device, "bf16": bf16}  # fmt: skip
            result = C.run_child(str(Path(__file__).resolve().parent / Path(sys.argv[0]).name), spec, args.timeout)
            runs.append({**spec, **result})
            print(json.dumps({k: v for k, v in runs[-1].items() if not k.endswith("_all")}), flush=True)
    rows = [[r["mode"], C.fmt(r.get("params_total", 0) / 1e6), C.fmt(r.get("params_trainable", 0) / 1e6),
             C.fmt(r.get("peak_rss_mib")), C.fmt(r.get("update_s"), ".2f"), C.fmt(r.get("chunk_s_cache_on"), ".2f"),
             C.fmt(r.get("chunk_s_cache_off"), ".2f")] for r in runs]  # fmt: skip
    C.print_table(["mode", "params M", "trainable M", "peak RSS MiB", "s/update", "chunk s (cache)",
                   "chunk s (no cache)"], rows)  # fmt: skip
    payload = {"meta": {**C.machine_info(["torch", "transformers", "peft"]), "note": args.note}, "args": vars(args),
               "device": device, "bf16": bf16, "runs": runs}  # fmt: skip
    print("wrote", C.write_results(name, payload, args.out))


if __name__ == "__main__":
    main()
