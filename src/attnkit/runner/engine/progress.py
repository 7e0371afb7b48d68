"""A one-line progress bar for generation (stderr; no dependency).

On a terminal it redraws in place at most every ``min_interval`` seconds; elsewhere (a pipe,
a log file) it writes only the final line, so logs stay readable.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, total: int, *, stream: TextIO | None = None, width: int = 24,
                 min_interval: float = 0.1):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.min_interval = min_interval
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self._drawn = 0.0
        self._line = ""

    def update(self, done: int, tokens: int) -> None:
        """``done`` requests finished, ``tokens`` new tokens so far."""
        now = time.perf_counter()
        self._line = self._render(done, tokens, now)
        if self.live and now - self._drawn >= self.min_interval:
            self.stream.write("\r" + self._line)
            self.stream.flush()
            self._drawn = now

    def close(self) -> None:
        if self._line:
            self.stream.write(("\r" if self.live else "") + self._line + "\n")
            self.stream.flush()

    def _render(self, done: int, tokens: int, now: float) -> str:
        filled = self.width * done // max(self.total, 1)
        seconds = now - self.start
        rate = tokens / seconds if seconds > 0 else 0.0
        return (f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} requests"
                f" | {tokens} new tokens | {seconds:.1f} s | {rate:.1f} tok/s")
