"""The JSON metadata an exported policy carries in ONNX ``metadata_props`` (key :data:`METADATA_KEY`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import onnx

METADATA_KEY = "rslkit"
FORMAT_VERSION = 3
"""2: future-state input (``future_state_slice``, ``max_future_offset``) and action/joint/observation names.
3: ``obs_dtypes`` (uint8 camera images) and ``instruction`` (how a VLA policy takes its language input)."""

PolicyKind = Literal["step", "recurrent", "chunk"]


@dataclass
class PolicyMetadata:
    """What a deployment needs to feed an exported policy and interpret its outputs.

    Graph inputs, in ``input_names`` order: the observation groups, then the state (``h``, and ``c`` for LSTM) of
    recurrent policies or the ``noise`` (and ``future_state``) of chunk policies. Outputs (``output_names``):
    ``actions`` (or ``chunk``), then ``h_out`` (and ``c_out``). Use these lists, not dict order, to pair names with
    tensors.
    """

    kind: PolicyKind
    """``step``: ``obs -> actions [B, A]``; ``recurrent``: plus state in and out; ``chunk``: ``obs, noise[,
    future_state] -> [B, Ta, A]``."""
    algorithm: str
    obs_groups: dict[str, list[int]]
    """Observation group name -> per-sample shape (``[D]``), in graph input order."""
    action_dim: int
    input_names: list[str]
    output_names: list[str]
    task: str | None = None
    control_rate_hz: float | None = None
    """Env steps per second, where the task config defines its time step."""
    action_space: str = "env"
    """Actions are what ``env.step`` takes (e.g. pendulum: normalized torque in ``[-1, 1]``)."""
    state_shapes: dict[str, list[int]] = field(default_factory=dict)
    """Recurrent state input name -> shape with the batch as ``-1`` (``[L, -1, H]``)."""
    rnn_type: str | None = None
    chunk_length: int | None = None
    num_flow_steps: int | None = None
    """``K`` Euler steps unrolled in the graph (chunk policies)."""
    noise_shape: list[int] | None = None
    """Per-sample shape of the ``noise`` input ``[Ta, A]`` (chunk policies)."""
    future_state_slice: list[int] | None = None
    """``[start, stop]``: observation columns of the robot state, for chunk policies with a ``future_state [B,
    stop - start]`` input (VLASH future-state conditioning); None: no such input."""
    max_future_offset: int = 0
    """``D``: the largest offset (ticks between observation and chunk start) the policy was trained with;
    deployment refuses larger inference delays."""
    action_names: list[str] | None = None
    """What each of the ``action_dim`` actions drives (from the task), e.g. joint position targets."""
    joint_names: list[str] | None = None
    """Robot joints commanded by the actions, in action order (from the task); None when the task names none."""
    obs_names: dict[str, list[str]] | None = None
    """Observation group -> a name per column (from the task)."""
    obs_dtypes: dict[str, str] = field(default_factory=dict)
    """Observation group -> numpy dtype name where it is not float32 (``uint8`` for ``camera_<name>`` images
    ``[H, W, 3]``)."""
    instruction: dict[str, Any] | None = None
    """VLA policies: how the instruction enters the graph, ``{"group": "instruction", "input": "embedding",
    "dim": E}``: a float32 ``[B, E]`` sentence embedding computed outside the graph with the encoder the policy
    was trained with; ``"texts"``: the instructions whose embeddings the model stores (``metadata_props`` key
    ``rslkit.instructions``, :mod:`rslkit.deploy.instructions`), when it has a table. None: the policy takes no
    language."""
    format_version: int = FORMAT_VERSION

    @property
    def group_names(self) -> list[str]:
        """Observation groups in graph input order."""
        return [n for n in self.input_names if n in self.obs_groups]

    @property
    def state_names(self) -> list[str]:
        """Recurrent state inputs in graph order (``h`` or ``h, c``); their outputs are ``<name>_out``."""
        return [n for n in self.input_names if n in self.state_shapes]

    @property
    def future_state_dim(self) -> int:
        """Size ``S`` of the ``future_state`` input (0: none)."""
        if self.future_state_slice is None:
            return 0
        return int(self.future_state_slice[1] - self.future_state_slice[0])

    def to_json(self) -> str:
        """Serialized form stored in the ONNX model."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PolicyMetadata:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: for a newer format version or malformed content.
        """
        try:
            data: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"rslkit metadata is not valid JSON: {err}") from None
        version = data.get("format_version", 0)
        if version > FORMAT_VERSION:
            raise ValueError(
                f"This policy was exported with metadata format {version}; this rslkit reads up to "
                f"{FORMAT_VERSION}. Upgrade rslkit."
            )
        try:
            return cls(**data)
        except TypeError as err:
            raise ValueError(f"Malformed rslkit metadata: {err}") from None


def write_metadata(model: onnx.ModelProto, meta: PolicyMetadata) -> None:
    """Store ``meta`` in ``model.metadata_props`` (replacing an earlier entry)."""
    for prop in list(model.metadata_props):
        if prop.key == METADATA_KEY:
            model.metadata_props.remove(prop)
    entry = model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, meta.to_json()


def read_metadata(props: dict[str, str], source: str = "the model") -> PolicyMetadata:
    """Metadata from a ``{key: value}`` map (``onnxruntime`` ``custom_metadata_map`` or ONNX ``metadata_props``).

    Raises:
        ValueError: when the model was not exported by rslkit.
    """
    if METADATA_KEY not in props:
        raise ValueError(
            f"{source} has no '{METADATA_KEY}' metadata; export it in the training venv with "
            "`.venv/bin/python -m rslkit.export --checkpoint C --out policy.onnx`."
        )
    return PolicyMetadata.from_json(props[METADATA_KEY])
