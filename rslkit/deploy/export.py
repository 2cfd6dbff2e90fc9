"""Export trained policies to ONNX (the command line, ``python -m rslkit.export``, is :mod:`rslkit.cli.export`).

Supported: PPO actor-critics (Gaussian / tanh-Gaussian / Beta / categorical heads, deterministic mode, env-space
actions; feed-forward or GRU/LSTM with explicit state), SAC actors (``tanh(mu)``), distilled students (a frame, a
window of frames or a GRU/LSTM, the window or memory as explicit state), and flow chunk policies
(flow-bc, ReinFlow; ``K`` Euler steps unrolled, initial noise as an input, and a ``future_state`` input for
policies trained with VLASH offsets). Normalizers are inside the graph; the
metadata (:class:`~rslkit.deploy.metadata.PolicyMetadata`) travels in ``metadata_props``.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import torch
import torch.nn as nn

from rslkit.data.lerobot_meta import read_tasks
from rslkit.deploy.graphs import FlowChunkGraph, PPORecurrentGraph, PPOStepGraph, SACStepGraph, VLAChunkGraph
from rslkit.deploy.instructions import InstructionTable, write_instructions
from rslkit.deploy.metadata import PolicyMetadata, write_metadata
from rslkit.deploy.student_graph import StudentGraph
from rslkit.envs.vec_env import control_period
from rslkit.models.actor_critic import ActorCritic
from rslkit.models.flow.policy import FlowPolicy
from rslkit.models.normalizer import EmpiricalNormalization
from rslkit.models.recurrent import Memory
from rslkit.models.sac_networks import SACModel
from rslkit.models.student_teacher import StudentTeacher
from rslkit.models.text_encoder import MINILM, SentenceEncoder
from rslkit.models.vla.policy import INSTRUCTION_GROUP, VLAPolicy
from rslkit.recipes import load_run
from rslkit.runners.base import BaseRunner

DEFAULT_OPSET = 17
MIN_OPSET = 17
"""The lowest ONNX opset an export may use (LayerNormalization is an opset-17 operator)."""
MAX_OPSET = 20
"""The highest: the TorchScript-based exporter (``dynamo=False``) implements operators up to opset 20 (torch's
``ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET``); a higher number would only relabel opset-20 graphs, and past the torch
build's own limit it fails inside ``torch.onnx.export``."""


def check_opset(opset: int) -> None:
    """Refuse an ONNX opset outside ``[MIN_OPSET, MAX_OPSET]`` before anything is loaded or traced.

    Raises:
        ValueError: naming the ``--opset`` flag and the supported range.
    """
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(
            f"--opset must be between {MIN_OPSET} and {MAX_OPSET} (the opsets the TorchScript ONNX exporter "
            f"implements; {MIN_OPSET} brings LayerNormalization), got {opset}."
        )


@dataclass
class ExportPlan:
    """A traced module with its example inputs, names, dynamic axes and metadata."""

    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    dynamic_axes: dict[str, dict[int, str]]
    metadata: PolicyMetadata
    instructions: InstructionTable | None = field(default=None)
    """VLA policies: instruction text -> embedding, stored beside the metadata (None: no table)."""


def _group_dims(normalizers: nn.ModuleDict, groups: list[str], first_in: int, obs_dims: dict[str, int] | None):
    if obs_dims is not None:
        missing = [g for g in groups if g not in obs_dims]
        if missing:
            raise ValueError(f"obs_dims lacks the actor groups {missing}; pass a size for each of {groups}.")
        return {g: int(obs_dims[g]) for g in groups}
    dims: dict[str, int] = {}
    for g in groups:
        norm = normalizers[g]
        if isinstance(norm, EmpiricalNormalization):
            dims[g] = int(norm.mean.shape[0])
    if len(dims) < len(groups):
        if len(groups) == 1:
            return {groups[0]: int(first_in)}
        raise ValueError(
            f"Cannot infer the sizes of observation groups {groups} (no normalization); pass obs_dims={{group: dim}}."
        )
    return dims


def _first_linear_in(module: nn.Module) -> int:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            return int(m.in_features)
    raise ValueError("The actor has no Linear layer.")


def plan_export(
    policy: nn.Module,
    algorithm: str,
    obs_dims: dict[str, int] | None = None,
    task: str | None = None,
    control_rate_hz: float | None = None,
    num_flow_steps: int | None = None,
    names: dict[str, Any] | None = None,
    instructions: InstructionTable | Mapping[str, Any] | None = None,
) -> ExportPlan:
    """Wrap ``policy`` (ActorCritic, SACModel, FlowPolicy or VLAPolicy) for export, with batch-1 example inputs.

    Args:
        policy: the trained model (its weights are shared, not copied; it is put in eval mode).
        algorithm: name stored in the metadata (``ppo``, ``sac``, ``flow-bc``, ``reinflow``).
        obs_dims: observation group -> size; inferred from normalizers where possible.
        task: task name for the metadata.
        control_rate_hz: env steps per second for the metadata.
        num_flow_steps: Euler steps ``K`` to unroll (flow policies; default the policy's own; refused for the
            others).
        names: ``action_names`` / ``joint_names`` / ``obs_names`` for the metadata (see :func:`env_names`).
        instructions: VLA policies: instruction text -> raw sentence embedding ``[E]`` (or an
            :class:`~rslkit.deploy.instructions.InstructionTable`), stored in the model so that a robot without
            torch can pass the text.

    Raises:
        ValueError: for an unsupported policy type, missing sizes, ``num_flow_steps`` for a policy without a flow
            chain, or instructions for a policy without language input or of the wrong embedding size.
    """
    policy.eval()
    if num_flow_steps is not None and not isinstance(policy, (FlowPolicy, VLAPolicy)):
        raise ValueError(
            f"--flow_steps sets the Euler steps of a flow policy (flow-bc, reinflow, vla-bc, vla-reinflow); this "
            f"{algorithm} policy ({type(policy).__name__}) has no flow chain: export it without --flow_steps."
        )

    def metadata(**fields: Any) -> PolicyMetadata:
        extra = {k: v for k, v in (names or {}).items() if k != "obs_names"}
        if names and names.get("obs_names"):
            extra["obs_names"] = {g: v for g, v in names["obs_names"].items() if g in fields["obs_groups"]}
        return PolicyMetadata(algorithm=algorithm, task=task, control_rate_hz=control_rate_hz, **extra, **fields)

    if isinstance(policy, ActorCritic):
        groups = list(policy.obs_groups["actor"])
        first_in = (
            policy.actor_memory.rnn.input_size if policy.actor_memory is not None else _first_linear_in(policy.actor)
        )
        dims = _group_dims(policy.normalizers, groups, first_in, obs_dims)
        num_actions = int(policy.dist.raw_dim)
        examples = tuple(torch.zeros(1, dims[g]) for g in groups)
        axes = {g: {0: "batch"} for g in groups}
        if policy.actor_memory is None:
            module: nn.Module = PPOStepGraph(policy)
            axes["actions"] = {0: "batch"}
            meta = metadata(
                kind="step",
                obs_groups={g: [dims[g]] for g in groups},
                action_dim=num_actions,
                input_names=groups,
                output_names=["actions"],
            )
            return ExportPlan(module, examples, axes, meta)
        mem = policy.actor_memory
        rec = PPORecurrentGraph(policy)
        state_names = ["h", "c"] if mem.is_lstm else ["h"]
        state = tuple(torch.zeros(mem.num_layers, 1, mem.hidden_dim) for _ in state_names)
        outs = [f"{n}_out" for n in state_names]
        for n in state_names + outs:
            axes[n] = {1: "batch"}
        axes["actions"] = {0: "batch"}
        meta = metadata(
            kind="recurrent",
            obs_groups={g: [dims[g]] for g in groups},
            action_dim=num_actions,
            input_names=groups + state_names,
            output_names=["actions", *outs],
            state_shapes={n: [mem.num_layers, -1, mem.hidden_dim] for n in state_names},
            rnn_type="lstm" if mem.is_lstm else "gru",
        )
        return ExportPlan(rec, examples + state, axes, meta)
    if isinstance(policy, SACModel):
        groups = list(policy.actor_groups)
        dims = _group_dims(policy.normalizers, groups, _first_linear_in(policy.actor), obs_dims)
        last = policy.actor.net[-1]
        assert isinstance(last, nn.Linear)
        num_actions = last.out_features // 2
        axes = {g: {0: "batch"} for g in groups}
        axes["actions"] = {0: "batch"}
        meta = metadata(
            kind="step",
            obs_groups={g: [dims[g]] for g in groups},
            action_dim=num_actions,
            input_names=groups,
            output_names=["actions"],
        )
        return ExportPlan(SACStepGraph(policy), tuple(torch.zeros(1, dims[g]) for g in groups), axes, meta)
    if isinstance(policy, FlowPolicy):
        graph = FlowChunkGraph(policy, num_flow_steps)
        g = policy.cfg.obs_group
        fs = policy.state_slice
        meta = metadata(
            kind="chunk",
            obs_groups={g: [policy.obs_dim]},
            action_dim=policy.action_dim,
            input_names=[g, "noise"] + (["future_state"] if fs is not None else []),
            output_names=["chunk"],
            chunk_length=policy.horizon,
            num_flow_steps=graph.num_steps,
            noise_shape=[policy.horizon, policy.action_dim],
            future_state_slice=[fs.start, fs.stop] if fs is not None else None,
            max_future_offset=policy.max_future_offset,
        )
        flow_examples = [torch.zeros(1, policy.obs_dim), torch.zeros(1, policy.horizon, policy.action_dim)]
        axes = {g: {0: "batch"}, "noise": {0: "batch"}, "chunk": {0: "batch"}}
        if fs is not None:
            flow_examples.append(torch.zeros(1, policy.future_state_dim))
            axes["future_state"] = {0: "batch"}
        return ExportPlan(graph, tuple(flow_examples), axes, meta)
    if isinstance(policy, StudentTeacher):
        return _plan_student(StudentGraph(policy), policy.obs_dims, policy.num_actions, metadata)
    if isinstance(policy, VLAPolicy):
        plan = _plan_vla(policy, num_flow_steps, metadata)
        plan.instructions = _instruction_table(policy, instructions)
        if plan.instructions is not None and plan.metadata.instruction is not None:
            plan.metadata.instruction["texts"] = plan.instructions.texts  # the table itself: INSTRUCTIONS_KEY
        return plan
    if instructions:
        raise ValueError(f"Only VLA policies take instructions; this is a {type(policy).__name__}.")
    raise ValueError(
        f"Cannot export a {type(policy).__name__}; supported: ActorCritic (PPO), SACModel (SAC), FlowPolicy, "
        "VLAPolicy, StudentTeacher (distillation)."
    )


def _plan_student(graph: StudentGraph, dims: dict[str, int], num_actions: int, metadata: Any) -> ExportPlan:
    """The export plan of a distilled student: a ``step`` policy, or a ``recurrent`` one whose state is its memory
    (a window of frames or a GRU/LSTM), fed and reset like a recurrent PPO policy's."""
    groups, state_names = graph.groups, graph.state_names()
    examples = tuple(torch.zeros(1, dims[g]) for g in groups)
    axes = {g: {0: "batch"} for g in groups} | {"actions": {0: "batch"}}
    obs_groups = {g: [dims[g]] for g in groups}
    if not state_names:
        meta = metadata(kind="step", obs_groups=obs_groups, action_dim=num_actions, input_names=groups,
                        output_names=["actions"])  # fmt: skip
        return ExportPlan(graph, examples, axes, meta)
    shape = graph.state_shape()
    state = tuple(torch.zeros([1 if d == -1 else d for d in shape]) for _ in state_names)
    outs = [f"{n}_out" for n in state_names]
    axes |= {n: {1: "batch"} for n in state_names + outs}
    memory = graph.memory
    meta = metadata(
        kind="recurrent",
        obs_groups=obs_groups,
        action_dim=num_actions,
        input_names=groups + state_names,
        output_names=["actions", *outs],
        state_shapes={n: shape for n in state_names},
        rnn_type="history" if not isinstance(memory, Memory) else "lstm" if memory.is_lstm else "gru",
    )
    return ExportPlan(graph, examples + state, axes, meta)


def _plan_vla(policy: VLAPolicy, num_flow_steps: int | None, metadata: Any) -> ExportPlan:
    """The export plan of a VLA policy: state, instruction embedding and uint8 camera inputs, then noise."""
    graph = VLAChunkGraph(policy, num_flow_steps)
    c = policy.cfg
    h, w = c.image_size
    shapes: dict[str, list[int]] = {c.state_group: [policy.obs_dim]}
    if c.language_dim > 0:
        shapes[INSTRUCTION_GROUP] = [c.language_dim]
    cameras = {g: [h, w, 3] for g in graph.groups if g.startswith("camera_")}
    shapes |= cameras
    examples = [torch.zeros(1, *shapes[g], dtype=torch.uint8 if g in cameras else torch.float32) for g in graph.groups]
    examples.append(torch.zeros(1, policy.horizon, policy.action_dim))
    axes = {g: {0: "batch"} for g in [*graph.groups, "noise", "chunk"]}
    meta = metadata(
        kind="chunk",
        obs_groups=shapes,
        action_dim=policy.action_dim,
        input_names=[*graph.groups, "noise"],
        output_names=["chunk"],
        chunk_length=policy.horizon,
        num_flow_steps=graph.num_steps,
        noise_shape=[policy.horizon, policy.action_dim],
        obs_dtypes={g: "uint8" for g in cameras},
        instruction=(
            {"group": INSTRUCTION_GROUP, "input": "embedding", "dim": c.language_dim} if c.language_dim > 0 else None
        ),
    )
    return ExportPlan(graph, tuple(examples), axes, meta)


def _instruction_table(
    policy: VLAPolicy, instructions: InstructionTable | Mapping[str, Any] | None
) -> InstructionTable | None:
    if not instructions:
        return None
    if policy.cfg.language_dim == 0:
        raise ValueError("This VLA policy takes no instruction (language_dim 0); export it without instructions.")
    table = instructions if isinstance(instructions, InstructionTable) else InstructionTable(instructions)
    if table.dim != policy.cfg.language_dim:
        raise ValueError(
            f"The instruction embeddings have {table.dim} values but the policy takes {policy.cfg.language_dim} "
            "(language_dim): embed them with the text encoder the policy was trained with."
        )
    return table


EXTERNAL_DATA_BYTES = 1 << 30
"""Weights above this many bytes go to a file beside the model (protobuf caps one ``.onnx`` file at 2 GB)."""


def external_data_path(out: str | Path) -> Path:
    """Where the weights of a model exported with external data live: ``<out>.data`` beside ``out``."""
    out = Path(out)
    return out.with_name(out.name + ".data")


def export_plan(
    plan: ExportPlan, out: str | Path, opset: int = DEFAULT_OPSET, external_data: bool | None = None
) -> onnx.ModelProto:
    """Trace ``plan.module`` with the TorchScript-based exporter, attach the metadata, check and save to ``out``.

    Args:
        plan: what to export.
        out: the ``.onnx`` file.
        opset: ONNX opset, ``MIN_OPSET`` to ``MAX_OPSET`` (17-20).
        external_data: write the weights to :func:`external_data_path` (``<out>.data``), the graph and metadata
            to ``out``; ONNX Runtime reads both when the two files sit side by side. None: only when the module's
            parameters and buffers exceed :data:`EXTERNAL_DATA_BYTES` (a pretrained VLA backbone; one protobuf file
            holds at most 2 GB).

    Returns:
        The saved model (already passed ``onnx.checker.check_model``; with external data, its weights are not
        loaded into it).
    """
    check_opset(opset)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer warnings
        torch.onnx.export(
            plan.module,
            plan.example_inputs,
            str(Path(tmp) / "graph.onnx"),
            input_names=plan.metadata.input_names,
            output_names=plan.metadata.output_names,
            dynamic_axes=plan.dynamic_axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
        if external_data is None:
            tensors = [*plan.module.parameters(), *plan.module.buffers()]
            external_data = sum(t.numel() * t.element_size() for t in tensors) > EXTERNAL_DATA_BYTES
        model = onnx.load(str(Path(tmp) / "graph.onnx"))  # the tracer's own external files are read in here
    write_metadata(model, plan.metadata)
    if plan.instructions is not None:
        write_instructions(model, plan.instructions)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = external_data_path(out)
    data.unlink(missing_ok=True)  # a stale file would be appended to
    if not external_data:
        onnx.checker.check_model(model)
        onnx.save(model, str(out))
        return model
    onnx.save(model, str(out), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name,
              size_threshold=1024)  # fmt: skip
    onnx.checker.check_model(str(out))  # by path: the checker reads the weights beside it
    return model


def export_policy(policy: nn.Module, out: str | Path, algorithm: str, **kwargs: Any) -> PolicyMetadata:
    """:func:`plan_export` then :func:`export_plan`; returns the metadata written."""
    opset = kwargs.pop("opset", DEFAULT_OPSET)
    external_data = kwargs.pop("external_data", None)
    plan = plan_export(policy, algorithm, **kwargs)
    export_plan(plan, out, opset, external_data)
    return plan.metadata


def load_checkpoint_policy(
    checkpoint: str | Path, task: str | None = None, instructions: Sequence[str] = ()
) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the run of a checkpoint with one env (:func:`rslkit.recipes.load_run`) and return its policy.

    Args:
        checkpoint: the checkpoint file or run directory.
        task: the task name, when the checkpoint lacks it.
        instructions: VLA runs: instructions to embed beside the training ones (:func:`vla_instructions`).

    Returns:
        ``(policy, info)`` with ``info`` keys ``algorithm``, ``task``, ``control_rate_hz``, ``obs_dims``, the
        env's names (:func:`env_names`) and, for VLA runs, ``instructions`` (an :class:`InstructionTable`).

    Raises:
        ValueError: when the checkpoint names no task and none is given, or the task differs; ``instructions`` for
            a policy without language input; see :func:`vla_instructions`.
    """
    env, runner, saved = load_run(checkpoint, num_envs=1, device="cpu", task=task)
    if saved["algorithm"] == "dsrl":  # runner.policy is only the latent actor: exporting it alone would be wrong
        raise ValueError(
            "A DSRL policy is its latent actor followed by the frozen flow sampler, which ONNX export does not compose "
            "yet; deploy it with play.py, or export the pretrained policy (agent.pretrained of the run)."
        )
    period = control_period(env)
    obs = env.get_observations()
    info = {
        "algorithm": saved["algorithm"],
        "task": saved.get("task") or task,
        "control_rate_hz": 1.0 / period if period else None,
        "obs_dims": {k: int(obs[k].shape[-1]) for k in obs.keys() if obs[k].dim() == 2},
    }
    info.update(env_names(env))
    if saved["algorithm"] in ("reinflow", "vla-reinflow"):
        info["num_flow_steps"] = int(runner.alg.chain.num_steps)
    policy = runner.policy
    if isinstance(policy, VLAPolicy) and policy.cfg.language_dim > 0:
        info["instructions"] = vla_instructions(runner, policy.cfg.language_dim, instructions)
    elif instructions:
        raise ValueError(
            f"--instructions is for VLA policies that read language; this checkpoint is {saved['algorithm']}."
        )
    return policy, info


def training_instructions(runner: BaseRunner) -> list[str]:
    """The instructions a VLA run (vla-bc, or a run fine-tuning one) was trained and evaluated on: the env's
    ``instructions``, the run's ``agent.instruction`` and its dataset's tasks (``agent.dataset``, when the directory
    is still there), without duplicates."""
    texts = [str(t) for t in getattr(runner.env, "instructions", None) or []]
    instruction = getattr(runner.cfg, "instruction", "")
    if instruction:
        texts.append(str(instruction))
    dataset = getattr(runner.cfg, "dataset", "")
    if dataset and (Path(dataset) / "meta").is_dir():
        texts += read_tasks(Path(dataset))
    return list(dict.fromkeys(texts))


def vla_instructions(runner: BaseRunner, language_dim: int, extra: Sequence[str] = ()) -> InstructionTable:
    """The training instructions (:func:`training_instructions`) and ``extra`` embedded with the run's text
    encoder (``agent.text_encoder``; MiniLM when the run names none), as the runner embeds them; ``language_dim``
    (the policy's) is checked against the encoder's size.

    Raises:
        ValueError: when there is no instruction at all (pass some with ``--instructions``), or the encoder's size
            is not the policy's ``language_dim``.
    """
    texts = list(dict.fromkeys([*training_instructions(runner), *(str(t) for t in extra)]))
    if not texts:
        raise ValueError(
            "The run names no instruction (no env.instructions, agent.instruction or dataset tasks); pass the "
            'instructions the robot will be given: --instructions "TEXT" ...'
        )
    name = str(getattr(runner.cfg, "text_encoder", "") or MINILM)
    encoder = SentenceEncoder(name)
    if encoder.dim != language_dim:
        raise ValueError(
            f"The text encoder {name!r} embeds into {encoder.dim} dimensions but the policy reads {language_dim}; "
            "the run's agent.text_encoder must be the encoder it was trained with."
        )
    return InstructionTable(dict(zip(texts, encoder.encode(texts).numpy())), name)


def env_names(env: Any) -> dict[str, Any]:
    """The optional ``action_names``, ``joint_names`` and ``observation_names`` of an env (see ``VecEnv``), checked
    against its sizes, as metadata fields (``obs_names`` for the observation names).

    Raises:
        ValueError: a name list does not match the size it names.
    """
    out: dict[str, Any] = {}
    for attr, key in (("action_names", "action_names"), ("joint_names", "joint_names")):
        names = getattr(env, attr, None)
        if names is not None:
            if len(names) != env.num_actions:
                raise ValueError(f"The task's {attr} has {len(names)} entries for {env.num_actions} actions: {names}.")
            out[key] = [str(n) for n in names]
    obs_names = getattr(env, "observation_names", None)
    if obs_names is not None:
        obs = env.get_observations()
        for group, names in obs_names.items():
            if group not in obs.keys() or obs[group].shape[-1] != len(names):
                size = obs[group].shape[-1] if group in obs.keys() else "no such group"
                raise ValueError(f"The task's observation_names['{group}'] has {len(names)} names ({size} columns).")
        out["obs_names"] = {g: [str(n) for n in names] for g, names in obs_names.items()}
    return out


def export_checkpoint(
    checkpoint: str | Path,
    out: str | Path,
    task: str | None = None,
    num_flow_steps: int | None = None,
    opset: int = DEFAULT_OPSET,
    instructions: Sequence[str] = (),
    external_data: bool | None = None,
) -> PolicyMetadata:
    """Export the deployable policy of an rslkit checkpoint (any algorithm of the runner registry) to ``out``
    (weights in ``<out>.data`` beside it with ``external_data``, or automatically above 1 GiB: :func:`export_plan`).

    VLA runs also store an instruction table (the training instructions and ``instructions``, embedded with the
    run's text encoder) in the model; read it back with :attr:`OnnxPolicy.instructions
    <rslkit.deploy.onnx_policy.OnnxPolicy.instructions>`.
    """
    policy, info = load_checkpoint_policy(checkpoint, task, instructions)
    return export_policy(
        policy,
        out,
        info["algorithm"],
        obs_dims=info["obs_dims"],
        task=info["task"],
        control_rate_hz=info["control_rate_hz"],
        num_flow_steps=info.get("num_flow_steps") if num_flow_steps is None else num_flow_steps,
        names={k: info[k] for k in ("action_names", "joint_names", "obs_names") if k in info},
        opset=opset,
        instructions=info.get("instructions"),
        external_data=external_data,
    )
