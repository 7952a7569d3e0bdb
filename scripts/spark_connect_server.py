"""Start and stop the Spark Connect server that ships with pyspark, on this machine.

    python scripts/spark_connect_server.py start [--port 15002] [--dir DIR]   # prints the URL
    python scripts/spark_connect_server.py stop [--dir DIR]

The server is pyspark's own (``$SPARK_HOME/sbin/start-connect-server.sh``, Java 17+), in
local mode (``--master local[N]``, N = this machine's cores), listening on loopback only.
Its logs and pid file go under ``--dir`` (default ``./spark_connect``). Point the pipeline
at it with an Airflow connection of type ``spark_connect`` (host ``127.0.0.1``, the port)
or ``DP_SPARK_REMOTE=sc://127.0.0.1:PORT`` (docs/spark.md). The data root must be on a
path the server sees, which it does on the same machine.

The Connect-server backfill test (tests/integration/test_spark_connect_backfill.py)
starts and stops its server with :func:`start` and :func:`stop`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

IDENT = "dp_ops"


@dataclass(frozen=True)
class Server:
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        """The server's pid while it runs."""
        return _pid(self.directory)


def spark_home() -> Path:
    """pyspark's installation, which carries ``sbin/`` and the Connect server's jar."""
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(directory: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOG_DIR=str(directory / "logs"),
               SPARK_PID_DIR=str(directory / "pid"), SPARK_IDENT_STRING=IDENT,
               SPARK_LOCAL_IP="127.0.0.1")
    return env


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start(directory: Path, port: int | None = None, *, cores: int | None = None,
          driver_memory: str = "2g", conf: dict[str, str] | None = None,
          timeout: float = 180) -> Server:
    """Start the server and wait until it accepts connections; raise with the end of its
    log if it does not within ``timeout`` seconds. ``conf`` adds or overrides Spark
    settings."""
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise RuntimeError("the Spark Connect server needs Java 17+ (java on PATH or "
                           "JAVA_HOME)")
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    cores = cores or os.cpu_count() or 2
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": driver_memory,
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
        "spark.local.dir": str(directory / "scratch"),
    } | (conf or {})
    cmd = ["bash", str(spark_home() / "sbin" / "start-connect-server.sh"),
           "--master", f"local[{cores}]"]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    subprocess.run(cmd, env=_env(directory), check=True, capture_output=True, text=True)
    server = Server(port, directory)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _listening(port):
            return server
        if not _pid(directory):
            break
        time.sleep(1)
    tail = "".join(_log_tail(directory))
    stop(directory)
    raise RuntimeError(f"the Spark Connect server did not listen on 127.0.0.1:{port} within "
                       f"{timeout:.0f} s; end of its log:\n{tail}")


def _pid_file(directory: Path) -> Path | None:
    files = sorted((directory / "pid").glob(f"spark-{IDENT}-*.pid"))
    return files[0] if files else None


def _pid(directory: Path) -> int | None:
    """The server's pid, if it is running."""
    path = _pid_file(directory)
    if path is None:
        return None
    pid = int(path.read_text().strip())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def _log_tail(directory: Path, lines: int = 30) -> list[str]:
    logs = sorted((directory / "logs").glob("*.out"))
    return logs[-1].read_text(errors="replace").splitlines(keepends=True)[-lines:] if logs else []


def stop(directory: Path, timeout: float = 60) -> None:
    """Stop the server (pyspark's stop script, then SIGKILL if it lingers)."""
    subprocess.run(["bash", str(spark_home() / "sbin" / "stop-connect-server.sh")],
                   env=_env(directory), capture_output=True, text=True, check=False)
    deadline = time.monotonic() + timeout
    while (pid := _pid(directory)) is not None:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("start", "stop"))
    p.add_argument("--port", type=int, default=15002)
    p.add_argument("--dir", type=Path, default=Path("spark_connect"),
                   help="logs, pid file and scratch space (default ./spark_connect)")
    p.add_argument("--driver-memory", default="2g")
    args = p.parse_args(argv)
    directory = args.dir.resolve()
    if args.action == "stop":
        stop(directory)
        return 0
    try:
        server = start(directory, args.port, driver_memory=args.driver_memory)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(exc, file=sys.stderr)
        return 1
    print(server.url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
