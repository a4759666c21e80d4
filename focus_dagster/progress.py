"""Progress of a long step as lines a person can follow: done / total, rate and time left, every ten seconds.

A step makes one `Progress` over its own unit (images, examples, configurations, sections) and calls
`advance(n)` as work gets done. `say` gets a line at most every `every` seconds while the work goes on, and a
final line once it is all done (or at `finish()`, when a step ends short of its total):

    [progress] embeddings tiny_vit@idrid: 512/2000 images, 6.4 images/s, about 3m53s left
    [progress] embeddings tiny_vit@idrid: 2000/2000 images in 5m12s, 6.4 images/s

In an asset `say` is `context.log.info`, so the lines are INFO records of the run and the UI shows them; the
mark at their start lets `focus demo` find them among the run's other records and print them live. The clock
is a parameter so that a test can move time by hand.
"""

from __future__ import annotations

import time
from typing import Callable

MARK = "[progress]"
EVERY_SECONDS = 10.0


class Progress:
    """Counts work done towards `total` and reports it through `say` (None: nothing is said)."""

    def __init__(self, what: str, total: int, unit: str, say: Callable[[str], None] | None, *,
                 every: float = EVERY_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.unit, self.every, self.clock = what, int(total), unit, every, clock
        self.say = say or (lambda _line: None)
        self.done = 0
        self.started = self.said = clock()
        self.finished = False

    def advance(self, n: int = 1) -> None:
        """`n` more units done: a line when `every` seconds have passed since the last, the final one at the total."""
        self.done += n
        if self.done >= self.total:
            self.finish()
            return
        now = self.clock()
        if now - self.said >= self.every:
            self.said = now
            self.say(self.line(now))

    def finish(self) -> None:
        """The final line (once): what was done, in how long, at what rate. Nothing for a step with nothing to do."""
        if self.finished or (self.total == 0 and self.done == 0):
            return
        self.finished = True
        elapsed = self.clock() - self.started
        self.say(f"{MARK} {self.what}: {self.done}/{self.total} {self.unit} in {duration(elapsed)}, "
                 f"{rate_text(self._rate(elapsed))} {self.unit}/s")

    def line(self, now: float) -> str:
        elapsed = now - self.started
        rate = self._rate(elapsed)
        left = f"about {duration((self.total - self.done) / rate)} left" if rate > 0 else "time left unknown"
        return f"{MARK} {self.what}: {self.done}/{self.total} {self.unit}, {rate_text(rate)} {self.unit}/s, {left}"

    def _rate(self, elapsed: float) -> float:
        return self.done / elapsed if elapsed > 0 else 0.0


def is_progress(message: str | None) -> bool:
    """Whether a log message is a progress line."""
    return bool(message) and message.startswith(MARK + " ")


def without_mark(message: str) -> str:
    return message[len(MARK) + 1:] if is_progress(message) else message


def rate_text(rate: float) -> str:
    """Three figures or so: 0.42, 6.4, 512."""
    return f"{rate:.2f}" if rate < 1 else f"{rate:.1f}" if rate < 100 else f"{rate:.0f}"


def duration(seconds: float) -> str:
    """42s, 3m05s, 1h02m."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
