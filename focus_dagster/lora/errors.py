"""What can go wrong with an adapter or its training set, said so that the reader knows what to do."""

from __future__ import annotations


class AdapterError(Exception):
    """An adapter folder that cannot be used: files missing, or trained on other base weights."""


class TrainingSetError(ValueError):
    """Examples that cannot train a yes/no adapter: one answer only, an answer other than yes/no, an unreadable
    image. The message names the counts or the example."""
