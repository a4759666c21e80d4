"""A throwaway PostgreSQL cluster for tests and benchmarks: Debian's server binaries, data and socket in a temporary
folder, 127.0.0.1 on a free port, a password-checked user (scram-sha-256 over TCP) and one database; stopped (fast)
and removed at the end, whatever happened. PostgreSQL refuses to run as root: as root, the server runs as the
`postgres` (or `nobody`) user. Its commands may take as long as they need on a busy machine while they advance
(tests/support/waiting.py); pg_ctl's own waits are stretched by the machine's load."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from tests.support.ports import free_port
from tests.support.waiting import file_size, patience_now, run_while_progressing

DB, USER = "focus_dagster", "focus"
PG_CTL_WAIT = 60  # seconds pg_ctl waits for the server to start or stop, on a quiet machine


def _fail(message: str):
    raise RuntimeError(message)


def _server_user() -> tuple[list[str], int, int]:
    """How to run the server's commands (PostgreSQL refuses root), and the uid/gid owning its files."""
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    for name in ("postgres", "nobody"):  # Debian's package creates `postgres`
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if shutil.which("runuser"):
            return ["runuser", "-u", name, "--"], entry.pw_uid, entry.pw_gid
        return (["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"], entry.pw_uid,
                entry.pw_gid)
    raise RuntimeError("running as root and neither the postgres nor the nobody user exists to run PostgreSQL")


@contextmanager
def running_postgres(binaries: Path, fail=_fail):
    """A running cluster from the server binaries in `binaries`: (host, port, user, password, db, log);
    `fail(message)` is called when a server command fails (raise there)."""
    as_user, uid, gid = _server_user()
    # Under /tmp, not pytest's tmp_path: that is private to root, and the server runs as another user.
    tmp = Path(tempfile.mkdtemp(prefix="focus-pg-", dir="/tmp" if os.geteuid() == 0 else None))
    os.chown(tmp, uid, gid)
    data, log, password = tmp / "data", tmp / "server.log", secrets.token_hex(12)
    (tmp / "pwfile").write_text(password + "\n")
    os.chown(tmp / "pwfile", uid, gid)

    def server_cmd(*args, check=True):
        """A server command run to its end while it advances (its output or the server's log growing)."""
        output = Path(tempfile.mkdtemp(prefix="focus-pg-cmd-")) / "output.log"  # ours, whoever runs the server
        try:
            done = run_while_progressing([*as_user, *map(str, args)], f"{Path(args[0]).name} ({tmp})", output,
                                         progress=[lambda: file_size(log)], cwd=tmp)
        finally:
            shutil.rmtree(output.parent, ignore_errors=True)
        if check and done.returncode != 0:
            server_log = log.read_text() if log.exists() else ""
            fail(f"{args[0]} failed ({done.returncode}): {done.output}\n{server_log}")
        return done

    def pg_ctl_wait() -> str:
        return str(round(patience_now(PG_CTL_WAIT)))

    started = False
    try:
        server_cmd(binaries / "initdb", "-D", data, "-U", USER, f"--pwfile={tmp / 'pwfile'}", "--auth-local=trust",
                   "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
        started = True  # from here on, whatever happens, stop it (pg_ctl stop does nothing if none runs)
        for attempt in range(3):  # a free port can be taken between looking and listening
            port = free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={tmp} -c fsync=off "
                       "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
            done = server_cmd(binaries / "pg_ctl", "-D", data, "-l", log, "-w", "-t", pg_ctl_wait(), "-o", options,
                              "start", check=attempt == 2)
            if done.returncode == 0:
                break
        import psycopg2

        connection = psycopg2.connect(host="127.0.0.1", port=port, user=USER, password=password, dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {DB}")
        connection.close()
        yield SimpleNamespace(host="127.0.0.1", port=port, user=USER, password=password, db=DB, log=log)
    finally:
        if started:
            server_cmd(binaries / "pg_ctl", "-D", data, "-m", "fast", "-w", "-t", pg_ctl_wait(), "stop", check=False)
        shutil.rmtree(tmp, ignore_errors=True)
