"""Instruction strings -> sentence embeddings, stored inside an exported VLA policy (no torch needed to read).

A robot that runs the ONNX policy without torch cannot run the sentence encoder, so ``python -m rslkit.export``
embeds the instructions the policy was trained on (and any given with ``--instructions``) and writes the table into
the model's ``metadata_props`` under :data:`INSTRUCTIONS_KEY` as JSON: ``{"encoder": name, "dim": E, "texts":
[...], "embeddings": [[E floats], ...]}`` (float32 values written in their shortest exact form, so the lookup
returns the encoder's embedding bit for bit). :class:`~rslkit.deploy.onnx_policy.OnnxPolicy` then takes the
instruction text and looks it up here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

INSTRUCTIONS_KEY = "rslkit.instructions"
"""``metadata_props`` key of the instruction table."""
ADD_HINT = (
    "add it by re-exporting in the training venv: `python -m rslkit.export --checkpoint C --out policy.onnx "
    '--instructions "TEXT"` (it embeds TEXT with the policy\'s text encoder), or pass its embedding float32 [E] '
    "instead of the text"
)


class InstructionTable:
    """Known instructions and their raw sentence embeddings ``[E]`` (what the policy's ``instruction`` input takes).

    Args:
        embeddings: instruction text -> embedding ``[E]`` (float32; any array-like).
        encoder: name of the sentence encoder that made them (``minilm`` or a model directory), for messages.

    Raises:
        ValueError: for an empty table, an empty text, or embeddings of different sizes or with NaN / inf.
    """

    def __init__(self, embeddings: Mapping[str, Any], encoder: str = "") -> None:
        if not embeddings:
            raise ValueError("An instruction table needs at least one instruction.")
        rows = {str(t): np.asarray(e, np.float32).reshape(-1) for t, e in embeddings.items()}
        dims = {t: r.size for t, r in rows.items()}
        if "" in rows or len(set(dims.values())) != 1:
            raise ValueError(f"Instruction texts must be non-empty and embeddings one size; got sizes {dims}.")
        bad = [t for t, r in rows.items() if not np.isfinite(r).all()]
        if bad:
            raise ValueError(f"The embeddings of instructions {bad} hold NaN / inf; re-embed them.")
        self.rows, self.encoder = rows, encoder

    @property
    def dim(self) -> int:
        """Embedding size ``E``."""
        return int(next(iter(self.rows.values())).size)

    @property
    def texts(self) -> list[str]:
        """The known instructions, in table order."""
        return list(self.rows)

    def __contains__(self, text: object) -> bool:
        return text in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def lookup(self, text: str) -> np.ndarray:
        """Embedding ``float32 [E]`` of ``text`` (exact match).

        Raises:
            ValueError: for an unknown instruction, naming the known ones and how to add one.
        """
        row = self.rows.get(text)
        if row is None:
            raise ValueError(
                f"Unknown instruction {text!r}; this policy knows {self.texts}. To use a new one, {ADD_HINT}."
            )
        return row

    def lookup_many(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings ``float32 [B, E]`` of ``texts``."""
        return np.stack([self.lookup(t) for t in texts])

    def merged(self, other: InstructionTable) -> InstructionTable:
        """This table with ``other``'s instructions added (``other`` wins where both have one).

        Raises:
            ValueError: when the embedding sizes differ.
        """
        if other.dim != self.dim:
            raise ValueError(f"Cannot merge instruction tables of embedding sizes {self.dim} and {other.dim}.")
        return InstructionTable({**self.rows, **other.rows}, other.encoder or self.encoder)

    def to_json(self) -> str:
        """The stored form (shortest exact float32 decimals)."""
        rows = [[float(str(v)) for v in row] for row in self.rows.values()]
        return json.dumps({"encoder": self.encoder, "dim": self.dim, "texts": self.texts, "embeddings": rows})

    @classmethod
    def from_json(cls, text: str) -> InstructionTable:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: for malformed content.
        """
        try:
            data = json.loads(text)
            texts, rows = data["texts"], data["embeddings"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"Malformed instruction table in the policy ({err!r}); re-export it.") from None
        if len(texts) != len(rows) or len(set(texts)) != len(texts):
            raise ValueError(f"Malformed instruction table: {len(texts)} texts for {len(rows)} embeddings; re-export.")
        return cls(dict(zip(texts, rows)), str(data.get("encoder", "")))


def write_instructions(model: onnx.ModelProto, table: InstructionTable) -> None:
    """Store ``table`` in ``model.metadata_props`` (replacing an earlier table)."""
    for prop in list(model.metadata_props):
        if prop.key == INSTRUCTIONS_KEY:
            model.metadata_props.remove(prop)
    entry = model.metadata_props.add()
    entry.key, entry.value = INSTRUCTIONS_KEY, table.to_json()


def read_instructions(props: Mapping[str, str]) -> InstructionTable | None:
    """The table in a ``{key: value}`` metadata map (ONNX Runtime's ``custom_metadata_map``); None when absent."""
    text = props.get(INSTRUCTIONS_KEY)
    return None if text is None else InstructionTable.from_json(text)
