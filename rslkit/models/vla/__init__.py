"""VLA-style flow policies: images + instruction + state -> action chunks, a transformer action expert."""

from rslkit.models.vla.action_expert import ActionExpert, Attention, ExpertBlock
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.models.vla.hf_backbone import HFVisionTokenizer, VisionTower
from rslkit.models.vla.hf_vlm import HFVLMTokenizer, PrefixDecoder
from rslkit.models.vla.policy import INSTRUCTION_GROUP, VLAPolicy
from rslkit.models.vla.tokens import ImageTokenizer, KeypointTokenizer, ObservationTokenizer

__all__ = [
    "INSTRUCTION_GROUP",
    "ActionExpert",
    "Attention",
    "ExpertBlock",
    "HFVLMTokenizer",
    "HFVisionTokenizer",
    "ImageTokenizer",
    "KeypointTokenizer",
    "ObservationTokenizer",
    "PrefixDecoder",
    "VLAPolicy",
    "VLAPolicyCfg",
    "VisionTower",
]
