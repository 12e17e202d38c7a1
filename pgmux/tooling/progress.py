"""A tiny terminal progress bar: redraws one line in place, silent when not on a TTY."""

from __future__ import annotations

import sys
import time
from typing import TextIO

REDRAW_INTERVAL = 0.1  # seconds between redraws


class Progress:
    """``with Progress(total, "label") as bar: bar.update(done)``; ``done`` runs 0..total.

    Draws only when ``stream`` is a terminal (or ``enabled=True``), at most every
    ``REDRAW_INTERVAL`` seconds, and clears its line on ``finish()``.
    """

    def __init__(self, total: float, label: str = "", *, width: int = 30,
                 stream: TextIO | None = None, enabled: bool | None = None):
        self.total = max(float(total), 1e-9)
        self.label = label
        self.width = width
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_tty(self.stream) if enabled is None else enabled
        self.done = 0.0
        self._drawn_at = 0.0
        self._line_length = 0

    def update(self, done: float, label: str | None = None) -> None:
        """Set the amount done (clamped to ``total``) and maybe redraw."""
        self.done = min(max(done, 0.0), self.total)
        if label is not None:
            self.label = label
        now = time.monotonic()
        if self.enabled and (now - self._drawn_at >= REDRAW_INTERVAL or self.done >= self.total):
            self._drawn_at = now
            self._draw(self.render())

    def render(self) -> str:
        """The bar as text, e.g. ``label [#########.........]  30%``."""
        fraction = self.done / self.total
        filled = int(round(fraction * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        return f"{self.label} [{bar}] {fraction * 100:3.0f}%".lstrip()

    def finish(self) -> None:
        """Erase the bar so the next output starts on a clean line."""
        if self.enabled and self._line_length:
            self._draw("")
            self._line_length = 0

    def _draw(self, text: str) -> None:
        padding = " " * max(self._line_length - len(text), 0)
        self.stream.write("\r" + text + padding + ("\r" if not text else ""))
        self.stream.flush()
        self._line_length = len(text)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.finish()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
