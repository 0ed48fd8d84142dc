"""The container image (deploy/container/Containerfile), run exactly as it declares itself.

``scripts/build-image.sh`` builds it with buildah; these tests (marker ``image``) read its
entrypoint, command, user, environment and health check from ``buildah inspect`` and run
that command as that user with ``buildah run`` (chroot isolation, the host's network), in
front of a simulated vLLM node on loopback, with a config file mounted over
``/etc/runaway-sidecar``. Only the listen ports are changed from the image's environment
(to free ones: the container shares the host's network).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar import __version__
from sidecar.config import Config
from tests.deploy import promstack

pytestmark = [pytest.mark.image, pytest.mark.timeout(300)]

IMAGE = os.environ.get("RUNAWAY_IMAGE", f"localhost/runaway-sidecar:{__version__}")
ENV = dict(os.environ, STORAGE_DRIVER=os.environ.get("STORAGE_DRIVER", "vfs"))
LOOP = {"model": "sim-loop", "max_tokens": 3000, "stream": True,
        "messages": [{"role": "user", "content": "fix it"}]}


def buildah(*args: str) -> str:
    done = subprocess.run(["buildah", *args], env=ENV, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    """The image's Docker-format config: Entrypoint, Cmd, User, Env, Healthcheck..."""
    try:
        data = json.loads(buildah("inspect", "--type", "image", IMAGE))
    except FileNotFoundError:
        pytest.fail("buildah is not installed: run scripts/build-image.sh first")
    docker: dict[str, Any] = data["Docker"]["config"]
    return docker


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """A working container of the image (removed afterwards)."""
    name = buildah("from", "--quiet", "--pull-never", IMAGE).strip()
    yield name
    buildah("rm", name)


def _env_of(config: dict[str, Any], **overrides: str) -> list[str]:
    env = dict(item.split("=", 1) for item in config["Env"])
    env.update(overrides)
    return [f"--env={k}={v}" for k, v in env.items()]


def test_declared_user_entrypoint_ports_and_healthcheck(config: dict[str, Any]) -> None:
    """A numeric non-root user; ``runaway-sidecar serve`` with the mounted config file;
    listen addresses on every interface at the sidecar's default ports; a health check
    on ``/healthz``."""
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["runaway-sidecar", "serve"]
    assert config["Cmd"] == ["--config", "/etc/runaway-sidecar/config.toml"]
    env = dict(item.split("=", 1) for item in config["Env"])
    defaults = Config()
    assert env["RUNAWAY_SIDECAR_LISTEN"] == "0.0.0.0:" + defaults.listen.rpartition(":")[2]
    assert env["RUNAWAY_SIDECAR_METRICS_LISTEN"] == (
        "0.0.0.0:" + defaults.metrics_listen.rpartition(":")[2])
    assert set(config["ExposedPorts"]) == {"8000/tcp", "9464/tcp"}
    check = config["Healthcheck"]["Test"]
    assert check[0] == "CMD"
    assert "/healthz" in check[-1]


def test_no_build_tools(container: str, config: dict[str, Any]) -> None:
    """No compiler, make or pip in the final image: neither on PATH nor as a module of
    the sidecar's interpreter."""
    script = ("for t in gcc cc c++ make pip pip3; do command -v $t && exit 1; done; "
              "python3 -c 'import pip' 2>/dev/null && exit 1; "
              "python3 -c 'import sidecar; print(sidecar.__file__)'")
    out = buildah("run", "--isolation", "chroot", "--user", config["User"],
                  *_env_of(config), container, "--", "/bin/sh", "-c", script)
    assert out.startswith("/opt/runaway-sidecar/lib/")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (loopback)
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_runaway_cut_and_answered_through_the_image(
        container: str, config: dict[str, Any], tmp_path: Path) -> None:
    """The image's own command, as its own user, serves: a looping stream is cut and
    answered with thinking off, ``/metrics`` counts it, ``/readyz`` sees the upstream, and
    the declared health check passes."""
    sim_port, port, mport = (promstack.free_port() for _ in range(3))
    mount = tmp_path / "etc"
    mount.mkdir()
    (mount / "config.toml").write_text(
        f'upstream = "http://127.0.0.1:{sim_port}"\nmode = "enforce"\n'
        'model_allowlist = ["sim-loop"]\n')
    for path in (tmp_path, mount):
        path.chmod(0o755)
    (mount / "config.toml").chmod(0o644)
    sim = promstack.start([sys.executable, "-m", "sidecar", "simulate", "--listen",
                           f"127.0.0.1:{sim_port}", "--tokens-per-second", "400"],
                          tmp_path / "sim.log")
    env = _env_of(config, RUNAWAY_SIDECAR_LISTEN=f"127.0.0.1:{port}",
                  RUNAWAY_SIDECAR_METRICS_LISTEN=f"127.0.0.1:{mport}")
    command = [*config["Entrypoint"], *config["Cmd"]]
    run = ["buildah", "run", "--isolation", "chroot", "--user", config["User"], *env,
           f"--volume={mount}:/etc/runaway-sidecar:ro", container, "--", *command]
    served = promstack.start(run, tmp_path / "sidecar.log", env=ENV)
    procs: list[int] = []
    try:
        promstack.wait_ready(f"http://127.0.0.1:{mport}/healthz", served,
                             tmp_path / "sidecar.log", timeout=60)
        # The served process: the declared command, run by the venv's interpreter (its
        # script's shebang), as the declared user. (buildah's chroot helper, its parent,
        # carries the command line too.)
        procs = [p for p in _descendants(served.pid)
                 if Path(f"/proc/{p}/cmdline").read_bytes().startswith(
                     b"/opt/runaway-sidecar/bin/python3\0/opt/runaway-sidecar/bin/"
                     b"runaway-sidecar\0serve\0--config\0")]
        assert len(procs) == 1, tmp_path.joinpath("sidecar.log").read_text()
        uids = Path(f"/proc/{procs[0]}/status").read_text().split("Uid:")[1].split()[:4]
        assert set(uids) == {"10001"}

        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(LOOP).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310
            body = resp.read().decode()
        assert ": runaway" in body
        content = "".join(
            (json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
            for line in body.splitlines()
            if line.startswith("data: {") and json.loads(line[6:])["choices"])
        assert content.strip()
        status, metrics = _get(f"http://127.0.0.1:{mport}/metrics")
        assert status == 200
        assert ('runaway_sidecar_requests_total{model="sim-loop",outcome="reissued",'
                'route="chat"} 1.0') in metrics
        assert _get(f"http://127.0.0.1:{mport}/readyz")[0] == 200
        check = buildah("run", "--isolation", "chroot", "--user", config["User"], *env,
                        container, "--", *config["Healthcheck"]["Test"][1:])
        assert check == ""
        # As a container runtime stops it: SIGTERM to the command's process.
        os.kill(procs[0], signal.SIGTERM)
        assert served.wait(timeout=40) == 0
    finally:
        promstack.stop(served)
        promstack.stop(sim)
    log = [json.loads(line) for line in (tmp_path / "sidecar.log").read_text().splitlines()
           if line.startswith("{")]
    assert [e["event"] for e in log if e["event"] in ("listening", "stopped")] == [
        "listening", "stopped"]
