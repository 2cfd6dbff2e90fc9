"""VLAC's prompts and the parsing of its answers, for a progress critic served behind a chat endpoint.

The prompts are the model's input format, so they are reproduced as VLAC's inference code writes them
(InternRobotics/VLAC, ``evo_vlac/utils/model_utils.py`` at commit 1a26f05, ``GAC_model.__init__`` and
``get_score_prompt``; ``evo_vlac/utils/data_processing_vlm.py`` at commit 2cf1f3c, ``DataProcessor.prompt_templete``
and ``trojectory_example_prompt``; arXiv 2509.15937):

- pairwise progress ("critic"): two images and the task; the model answers a signed score in percent of the whole
  task, positive when the second image is closer to the goal (VLAC accumulates it as ``v <- v + (100 - v) c / 100``);
- one-shot (in context): the frames of a reference demonstration labelled ``0% ... 100%``, then the beginning of the
  trajectory, then the pair, with the same question;
- done: one image and the task, "The 1 means yes, the 0 means no"; with a goal image, the goal image first.

``<image>`` in a template marks where an image goes; :func:`split_on_images` cuts a prompt there, so a client can
interleave text and image parts in one chat message. The parsers turn an answer into a number or raise
:class:`ServedCriticError` quoting what came back.
"""

from __future__ import annotations

import re

IMAGE_TAG = "<image>"
"""Where an image goes in a prompt (InternVL's placeholder, as VLAC's templates write it)."""

SYSTEM_PROMPT = (
    "You are a visual-language assistant designed to interpret spatial and task-related information from images and "
    "text. Provide precise, context-aware responses and actionable guidance to assist in achieving task objectives."
)
"""VLAC's system prompt (``GAC_model.set_system_prompt()`` with no argument, as its examples call it)."""

PAIR_PROGRESS = (
    "Image-1: <image>\nImage-2: <image>\nCompare two images and evaluate whether the second image is closer to "
    "achieving task objectives compared to the first image. + score means the second image is closer, - score means "
    "the first image is closer\nResponse the relative progressing of target task follow <score>. The target task is: "
    "<task> {goal} </task> <score>"
)
"""Pairwise progress, zero-shot: images ``[a, b]``."""

TRAJECTORY_BEGINNING = "0% <image>\nThis image is the trajectory beginning of the following two images\n"
"""Prefix of the one-shot pair: the first frame of the scored trajectory."""

DONE = (
    "<image>\nThe 1 means yes, the 0 means no. Check if the robot has completed its task: <task> {goal} </task> <done>"
)
"""Done, zero-shot: image ``[b]`` (VLAC's single-image prompt puts the image first)."""

DONE_WITH_GOAL_IMAGE = (
    "<goal> <task> {goal} </task>: <image>\n<goal>\n<image>\n The 1 means yes, the 0 means no. Refer to the goal, "
    "check if the robot has completed its task: <task> {goal} </task> <done>"
)
"""Done against a goal image: images ``[goal_image, b]``."""

ANSWER_QUOTE_CHARS = 200
"""How much of a bad answer an error message quotes."""

_NUMBER = re.compile(r"(?<![\w.+\-])([-+]?\d+(?:\.\d+)?)\s*(%?)")
"""A signed decimal that is not part of a word ("Image-2" holds no number) and an optional percent sign."""
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_YES_NO = re.compile(r"\b(yes|no|true|false)\b", re.IGNORECASE)


class ServedCriticError(RuntimeError):
    """A served critic failed: no answer within the deadline, an HTTP error, or an answer that is not a score.

    A ``RuntimeError`` because the fault is the server's or the model's, not the caller's input (bad input raises
    ``ValueError``, as the ``ProgressCritic`` contract says).
    """


def quote(text: str | bytes, limit: int = ANSWER_QUOTE_CHARS) -> str:
    """``text`` for an error message: decoded, ``repr``-quoted, cut to ``limit`` characters with the rest counted."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r} (+{len(text) - limit} more characters)"


def reference_prompt(goal: str, n_frames: int) -> str:
    """VLAC's one-shot trajectory prefix: ``n_frames`` reference images labelled with their progress in percent.

    Raises:
        ValueError: fewer than 2 frames (the labels run from 0 % to 100 %).
    """
    if n_frames < 2:
        raise ValueError(f"A reference demonstration needs at least 2 frames (start and goal), got {n_frames}.")
    labels = "".join(f" {int(i / (n_frames - 1) * 100)}% {IMAGE_TAG}\n" for i in range(n_frames))
    return f"<trajectory> <task> {goal} </task>:{labels}</trajectory>"


def progress_prompt(goal: str, n_reference: int = 0) -> str:
    """The pairwise-progress prompt for ``goal``.

    Zero-shot (``n_reference == 0``) its images are ``[a, b]``; one-shot they are ``[*reference, beginning, a, b]``.
    """
    pair = PAIR_PROGRESS.format(goal=goal)
    if n_reference == 0:
        return pair
    return reference_prompt(goal, n_reference) + TRAJECTORY_BEGINNING + pair


def done_prompt(goal: str, goal_image: bool = False) -> str:
    """The done prompt for ``goal``: images ``[b]``, or ``[goal_image, b]`` with ``goal_image``."""
    return (DONE_WITH_GOAL_IMAGE if goal_image else DONE).format(goal=goal)


def split_on_images(prompt: str) -> list[str]:
    """The text around each ``<image>`` of ``prompt``: ``n_images + 1`` pieces (some may be empty)."""
    return prompt.split(IMAGE_TAG)


def _numbers(text: str) -> list[tuple[float, bool]]:
    """``(value, has_percent_sign)`` of every number in ``text`` outside a ``<think>`` block, in order."""
    return [(float(m.group(1)), m.group(2) == "%") for m in _NUMBER.finditer(_THINK.sub(" ", text))]


def parse_progress(text: str) -> float:
    """The signed progress of a pairwise answer as a fraction of the task, in ``[-1, 1]``.

    VLAC answers a score in percent (``"35"``, ``"-12.5"``); the first number of the answer counts, with or without a
    ``%`` sign, a ``+`` or surrounding words (``"<score> +20 </score>"``, ``"Score: -40%"``), and is divided by 100.

    Raises:
        ServedCriticError: no number in the answer, or one outside ``[-100, 100]``.
    """
    numbers = _numbers(text)
    if not numbers:
        raise ServedCriticError(f"The critic's progress answer holds no number: {quote(text)}.")
    value = numbers[0][0]
    if not -100.0 <= value <= 100.0:
        raise ServedCriticError(
            f"The critic's progress answer {value:g} is outside [-100, 100] percent: {quote(text)}. Is the served "
            "model a VLAC-class pairwise critic?"
        )
    return value / 100.0


def parse_done(text: str) -> float:
    """The done probability of a done answer, in ``[0, 1]``.

    Mapping: a number ``x`` without ``%`` in ``[0, 1]`` is ``x`` (VLAC answers ``1`` or ``0``, or a decimal when its
    digits are averaged); a number with ``%`` in ``[0, 100]`` is ``x / 100``; with no number, the first of
    ``yes``/``true`` (1) or ``no``/``false`` (0).

    Raises:
        ServedCriticError: an answer with neither, or a number outside those ranges.
    """
    numbers = _numbers(text)
    if numbers:
        value, percent = numbers[0]
        scale = 100.0 if percent else 1.0
        if not 0.0 <= value <= scale:
            unit = "[0, 100] %" if percent else "[0, 1]"
            raise ServedCriticError(f"The critic's done answer {value:g} is outside {unit}: {quote(text)}.")
        return value / scale
    word = _YES_NO.search(_THINK.sub(" ", text))
    if word is None:
        raise ServedCriticError(f"The critic's done answer holds neither a number nor yes/no: {quote(text)}.")
    return 1.0 if word.group(1).lower() in ("yes", "true") else 0.0
