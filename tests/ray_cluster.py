"""A Ray cluster of several nodes on this machine, private to one test module.

Every node (`ray start --head`, `ray start --address=...`) and every gpucli run against it lives
in one private network namespace with only loopback up (Ray then binds 127.0.0.1 and no test
traffic can leave the machine) and one private PID namespace. The namespace's first process is
the child of an `unshare --kill-child` that dies with pytest (PR_SET_PDEATHSIG): when it goes,
the kernel kills everything in the namespace, so no raylet outlives the tests, whatever
happens. Nothing is stopped by name (`ray stop` kills every Ray process it can see).
Commands enter the namespaces with `nsenter`. Needs root (unshare, nsenter).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PORT = 6379  # the namespace is private: the default port is free
ADDRESS = f"127.0.0.1:{PORT}"
TOKEN = "gpucli-test-token-0123456789abcdef0123456789abcdef"


def usable() -> str:
    """Why this machine cannot run the cluster tests, or "" when it can."""
    if os.geteuid() != 0:
        return "needs root for network and PID namespaces"
    if not (shutil.which("unshare") and shutil.which("nsenter") and shutil.which("ip")):
        return "needs unshare, nsenter and ip (util-linux, iproute2)"
    if not shutil.which("ray"):
        return "needs the ray command line"
    return ""


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Cluster:
    """Nodes started with Ray's own tools, with token authentication, inside the namespaces."""

    def __init__(self, base: Path) -> None:
        self.base = base
        (base / "home").mkdir(parents=True, exist_ok=True)  # no ~/.ray/auth_token of the real user
        self.token_file = base / "token"
        self.token_file.write_text(TOKEN)
        self.holder: subprocess.Popen | None = None
        self.init_pid = 0
        self.ns = ""

    # --- the namespaces -------------------------------------------------------------------
    def open(self) -> None:
        self.holder = subprocess.Popen(
            ["unshare", "-n", "-p", "-f", "--mount-proc", "--kill-child", "sh", "-c",
             "ip link set lo up && echo up && while :; do sleep 1; done"],
            stdout=subprocess.PIPE, preexec_fn=_die_with_parent)
        assert self.holder.stdout.readline().strip() == b"up", "the namespaces did not come up"
        children = Path(f"/proc/{self.holder.pid}/task/{self.holder.pid}/children").read_text().split()
        self.init_pid = int(children[0])
        self.ns = os.readlink(f"/proc/{self.init_pid}/ns/pid")

    def env(self, token: str | None = "file", **extra: str) -> dict[str, str]:
        """The environment of a command in the cluster: `token` "file" (RAY_AUTH_TOKEN_PATH),
        None (no token anywhere), or a token given in RAY_AUTH_TOKEN."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(HOME=str(self.base / "home"), RAY_USAGE_STATS_ENABLED="0",
                   PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
        if token == "file":
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_file))
        elif token is not None:
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
        env.update(extra)
        return env

    def command(self, args: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.init_pid), "-n", "-p", "-m", "--", *args]

    def run(self, args: list[str], env: dict[str, str] | None = None, timeout: float = 300,
            check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(args), env=env or self.env(), capture_output=True, text=True,
                              timeout=timeout, check=check, cwd=ROOT)

    def popen(self, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        return subprocess.Popen(self.command(args), env=env or self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT)

    def gpucli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300):
        return self.run([sys.executable, "-m", "gpucli", *args], env=env, timeout=timeout)

    # --- nodes ----------------------------------------------------------------------------
    def start_head(self, cpus: int = 0) -> None:
        """A head that runs no work (num-cpus 0), as on most real clusters. Its GCS declares a
        silent node dead after ~2 s rather than Ray's default ~15-30 s (the node-loss tests wait
        for that)."""
        self._ray_start("head", ["--head", f"--port={PORT}", "--include-dashboard=false"], cpus,
                        env=self.env(RAY_health_check_period_ms="500", RAY_health_check_timeout_ms="500",
                                     RAY_health_check_failure_threshold="3"))

    def start_worker(self, name: str, cpus: int = 2) -> None:
        """A worker node; its Ray workers see GPUCLI_TEST_NODE=name (the fake task's slow_node)."""
        self._ray_start(name, [f"--address={ADDRESS}"], cpus, env=self.env(GPUCLI_TEST_NODE=name))

    def _ray_start(self, name: str, args: list[str], cpus: int, env: dict[str, str] | None = None) -> None:
        done = self.run(["ray", "start", *args, f"--temp-dir={self.base / name}", f"--num-cpus={cpus}",
                         "--object-store-memory=80000000", "--disable-usage-stats"], env=env, timeout=120)
        assert done.returncode == 0, f"ray start {name} failed:\n{done.stdout}\n{done.stderr}"

    def raylet(self, name: str) -> int:
        """The host pid of node `name`'s raylet (0 if it is not running)."""
        socket = f"--raylet_socket_name={self.base / name}/"
        for pid in self.pids():
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.decode(errors="replace").startswith(socket) for a in args):
                return pid
        return 0

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's raylet, as when the machine goes away; Ray's workers there follow."""
        pid = self.raylet(name)
        assert pid, f"node {name} is not running"
        os.kill(pid, signal.SIGKILL)
        while self.raylet(name):
            time.sleep(0.1)

    def pids(self) -> list[int]:
        """Host pids of the processes in the cluster's PID namespace."""
        ns, pids = self.ns, []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                        pids.append(int(entry))
                except OSError:
                    continue
        return pids

    def close(self) -> None:
        """Kill the namespace's first process: the kernel kills every other process in it."""
        if self.holder is None:
            return
        left = self.pids()
        self.holder.kill()
        self.holder.wait()
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() for pid in left) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.holder = None


def fake_run(root: Path, out: Path, options: dict | None = None, **config) -> list[str]:
    """A `python -c` command line that runs the fake task (tests/fake_task.py) on the cluster
    and prints the summary as JSON, exiting with its exit code (the CLI's commands take the
    registered tasks only)."""
    code = (
        "import json, sys\n"
        "from gpucli.core.config import RunConfig\n"
        "from gpucli.engines import run_engine\n"
        "from gpucli.core.errors import GpucliError\n"
        f"config = RunConfig(task='tests.fake_task:FakeTask', paths=({str(root)!r},), out={str(out)!r}, "
        f"progress='plain', devices='cpu', engine='ray', ray_address={ADDRESS!r}, task_options={options or {}!r}, "
        f"**{config!r})\n"
        "try:\n"
        "    s = run_engine(config)\n"
        "except GpucliError as exc:\n"
        "    print(f'gpucli: error: {exc}', file=sys.stderr)\n"
        "    sys.exit(exc.exit_code)\n"
        "print(json.dumps(s.__dict__, default=str))\n"
        "sys.exit(s.exit_code)\n")
    return [sys.executable, "-c", code]
