"""Transcripts as test cases: replay one side of a recorded connection and compare the other.

``replay_scenarios`` turns each connection of a transcript into a :class:`~.scenario.Scenario`
(the recorded client frames, with the host frames that came between them as expectations)
plus the reference :class:`~.observe.Observation` the host must match: that is
``transcript replay --host``. :class:`HostReplayer` is the other direction, a pure state
machine that plays the recorded host side and names the first client frame that differs:
that is what ``transcript replay --client`` runs as its host.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import Any

from ..transcript import CLIENT_TO_HOST, TranscriptFrame, TranscriptHeader, read_transcript_items
from .compare import value_difference
from .observe import Observation, decode_frame
from .scenario import Scenario
from .steps import Expect, Send, Step, raw_frame

__all__ = ["HostReplayer", "connections", "replay_scenarios"]


def connections(path: str | os.PathLike[str]) -> list[list[TranscriptFrame]]:
    """The frames of each connection recorded in a transcript, in order."""
    result: list[list[TranscriptFrame]] = []
    for item in read_transcript_items(path):
        if isinstance(item, TranscriptHeader):
            result.append([])
        elif result:
            result[-1].append(item)
    return [frames for frames in result if frames]


def _parsed(payload: bytes) -> Any:
    # Every frame is kept whole, however large: a replay compares all of it.
    return decode_frame(payload, keep=math.inf)


def _scenario_of(number: int, frames: list[TranscriptFrame]) -> tuple[Scenario, Observation]:
    steps: list[Step] = []
    groups: list[tuple[Any, ...]] = []
    waiting: list[Any] = []
    for frame in [*frames, None]:
        # A client frame, or the end, closes the group of host frames before it.
        if (frame is None or frame.direction == CLIENT_TO_HOST) and waiting:
            steps.append(Expect(len(waiting), unordered=True))
            groups.append(tuple(waiting))
            waiting = []
        if frame is None:
            break
        if frame.direction == CLIENT_TO_HOST:
            steps.append(Send(raw_frame(frame.payload)))
        else:
            waiting.append(_parsed(frame.payload))
    summary = f"replay of connection {number}"
    scenario = Scenario(f"connection-{number}", "transcript", summary, tuple(steps))
    return scenario, Observation(tuple(groups), (), "complete", 0, None)


def replay_scenarios(path: str | os.PathLike[str]) -> list[tuple[Scenario, Observation]]:
    """One scenario and its expected observation per recorded connection."""
    return [_scenario_of(number, frames) for number, frames in enumerate(connections(path), 1)]


class HostReplayer:
    """Play the recorded host side of one connection to a live client.

    :meth:`start` and :meth:`client_frame` return the host frames to send next; the first
    client frame that differs from the recording (compared as JSON) sets :attr:`divergence`
    and ends the replay.
    """

    def __init__(self, frames: Iterable[TranscriptFrame]) -> None:
        self._frames = list(frames)
        self._next = 0
        self.divergence: str | None = None
        self.client_frames = 0

    @property
    def finished(self) -> bool:
        """Every recorded frame was played or matched (or the replay diverged)."""
        return self.divergence is not None or self._next >= len(self._frames)

    def _host_frames(self) -> list[bytes]:
        out = []
        while self._next < len(self._frames):
            frame = self._frames[self._next]
            if frame.direction == CLIENT_TO_HOST:
                break
            out.append(frame.payload)
            self._next += 1
        return out

    def start(self) -> list[bytes]:
        """Host frames recorded before the client's first frame (normally none)."""
        return self._host_frames()

    def client_frame(self, payload: bytes) -> list[bytes]:
        """Match one client frame; return the host frames that followed it in the recording."""
        self.client_frames += 1
        if self.divergence is not None:
            return []
        if self._next >= len(self._frames):
            self.divergence = f"client frame {self.client_frames} is beyond the recording"
            return []
        recorded = self._frames[self._next]
        found = value_difference(_parsed(recorded.payload), _parsed(payload))
        if found is not None:
            self.divergence = f"client frame {self.client_frames} {found}"
            return []
        self._next += 1
        return self._host_frames()

    def client_eof(self) -> None:
        """The client closed: recorded client frames not yet seen are a divergence."""
        if self.divergence is None and self._next < len(self._frames):
            missing = sum(
                1 for frame in self._frames[self._next :] if frame.direction == CLIENT_TO_HOST
            )
            if missing:
                self.divergence = (
                    f"client closed after {self.client_frames} frames; {missing} more were recorded"
                )
