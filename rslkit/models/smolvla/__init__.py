"""rslkit's SmolVLA: LeRobot's SmolVLA (SmolVLM2 + an interleaved cross/self-attention flow-matching action expert),
loaded from and saved to LeRobot checkpoint directories, trained and sampled like every rslkit VLA policy.

Modules: :mod:`~rslkit.models.smolvla.policy` (the policy), :mod:`~rslkit.models.smolvla.flow` (the flow model),
:mod:`~rslkit.models.smolvla.vlm_with_expert` (the two towers), :mod:`~rslkit.models.smolvla.vlm` (building them),
:mod:`~rslkit.models.smolvla.attention`, :mod:`~rslkit.models.smolvla.inputs`,
:mod:`~rslkit.models.smolvla.normalization`, :mod:`~rslkit.models.smolvla.tuning`,
:mod:`~rslkit.models.smolvla.checkpoint`, :mod:`~rslkit.models.smolvla.processor_files`,
:mod:`~rslkit.models.smolvla.lerobot_config`, :mod:`~rslkit.models.smolvla.settings` (the run's settings). The
package imports nothing itself: :mod:`rslkit.models.vla.config` nests the settings, and the policy builds on
:mod:`rslkit.models.vla`.
"""
