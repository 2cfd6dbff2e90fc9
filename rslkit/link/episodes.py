"""An actor's episode numbers across restarts: (actor id, episode, step) keys never repeat.

The next episode number is stored durably (:func:`rslkit.utils.atomic_write.atomic_write_json`) before any
transition of an episode is spooled, so an actor killed mid-episode and restarted numbers its episodes after every
episode that may have reached the spool. Torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path

from rslkit.utils.atomic_write import atomic_write_json


class EpisodeNumbers:
    """The next episode number kept in the JSON file ``path`` (``{"next_episode": n}``).

    Raises:
        ValueError: a damaged file (removing it would reuse episode numbers: remove it only with the spool).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.next_episode = 0
        if self.path.exists():
            try:
                value = json.loads(self.path.read_text())["next_episode"]
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{self.path} is damaged ({err}); remove it only with the spool directory.") from None
            if type(value) is not int or value < 0:
                raise ValueError(f"{self.path} holds next_episode {value!r}; remove it only with the spool directory.")
            self.next_episode = value

    def cover(self, episode: int) -> None:
        """Make sure a restart numbers its episodes after ``episode`` (durable when this returns)."""
        if episode < self.next_episode:
            return
        atomic_write_json(self.path, {"next_episode": episode + 1})
        self.next_episode = episode + 1
