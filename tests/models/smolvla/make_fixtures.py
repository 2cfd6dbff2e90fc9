"""Parity fixtures for rslkit's SmolVLA, made by LeRobot's own ``SmolVLAPolicy`` (lerobot 0.4.4), offline.

Run with the throwaway reference venv of ``../shared/recipes/smolvla-reference/`` (never rslkit's venv)::

    /work/lerobot-ref/bin/python tests/models/smolvla/make_fixtures.py make
    /work/lerobot-ref/bin/python tests/models/smolvla/make_fixtures.py check-saved DIR

``make`` writes ``tests/models/smolvla/fixtures/``: a tiny SmolVLM2-class model dir (``vlm/``: config and a
word-level tokenizer, no weights) and, per configuration, a LeRobot checkpoint dir as ``save_pretrained`` and the
processor pipelines write it (``config.json``, ``model.safetensors``, ``policy_{pre,post}processor*``) plus
``io.safetensors``: model-level inputs (normalized state, images in [0, 1], token ids), fixed noise and time, the
flow loss, the sampled chunk (prefix KV cache), and raw-unit inputs with the chunk that LeRobot's pre/post-processor
pipelines give around the policy. LeRobot 0.4.4 cannot sample without its KV cache (``use_cache=False`` raises;
``made_by.json`` records the error), so rslkit's no-cache path is held to the cached chunk. Weights are rounded to
float16 values (still stored and run in float32) so that the files compress well in git.

``check-saved DIR`` loads a checkpoint that rslkit saved (``tests/models/smolvla/save_for_lerobot.py``) with
LeRobot's ``from_pretrained`` (strict) and its processors, runs the inputs stored in ``DIR/rslkit_io.safetensors``
and writes the max abs differences to ``fixtures/saved_back.json``.

Two workarounds of the recipe: an inert ``torchvision`` stub (lerobot imports it; the PyPI wheel is a CUDA build)
and ``AutoProcessor`` returning just the tokenizer (SmolVLM's processor needs torchvision's video processor).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import datasets  # noqa: E402,F401  (probes torchvision before the stub)
import diffusers  # noqa: E402,F401
import torch  # noqa: E402
import transformers  # noqa: E402


class _Stub(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda self, *a, **k: None})
        setattr(self, name, value)
        return value


for _name in (
    "torchvision",
    "torchvision.transforms",
    "torchvision.transforms.functional",
    "torchvision.transforms.v2",
    "torchvision.transforms.v2.functional",
    "torchvision.ops",
    "torchvision.models",
    "torchvision.io",
):
    _module = _Stub(_name)
    _module.__path__ = []
    sys.modules[_name] = _module
    _parent, _, _child = _name.rpartition(".")
    if _parent:
        setattr(sys.modules[_parent], _child, _module)


def _tokenizer_only(name, *args, **kwargs):
    return types.SimpleNamespace(tokenizer=transformers.AutoTokenizer.from_pretrained(name))


transformers.AutoProcessor.from_pretrained = staticmethod(_tokenizer_only)

from lerobot.configs.types import FeatureType, PolicyFeature  # noqa: E402
from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig  # noqa: E402
from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy  # noqa: E402
from lerobot.policies.smolvla.processor_smolvla import make_smolvla_pre_post_processors  # noqa: E402
from lerobot.processor import PolicyProcessorPipeline  # noqa: E402
from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SPECIAL = ["<pad>", "<unk>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<global-img>",
           "<image>", "<video>"]  # fmt: skip
WORDS = "pick place the red green blue cube block into bowl box left right up down move grasp put on a".split()
INSTRUCTIONS = ["pick the red cube", "place the green block into the blue bowl"]

CONFIGS = {
    # self-attention every 2nd layer, one camera, state 6 / action 6 padded to 8, language padded to max_length
    "interleaved_1cam": dict(
        cameras={"observation.images.top": (3, 32, 32)},
        state_dim=6,
        action_dim=6,
        extra=dict(
            self_attn_every_n_layers=2,
            pad_language_to="max_length",
            tokenizer_max_length=12,
            chunk_size=5,
            n_action_steps=5,
            max_state_dim=8,
            max_action_dim=8,
            num_steps=3,
        ),
    ),  # fmt: skip
    # cross-attention in every layer, two cameras (one 24x40, resized with padding) and one empty camera,
    # state 5 / action 4 padded to 10 / 8, language padded to the longest instruction
    "cross_2cam": dict(
        cameras={"observation.images.front": (3, 32, 32), "observation.images.wrist": (3, 24, 40)},
        state_dim=5,
        action_dim=4,
        extra=dict(
            self_attn_every_n_layers=-1,
            pad_language_to="longest",
            tokenizer_max_length=16,
            chunk_size=4,
            n_action_steps=4,
            max_state_dim=10,
            max_action_dim=8,
            num_steps=4,
            empty_cameras=1,
        ),
    ),  # fmt: skip
}


def make_vlm(out: Path) -> None:
    """A tiny SmolVLM2-class model dir: config (vision 16-d, text 32-d, 2 layers) and a word-level tokenizer."""
    out.mkdir(parents=True, exist_ok=True)
    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS + ["\n", "."])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit()])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        additional_special_tokens=SPECIAL[2:],
        extra_special_tokens={
            "fake_image_token": "<fake_token_around_image>",
            "image_token": "<image>",
            "end_of_utterance_token": "<end_of_utterance>",
            "global_image_token": "<global-img>",
        },
    )
    fast.save_pretrained(out)
    cfg = transformers.SmolVLMConfig(
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8),
        text_config=dict(model_type="llama", hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=len(vocab),
                         max_position_embeddings=256, rms_norm_eps=1e-5, pad_token_id=0),
        scale_factor=2, image_token_id=vocab["<image>"], pad_token_id=0,
    )  # fmt: skip
    cfg.save_pretrained(out)


def build(name: str, vlm: Path) -> tuple[SmolVLAPolicy, SmolVLAConfig]:
    spec = CONFIGS[name]
    cfg = SmolVLAConfig(
        vlm_model_name=str(vlm),
        load_vlm_weights=False,
        device="cpu",
        input_features={
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(spec["state_dim"],)),
            **{k: PolicyFeature(type=FeatureType.VISUAL, shape=s) for k, s in spec["cameras"].items()},
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(spec["action_dim"],))},
        resize_imgs_with_padding=(32, 32),
        num_vlm_layers=2,
        expert_width_multiplier=0.5,
        **spec["extra"],
    )
    torch.manual_seed(0)
    policy = SmolVLAPolicy(cfg).eval()
    with torch.no_grad():  # float16-representable weights: half the file size, still float32 arithmetic
        for p in policy.parameters():
            p.copy_((p * 4).half().float() / 4)  # x4 keeps small init values out of float16's subnormals
    return policy, cfg


def stats(spec: dict, g: torch.Generator) -> dict[str, dict[str, torch.Tensor]]:
    out = {}
    for key, dim in (("observation.state", spec["state_dim"]), ("action", spec["action_dim"])):
        out[key] = {"mean": torch.randn(dim, generator=g), "std": torch.rand(dim, generator=g) + 0.5,
                    "min": -torch.ones(dim) * 3, "max": torch.ones(dim) * 3}  # fmt: skip
    return out


def inputs(name: str, g: torch.Generator) -> dict[str, torch.Tensor]:
    spec = CONFIGS[name]
    b = len(INSTRUCTIONS)
    out = {"state_raw": torch.randn(b, spec["state_dim"], generator=g) * 2}
    for key, shape in spec["cameras"].items():
        out[key + ".uint8"] = torch.randint(0, 256, (b, shape[1], shape[2], 3), generator=g, dtype=torch.uint8)
    return out


def images_float(io: dict[str, torch.Tensor], cameras) -> dict[str, torch.Tensor]:
    return {k: io[k + ".uint8"].permute(0, 3, 1, 2).float() / 255.0 for k in cameras}


def run_one(name: str, vlm: Path) -> dict:
    spec = CONFIGS[name]
    policy, cfg = build(name, vlm)
    g = torch.Generator().manual_seed(len(name))
    dataset_stats = stats(spec, g)
    pre, post = make_smolvla_pre_post_processors(cfg, dataset_stats=dataset_stats)
    out = FIXTURES / name
    if out.exists():
        shutil.rmtree(out)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    config["vlm_model_name"] = "../vlm"  # the absolute path of this run means nothing elsewhere
    (out / "config.json").write_text(json.dumps(config, indent=4))
    pre_json = json.loads((out / "policy_preprocessor.json").read_text())
    for step in pre_json["steps"]:
        if "tokenizer_name" in step["config"]:
            step["config"]["tokenizer_name"] = "../vlm"
    (out / "policy_preprocessor.json").write_text(json.dumps(pre_json, indent=2))

    io = inputs(name, g)
    images = images_float(io, spec["cameras"])
    raw = {"observation.state": io["state_raw"], **images, "task": list(INSTRUCTIONS)}
    batch = pre(dict(raw))
    b, chunk, amax = len(INSTRUCTIONS), cfg.chunk_size, cfg.max_action_dim
    actions_raw = torch.randn(b, chunk, spec["action_dim"], generator=g)
    actions_n = (actions_raw - dataset_stats["action"]["mean"]) / (dataset_stats["action"]["std"] + 1e-8)
    noise = torch.randn(b, chunk, amax, generator=g)
    time = torch.tensor([0.3, 0.85])
    model_batch = {k: v for k, v in batch.items() if k.startswith("observation.")}
    with torch.no_grad():
        loss, _ = policy.forward({**model_batch, "action": actions_n}, noise=noise, time=time)
        losses = policy.model.forward(*_model_args(policy, model_batch), policy.prepare_action({"action": actions_n}),
                                      noise, time)  # fmt: skip
        sampled = policy.predict_action_chunk(dict(model_batch), noise=noise)
        policy.reset()
        chunk_raw = post(policy.predict_action_chunk(dict(model_batch), noise=noise))
        policy.reset()
        policy.config.use_cache = False
        try:  # lerobot 0.4.4's sampler without its cache fails; recorded in made_by.json, not hidden
            nocache = policy.predict_action_chunk(dict(model_batch), noise=noise)
            nocache_note = f"ran; max abs diff to the cached chunk {float((nocache - sampled).abs().max()):.3g}"
        except Exception as err:
            nocache_note = f"lerobot fails: {type(err).__name__}: {str(err)[:160]}"
        policy.config.use_cache = True
    tensors = {
        "state_n": model_batch["observation.state"].contiguous(),
        "tokens": model_batch["observation.language.tokens"].contiguous(),
        "token_mask": model_batch["observation.language.attention_mask"].contiguous(),
        "actions_raw": actions_raw,
        "actions_n": actions_n,
        "noise": noise,
        "time": time,
        "loss": loss.reshape(1),
        "losses": losses,
        "chunk": sampled.contiguous(),
        "chunk_raw": chunk_raw.contiguous(),
        **{k: v.contiguous() for k, v in io.items()},
    }
    save_file(tensors, out / "io.safetensors")
    sizes = {p.name: p.stat().st_size for p in out.iterdir()}
    print(name, f"loss {float(loss):.6f}", "no-cache:", nocache_note, sizes)
    return {"loss": float(loss), "nocache": nocache_note, "params": sum(p.numel() for p in policy.parameters())}


def _model_args(policy: SmolVLAPolicy, batch: dict) -> tuple:
    images, img_masks = policy.prepare_images(batch)
    state = policy.prepare_state(batch)
    return images, img_masks, batch["observation.language.tokens"], batch["observation.language.attention_mask"], state


def make() -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    vlm = FIXTURES / "vlm"
    if vlm.exists():
        shutil.rmtree(vlm)
    make_vlm(vlm)
    summary = {name: run_one(name, vlm) for name in CONFIGS}
    summary["lerobot"] = __import__("lerobot").__version__
    summary["transformers"] = transformers.__version__
    (FIXTURES / "made_by.json").write_text(json.dumps(summary, indent=2) + "\n")


def check_saved(directory: Path) -> None:
    """Load an rslkit-saved checkpoint with LeRobot (strict) and compare its outputs with rslkit's."""
    io = load_file(directory / "rslkit_io.safetensors")
    meta = json.loads((directory / "rslkit_io.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt"
        shutil.copytree(directory, ckpt)
        config = json.loads((ckpt / "config.json").read_text())
        config["vlm_model_name"] = str(FIXTURES / "vlm")
        (ckpt / "config.json").write_text(json.dumps(config))
        pre_json = json.loads((ckpt / "policy_preprocessor.json").read_text())
        for step in pre_json["steps"]:
            if "tokenizer_name" in step["config"]:
                step["config"]["tokenizer_name"] = str(FIXTURES / "vlm")
        (ckpt / "policy_preprocessor.json").write_text(json.dumps(pre_json))
        policy = SmolVLAPolicy.from_pretrained(ckpt, local_files_only=True, strict=True).eval()
        pre = PolicyProcessorPipeline.from_pretrained(ckpt, config_filename="policy_preprocessor.json")
        post = PolicyProcessorPipeline.from_pretrained(
            ckpt,
            config_filename="policy_postprocessor.json",
            to_transition=policy_action_to_transition,
            to_output=transition_to_policy_action,
        )
    cameras = [k for k in policy.config.image_features if not k.split(".")[-1].startswith("empty_camera")]
    images = images_float(io, cameras)
    raw = {"observation.state": io["state_raw"], **images, "task": meta["instructions"]}
    batch = {k: v for k, v in pre(dict(raw)).items() if k.startswith("observation.")}
    with torch.no_grad():
        chunk = post(policy.predict_action_chunk(dict(batch), noise=io["noise"]))
        actions_n = (io["actions_raw"] - pre.steps[-1]._tensor_stats["action"]["mean"]) / (
            pre.steps[-1]._tensor_stats["action"]["std"] + 1e-8
        )
        loss, _ = policy.forward({**batch, "action": actions_n}, noise=io["noise"], time=io["time"])
    result = {
        "checkpoint": meta["what"],
        "lerobot": __import__("lerobot").__version__,
        "loaded_strict": True,
        "chunk_max_abs_diff": float((chunk - io["chunk_raw"]).abs().max()),
        "loss_abs_diff": float((loss - io["loss"]).abs().max()),
        "chunk_max_abs": float(io["chunk_raw"].abs().max()),
    }
    print(json.dumps(result, indent=2))
    (FIXTURES / "saved_back.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"]:
        make()
    elif sys.argv[1:2] == ["check-saved"] and len(sys.argv) == 3:
        check_saved(Path(sys.argv[2]))
    else:
        raise SystemExit(__doc__)
