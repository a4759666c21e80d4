"""Library noise kept out of the run logs: every module that loads or builds a transformers model calls this."""

from __future__ import annotations


def quiet_transformers() -> None:
    """No progress bars from the library: inside asset steps they only flood the run logs and the terminal."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
