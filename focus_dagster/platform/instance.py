"""The Dagster instance under FOCUS_HOME: where it lives and where its UI listens.

Wiring, not science: the demo, the UI command and `focus trace --runs` find the instance here. Lineage is not
read from the instance's events: every step records what it read in what it writes (focus_dagster/lineage.py).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from focus_dagster.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
UI_HOST, UI_PORT = "127.0.0.1", 3000


# FOCUS_INSTANCE selects the instance's dagster.yaml: unset, the repository's (SQLite under FOCUS_HOME); a
# profile's name, deploy/<name>/dagster.yaml (`postgres`: deploy/postgres/README.md); else a dagster.yaml path.
INSTANCE_ENV = "FOCUS_INSTANCE"
PROFILES = REPO_ROOT / "deploy"


def instance_profile() -> Path:
    """The dagster.yaml that configures the instance, as FOCUS_INSTANCE selects it."""
    value = os.environ.get(INSTANCE_ENV, "").strip()
    if not value:
        return REPO_ROOT / "dagster.yaml"
    named = PROFILES / value / "dagster.yaml"
    if "/" not in value and named.is_file():
        return named
    path = Path(value).expanduser()
    path = path / "dagster.yaml" if path.is_dir() else path
    if path.is_file():
        return path
    known = sorted(p.parent.name for p in PROFILES.glob("*/dagster.yaml"))
    raise ConfigError(f"{INSTANCE_ENV}={value!r} is neither a profile under {PROFILES} ({', '.join(known) or 'none'}) "
                      "nor a dagster.yaml file. Unset it for the local instance under FOCUS_HOME.")


def prepare_dagster_home(config) -> Path:
    """DAGSTER_HOME under FOCUS_HOME, configured by the repository's dagster.yaml or the profile FOCUS_INSTANCE
    names (an explicit DAGSTER_HOME wins)."""
    explicit = os.environ.get("DAGSTER_HOME")
    if explicit:
        return Path(explicit)
    profile = instance_profile()
    home = config.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(profile, home / "dagster.yaml")
    return home


# --------------------------------------------------------------------------------- an unreachable database

# What dagster-postgres logs on every retry of a failed connection (six in all, each with the driver's message):
# the command's own one line says it once, after the last.
_RETRY_WARNING = "Retrying failed database connection"
_DRIVER_PREFIX = re.compile(r"^connection to server (?:at|on) .*? failed: ")


class _WithoutConnectionRetries(logging.Filter):
    """Drops dagster-postgres's warning of each connection retry (the last failure is said once, by the command)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_RETRY_WARNING)


def quiet_connection_retries() -> None:
    """Leave dagster-postgres's retry warnings out of a command's output (they go to the root logger)."""
    root = logging.getLogger()
    if not any(isinstance(f, _WithoutConnectionRetries) for f in root.filters):
        root.addFilter(_WithoutConnectionRetries())


def unreachable_database(exc: BaseException) -> str | None:
    """One line for an instance whose PostgreSQL database could not be opened (server down or elsewhere, the user
    or database refused): which database, where, and what to check; never the password. None when `exc` was
    not raised by the PostgreSQL driver."""
    reason = _driver_reason(exc)
    if reason is None:
        return None
    where = _instance_yaml()
    found, variables = _postgres_settings(where)
    named = (f"database {found['database']!r} at {found['host']}:{found['port']} (user {found['username']!r})"
             if found else "database")
    settings = f"the settings {', '.join(variables)} that {where} reads" if variables else f"the settings in {where}"
    return (f"the Dagster instance's PostgreSQL {named} cannot be opened: {reason}. Check that the server runs and "
            f"accepts connections there, and {settings}.")


def _driver_reason(exc: BaseException) -> str | None:
    """The PostgreSQL driver's reason, first line, without the address it repeats; None when no error of the
    chain is the driver's failure to connect (an SQLite instance's error, a failed query, anything else)."""
    try:
        from psycopg2 import OperationalError
    except ImportError:  # no PostgreSQL driver: no PostgreSQL instance either
        return None
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OperationalError):
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return _DRIVER_PREFIX.sub("", first).strip()
        exc = exc.__cause__ or exc.__context__
    return None


def _instance_yaml() -> Path:
    """The dagster.yaml the instance was opened from: an explicit DAGSTER_HOME's, else the profile selected."""
    explicit = os.environ.get("DAGSTER_HOME")
    return Path(explicit) / "dagster.yaml" if explicit else instance_profile()


def _postgres_settings(path: Path) -> tuple[dict[str, str] | None, list[str]]:
    """Host, port, database and user of the PostgreSQL storage `path` configures (resolved from the environment
    where it names variables), and those variables; (None, []) when it cannot be told."""
    import yaml

    try:
        block = _postgres_block(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError):
        return None, []
    if not block:
        return None, []
    variables = [v["env"] for v in _leaves(block) if isinstance(v, dict) and set(v) == {"env"}]
    resolved = {key: _value(value) for key, value in block.items()}
    if "postgres_url" in resolved:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(resolved["postgres_url"])
        except ArgumentError:  # not a URL at all: the settings are named, not where they point
            return None, variables
        found = {"host": url.host, "port": url.port or 5432, "database": url.database, "username": url.username}
        return found, variables
    db = resolved.get("postgres_db") or {}
    return ({"host": db.get("hostname"), "port": db.get("port") or 5432, "database": db.get("db_name"),
             "username": db.get("username")}, variables)


def _postgres_block(config) -> dict | None:
    """The mapping that holds `postgres_db` or `postgres_url`, wherever the dagster.yaml puts it (`storage:`, or
    the older run_storage / event_log_storage blocks)."""
    if isinstance(config, dict):
        if "postgres_db" in config or "postgres_url" in config:
            return config
        return next((found for value in config.values() if (found := _postgres_block(value))), None)
    return None


def _leaves(value) -> list:
    """The settings of a block, `{env: NAME}` references kept whole."""
    if isinstance(value, dict) and set(value) != {"env"}:
        return [leaf for item in value.values() for leaf in _leaves(item)]
    return [value]


def _value(value):
    """A setting as the instance reads it: `{env: NAME}` from the environment, a mapping setting by setting."""
    if isinstance(value, dict):
        return os.environ.get(value["env"], "") if set(value) == {"env"} else {k: _value(v) for k, v in value.items()}
    return value
