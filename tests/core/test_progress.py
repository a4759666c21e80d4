"""The progress helper against a clock moved by hand: when it speaks, and the rate and time left it says."""

from __future__ import annotations

from focus_dagster.progress import MARK, Progress, duration, is_progress, without_mark


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def at(clock: Clock, seconds: float, progress: Progress, n: int) -> None:
    clock.now = seconds
    progress.advance(n)


def test_lines_every_ten_seconds_with_rate_and_time_left_then_one_final_line():
    clock, lines = Clock(), []
    progress = Progress("embeddings tiny_vit@idrid", 100, "images", lines.append, every=10.0, clock=clock)
    at(clock, 4, progress, 10)
    assert lines == []  # not ten seconds yet
    at(clock, 10, progress, 20)  # 30 done in 10 s: 3.0/s, 70 left: 23.3 s
    at(clock, 15, progress, 10)  # 5 s after the last line: quiet
    at(clock, 20, progress, 30)  # 70 in 20 s: 3.5/s, 30 left: 8.6 s
    at(clock, 40, progress, 30)  # all 100 in 40 s: 2.5/s
    progress.finish()  # once only
    assert lines == [
        f"{MARK} embeddings tiny_vit@idrid: 30/100 images, 3.0 images/s, about 23s left",
        f"{MARK} embeddings tiny_vit@idrid: 70/100 images, 3.5 images/s, about 9s left",
        f"{MARK} embeddings tiny_vit@idrid: 100/100 images in 40s, 2.5 images/s",
    ]
    assert all(is_progress(line) for line in lines)
    assert without_mark(lines[-1]) == "embeddings tiny_vit@idrid: 100/100 images in 40s, 2.5 images/s"


def test_slow_work_reads_in_hours_and_a_short_end_says_what_was_done():
    clock, lines = Clock(), []
    progress = Progress("lora tiny_llava training", 10_000, "examples", lines.append, clock=clock)
    at(clock, 100, progress, 50)  # 0.5/s, 9,950 left: 19,900 s = 5 h 31 min 40 s
    at(clock, 105, progress, 10)  # 5 s after the last line: quiet
    progress.finish()  # ended short of its total (a failure, a stop)
    assert lines == [f"{MARK} lora tiny_llava training: 50/10000 examples, 0.50 examples/s, about 5h31m left",
                     f"{MARK} lora tiny_llava training: 60/10000 examples in 1m45s, 0.57 examples/s"]


def test_nothing_to_do_says_nothing_and_no_say_is_silent():
    lines = []
    Progress("metrics idrid", 0, "configurations", lines.append).finish()
    assert lines == []
    Progress("metrics idrid", 3, "configurations", None).advance(3)  # no error, nothing to say it to
    assert duration(59.6) == "1m00s" and duration(3725) == "1h02m" and not is_progress("step 3/4: loss 0.1")
