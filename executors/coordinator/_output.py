"""Output of the coordinator: labelled live lines, raw per-process log files, line splitting."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ("Echo", "LineBuffer")

# Long lines are cut into pieces of this size so that a child printing without newlines cannot
# make the coordinator buffer without bound.
MAX_LINE = 64 * 1024

_COLOURS = ("36", "33", "32", "35", "34", "96", "93", "92", "95", "94")
_COORD_COLOUR = "1"


class LineBuffer:
    """Turns the chunks read from one pipe into complete lines (without the newline)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk
        lines = data.split(b"\n")
        self._pending = lines.pop()
        while len(self._pending) > MAX_LINE:
            lines.append(self._pending[:MAX_LINE])
            self._pending = self._pending[MAX_LINE:]
        return lines

    def flush(self) -> list[bytes]:
        rest, self._pending = self._pending, b""
        return [rest] if rest else []


class Echo:
    """Writes `HH:MM:SS.mmm name | line` to a text stream; names padded, colour on request.

    Lines of a child's stderr are marked with `!` after the name, lifecycle lines of the
    coordinator itself use the name `coord`. The wall clock is only displayed, never used for a
    deadline.
    """

    def __init__(
        self,
        stream: TextIO | None,
        names: list[str],
        *,
        color: bool,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._stream = stream
        self._color = color
        self._wall_clock = wall_clock
        self._width = max(len(n) + 1 for n in [*names, "coord"])
        self._colours = {n: _COLOURS[i % len(_COLOURS)] for i, n in enumerate(names)}
        self._colours["coord"] = _COORD_COLOUR

    def line(self, name: str, text: str, *, stderr: bool = False) -> None:
        if self._stream is None:
            return
        now = self._wall_clock()
        stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
        label = (name + ("!" if stderr else "")).ljust(self._width)
        if self._color:
            colour = self._colours.get(name, _COORD_COLOUR)
            label = f"\x1b[{colour}m{label}\x1b[0m"
        try:
            self._stream.write(f"{stamp} {label} | {text}\n")
            self._stream.flush()
        except (OSError, ValueError):
            # A closed terminal must not break the shutdown sequence (the children still need
            # to be stopped in order); output is best effort.
            self._stream = None
