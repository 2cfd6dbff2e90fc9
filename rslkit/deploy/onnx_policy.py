"""Run an exported policy with ONNX Runtime: validated inputs, recurrent state kept, actions or chunks out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rslkit.deploy.future_state import ConditionedObservation
from rslkit.deploy.instructions import ADD_HINT, InstructionTable, read_instructions
from rslkit.deploy.metadata import PolicyMetadata, read_metadata


def _import_ort() -> Any:
    try:
        import onnxruntime as ort
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("OnnxPolicy needs onnxruntime: pip install onnxruntime") from err
    return ort


def _load_errors(ort: Any) -> tuple[type[BaseException], ...]:
    """ONNX Runtime's exceptions for a file that is not a loadable model (truncated, corrupt, not ONNX)."""
    state = ort.capi.onnxruntime_pybind11_state
    names = ("InvalidProtobuf", "InvalidArgument", "InvalidGraph", "NoModel", "Fail")
    return tuple(getattr(state, n) for n in names if isinstance(getattr(state, n, None), type))


class OnnxPolicy:
    """An rslkit ONNX policy (from :mod:`rslkit.deploy.export`) in an ONNX Runtime CPU session.

    Call with observations (a ``{group: array [B, D_g]}`` mapping, or one array when the policy reads one group;
    an unbatched ``[D_g]`` sample gives an unbatched result; a VLA policy's instruction may be its text, looked up
    in the table stored at export, :attr:`instructions`). Returns ``actions [B, A]`` for step and recurrent
    policies and ``chunk [B, Ta, A]`` for chunk policies. Recurrent policies carry their state from call to call;
    :meth:`reset` zeroes it for new episodes.

    Args:
        path: the ``.onnx`` file.
        intra_op_threads: ONNX Runtime intra-op threads (1 suits batch-1 control loops on shared CPUs).
        seed: seed of the initial flow noise drawn when a chunk policy is called without ``noise``.
        check_outputs: raise when the policy returns non-finite values.

    Raises:
        FileNotFoundError: for a missing file. ValueError: for a file ONNX Runtime cannot load (corrupt or
            truncated) or a model not exported by rslkit.
    """

    def __init__(
        self, path: str | Path, intra_op_threads: int = 1, seed: int | None = 0, check_outputs: bool = True
    ) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"ONNX policy '{path}' does not exist; export one in the training venv with "
                ".venv/bin/python -m rslkit.export."
            )
        if intra_op_threads < 1:
            raise ValueError(f"intra_op_threads must be >= 1, got {intra_op_threads}.")
        ort = _import_ort()
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except _load_errors(ort) as err:
            raise ValueError(
                f"ONNX policy '{path}' is not a loadable ONNX model (corrupt or truncated: {err}); re-export it in "
                "the training venv with .venv/bin/python -m rslkit.export."
            ) from err
        props = self.session.get_modelmeta().custom_metadata_map
        self.meta: PolicyMetadata = read_metadata(props, f"'{path}'")
        self.instructions: InstructionTable | None = read_instructions(props)
        """Instruction text -> embedding table stored at export (VLA policies; None: pass embeddings)."""
        self.check_outputs = check_outputs
        self.rng = np.random.default_rng(seed)
        self._state: dict[str, np.ndarray] | None = None

    # ------------------------------------------------------------------ properties
    @property
    def kind(self) -> str:
        """``step``, ``recurrent`` or ``chunk``."""
        return self.meta.kind

    @property
    def obs_groups(self) -> dict[str, list[int]]:
        """Observation group -> per-sample shape."""
        return self.meta.obs_groups

    @property
    def action_dim(self) -> int:
        """Action size ``A``."""
        return self.meta.action_dim

    @property
    def chunk_length(self) -> int | None:
        """``Ta`` of chunk policies (None otherwise)."""
        return self.meta.chunk_length

    @property
    def max_future_offset(self) -> int:
        """``D`` of a chunk policy with a ``future_state`` input (0: no such input)."""
        return self.meta.max_future_offset if self.meta.future_state_slice is not None else 0

    @property
    def state(self) -> dict[str, np.ndarray] | None:
        """Current recurrent state ``{name: [L, B, H]}`` (None before the first call or after :meth:`reset`)."""
        return self._state

    @property
    def instruction_group(self) -> str | None:
        """The observation group of the instruction embedding (None: the policy takes no language)."""
        return str(self.meta.instruction["group"]) if self.meta.instruction else None

    @property
    def camera_groups(self) -> list[str]:
        """The uint8 image groups (``camera_<name>``, ``[H, W, 3]`` RGB), in graph order."""
        return [g for g in self.meta.group_names if self.meta.obs_dtypes.get(g) == "uint8"]

    def instruction_embedding(self, text: str) -> np.ndarray:
        """The stored embedding ``float32 [E]`` of instruction ``text``.

        Raises:
            ValueError: the policy takes no instruction, was exported without a table, or does not know ``text``
                (the message lists the known instructions and how to add one).
        """
        if self.instruction_group is None:
            raise ValueError("This policy takes no instruction.")
        if self.instructions is None:
            raise ValueError(
                f"This policy was exported without an instruction table, so it cannot look up {text!r}; {ADD_HINT}."
            )
        return self.instructions.lookup(text)

    # ------------------------------------------------------------------ validation
    def _array(
        self, name: str, value: Any, per_sample: list[int], batch: int | None, dtype: str = "float32"
    ) -> tuple[np.ndarray, bool]:
        """Validated array ``[B, *per_sample]`` of ``dtype`` and whether the input was unbatched."""
        if hasattr(value, "detach"):  # torch tensor
            value = value.detach().cpu().numpy()
        arr = np.asarray(value)
        if arr.dtype != np.dtype(dtype):
            hint = " (camera images: uint8 RGB [H, W, 3])" if dtype == "uint8" else ""
            raise ValueError(
                f"Input '{name}' has dtype {arr.dtype}; the policy takes {dtype}{hint} (convert with "
                f".astype(np.{dtype}))."
            )
        unbatched = list(arr.shape) == list(per_sample)
        if unbatched:
            arr = arr[None]
        if arr.ndim != len(per_sample) + 1 or list(arr.shape[1:]) != list(per_sample):
            raise ValueError(
                f"Input '{name}' has shape {list(arr.shape)}; expected [batch, {', '.join(map(str, per_sample))}] "
                f"or {per_sample}."
            )
        if batch is not None and arr.shape[0] != batch:
            raise ValueError(f"Input '{name}' has batch {arr.shape[0]}, other inputs have {batch}.")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            bad = sorted({int(i) for i in np.argwhere(~np.isfinite(arr.reshape(arr.shape[0], -1)))[:, 0]})
            raise ValueError(
                f"Input '{name}' has non-finite values (NaN/inf) in batch rows {bad[:10]}; fix the source."
            )
        return np.ascontiguousarray(arr), unbatched

    def _feeds(self, obs: Mapping[str, Any] | Any) -> tuple[dict[str, np.ndarray], int, bool]:
        groups = self.meta.obs_groups
        if not isinstance(obs, Mapping):
            if len(groups) != 1:
                raise ValueError(f"This policy reads the groups {list(groups)}; pass a {{group: array}} mapping.")
            obs = {next(iter(groups)): obs}
        missing = [g for g in groups if g not in obs]
        if missing:
            hint = ""
            if self.instruction_group in missing:
                known = f" (one of {self.instructions.texts})" if self.instructions is not None else ""
                hint = f" Give '{self.instruction_group}' as the instruction text{known} or its embedding float32 [E]."
            raise ValueError(f"Missing observation groups {missing}; this policy reads {list(groups)}.{hint}")
        feeds: dict[str, np.ndarray] = {}
        batch: int | None = None
        unbatched = False
        for g in self.meta.group_names:
            value = self._embed_text(obs[g]) if g == self.instruction_group else obs[g]
            feeds[g], unbatched = self._array(g, value, groups[g], batch, self.meta.obs_dtypes.get(g, "float32"))
            batch = feeds[g].shape[0]
        assert batch is not None
        return feeds, batch, unbatched

    def _embed_text(self, value: Any) -> Any:
        """An instruction given as text (``str``, or a sequence of them for a batch) -> its stored embedding(s)."""
        if isinstance(value, str):
            return self.instruction_embedding(value)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return np.stack([self.instruction_embedding(v) for v in value])
        if isinstance(value, np.ndarray) and value.dtype.kind == "U":
            return np.stack([self.instruction_embedding(str(v)) for v in value.reshape(-1)]).reshape(*value.shape, -1)
        return value

    def check_inputs(self, obs: Mapping[str, Any] | Any) -> None:
        """Validate an observation as :meth:`__call__` would (groups, shapes, dtypes, finite values, known
        instruction) without running the policy; the async engine calls it on the control thread.

        Raises:
            ValueError: naming the input and what to do.
        """
        if isinstance(obs, ConditionedObservation):
            obs = obs.obs
        self._feeds(obs)

    def _check(self, name: str, value: np.ndarray) -> None:
        if self.check_outputs and not np.isfinite(value).all():
            raise RuntimeError(f"The policy produced non-finite '{name}'; check the exported model and its inputs.")

    # ------------------------------------------------------------------ inference
    def __call__(
        self, obs: Mapping[str, Any] | Any, noise: Any | None = None, future_state: Any | None = None
    ) -> np.ndarray:
        """Actions ``[B, A]`` (step, recurrent) or chunk ``[B, Ta, A]`` (chunk) for ``obs``.

        Args:
            obs: ``{group: float32 [B, D_g]}`` (or one array for single-group policies; VLA policies: also uint8
                ``camera_<name> [B, H, W, 3]`` and ``instruction`` as the text, a list of texts, or the embedding
                ``float32 [B, E]``), or a
                :class:`~rslkit.deploy.future_state.ConditionedObservation` (observation, rolled-forward state and
                its offset, as the async engine's ``FutureStateConditioner.for_policy`` makes them).
            noise: chunk policies only: initial flow noise ``float32 [B, Ta, A]``; drawn from ``N(0, I)`` with the
                policy's generator when omitted.
            future_state: chunk policies with a ``future_state`` input only: the state ``float32 [B, S]`` expected
                when the chunk starts; the observed state (offset 0) when omitted.

        Raises:
            ValueError: for missing groups, wrong shapes or dtypes, non-finite values, an unknown instruction text,
                a batch size that differs
                from the recurrent state's (call :meth:`reset`), ``noise`` for a non-chunk policy, ``future_state``
                for a policy without that input, or an offset beyond the policy's trained range.
        """
        if isinstance(obs, ConditionedObservation):
            if future_state is not None:
                raise ValueError("Pass the future state either in the ConditionedObservation or as future_state.")
            if obs.offset > self.max_future_offset:
                raise ValueError(
                    f"The future state is {obs.offset} ticks ahead but this policy was trained with offsets up to "
                    f"{self.max_future_offset}; retrain with a larger max_future_offset or make inference faster."
                )
            obs, future_state = obs.obs, obs.future_state
        feeds, batch, unbatched = self._feeds(obs)
        meta = self.meta
        if meta.kind == "chunk":
            assert meta.noise_shape is not None
            if noise is None:
                noise = self.rng.standard_normal((batch, *meta.noise_shape)).astype(np.float32)
            feeds["noise"], _ = self._array("noise", noise, meta.noise_shape, batch)
        elif noise is not None:
            raise ValueError(f"noise is an input of chunk policies only; this is a {meta.kind} policy.")
        if meta.future_state_slice is not None:
            start, stop = meta.future_state_slice
            if future_state is None:  # offset 0: the state as observed
                future_state = feeds[meta.group_names[0]][:, start:stop]
            feeds["future_state"], _ = self._array("future_state", future_state, [stop - start], batch)
        elif future_state is not None:
            raise ValueError(
                "future_state is an input of chunk policies trained with future-state offsets only; this policy has "
                "none (use FutureStateConditioner(mode, state_index) to write the state into the observation)."
            )
        if meta.kind == "recurrent":
            if self._state is None:
                self._state = {
                    n: np.zeros([batch if d == -1 else d for d in meta.state_shapes[n]], np.float32)
                    for n in meta.state_names
                }
            first = next(iter(self._state.values()))
            if first.shape[1] != batch:
                raise ValueError(
                    f"The recurrent state holds {first.shape[1]} sequences but {batch} observations came; call "
                    "reset() before changing the batch size."
                )
            feeds.update(self._state)
        outputs = self.session.run(meta.output_names, feeds)
        result = outputs[0]
        self._check(meta.output_names[0], result)
        if meta.kind == "recurrent":
            named = dict(zip(meta.output_names, outputs))
            self._state = {n: named[f"{n}_out"] for n in meta.state_names}
        return result[0] if unbatched else result

    def reset(self, dones: Any | None = None) -> None:
        """Zero the recurrent state of finished episodes (``dones [B]`` bool; all of them when None).

        Raises:
            ValueError: when ``dones`` does not hold one flag per sequence of the recurrent state.
        """
        if self._state is None:
            return
        if dones is None:
            self._state = None
            return
        if hasattr(dones, "detach"):  # torch tensor
            dones = dones.detach().cpu().numpy()
        flags = np.asarray(dones, dtype=bool)
        batch = next(iter(self._state.values())).shape[1]
        if flags.size != batch:
            raise ValueError(
                f"reset() got dones of shape {list(flags.shape)} but the recurrent state holds {batch} sequences; "
                f"pass one flag per sequence (shape [{batch}]), or None to reset all."
            )
        keep = ~flags.reshape(1, -1, 1)
        self._state = {n: s * keep for n, s in self._state.items()}
