"""A free TCP port on the loopback interface, for a server a test starts (the UI, PostgreSQL, a fake S3)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now: the system picks it, so tests running side by side do not collide."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
