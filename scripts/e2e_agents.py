#!/usr/bin/env python3
"""Real coding agents as clients, end to end: the driver behind ``scripts/e2e-agents.sh``.

Claude Code (``/v1/messages``), Codex CLI (``/v1/responses``) and Qwen Code
(``/v1/chat/completions``) run headless on the field's bugfix prompt ("Fix the IndexError
in parse_rows()." in a temporary directory holding a small ``parse_rows.py``), each in a
throwaway HOME, against a real vLLM server (CPU build) running the tiny scripted models of
``tests/e2e/tiny_model.py``:

1. the looping model, through a sidecar: the agent's final output holds the model's
   answer; the sidecar counted a runaway on the agent's API (``runaway_sidecar_requests_total``
   with ``outcome="reissued"`` on its route); vLLM is idle afterwards (nothing running or
   waiting, ``generation_tokens_total`` frozen); the agent sent nothing again because of the
   runaway (no ``runaway_memory_hit`` in the sidecar's log, which a prompt seen looping
   before would cause, and as many requests as the agent makes for a healthy answer);
2. ``--baseline``: the looping model without the sidecar, bounded in time: what the user
   gets without it (the before figures);
3. the healthy model, directly and through a sidecar: the agent's output is the same, and
   the sidecar cut nothing;
4. the tool-call loop models (issue 39; first, when ``--agent-models`` is given): each
   agent through a sidecar with ``agent_loops = "nudge"``, then ``"refuse"``: the loop is
   seen on the request that carries the K-th identical call, the note is in that request's
   body in vLLM's request log and in no other, and on ``refuse`` the agent stops with the
   sidecar's message in its output (``Driver.tool_loop_sidecar``); with ``--baseline``,
   first without the sidecar.

One vLLM server per model, one after the other (the agents share it). Every agent runs
under ``strace`` (connect and send calls only) and the run fails if it reached any address
other than loopback, or asked a DNS server anything.

Each run's figures (seconds to the answer, tokens vLLM generated and prefilled, requests)
and each stage's duration go to the log and to ``report.jsonl`` in the log directory.
Everything it starts runs in its own process group and is stopped on exit, on error, on
SIGTERM/SIGINT and when the overall limit passes. Standard library and the project's
``prometheus_client`` only; only loopback addresses are ever contacted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Fix the IndexError in parse_rows()."
PARSE_ROWS = '''\
def parse_rows(rows):
    """Turn a header row and data rows into dicts."""
    header = rows[0]
    return [dict(zip(header, row)) for row in rows[1:]]


if __name__ == "__main__":
    print(parse_rows([]))
'''
#: The short system prompt of the minimal runs (see ``Agent.args``).
SHORT_SYSTEM = "You are a coding agent. Fix the user's bug."
VLLM_ARGS = ["--reasoning-parser", "qwen3", "--dtype", "float32", "--enforce-eager",
             "--gpu-memory-utilization", "0.15", "--max-model-len", "131072",
             "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
VLLM_ENV = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "VLLM_CPU_KVCACHE_SPACE": "2",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1"}
#: How each agent's own guard announces itself, when it has one (searched in its output).
GUARDS = {"qwen-loop-detection": r"potential loop was detected|Loop detection halted the run",
          "claude-max-turns": r"(?i)max(imum)? turns", "codex-turn-limit": r"(?i)turn limit"}
SIDECAR_CONFIG = """\
# [e2e-agents] as the e2e suite's: thinking off first, then salvage, 3 attempts.
mode = "enforce"
log_format = "json"
[reissue]
ladder = ["no-think", "salvage"]
max_attempts = 3
"""

#: The sidecar's config for the tool-call loop runs (issue 39): the agent-loop action,
#: and a lower ``repeat_min`` where the agent's own guard fires before the default (6).
TOOL_LOOP_CONFIG = """\
# [e2e-agents] tool-call loops: the agent-loop action under test.
mode = "enforce"
log_format = "json"
agent_loops = "{action}"
[agent_loop_detector]
repeat_min = {repeat_min}
"""
#: The sidecar's threshold per agent: Qwen Code halts by itself after its 5th identical
#: call, before the default 6, so its runs use 3 (and report which guard fired first).
REPEAT_MIN = {"claude": 6, "codex": 6, "qwen": 3}
#: How every nudge note begins (sidecar.core.agent_loops.NOTE_MARK).
NOTE_MARK = "[runaway-sidecar: agent loop]"
#: How every refusal begins (sidecar.core.agent_loops.refusal_text).
REFUSAL = "runaway-sidecar stopped an agent loop"
#: vLLM's logging with its request logger at DEBUG (``--enable-log-requests``): each
#: request's body and rendered prompt go to vLLM's log, where the nudge note is seen as
#: the upstream got it. Only the tool-call loop servers log so (their prompts are short).
VLLM_REQUEST_LOGGING = {
    "version": 1, "disable_existing_loggers": False,
    "formatters": {"vllm": {"()": "vllm.logging_utils.NewLineFormatter",
                            "format": "%(levelname)s %(asctime)s %(name)s %(message)s"}},
    "handlers": {"vllm": {"class": "logging.StreamHandler", "formatter": "vllm",
                          "level": "DEBUG", "stream": "ext://sys.stdout"}},
    "loggers": {"vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False},
                "vllm.entrypoints.serve.utils.request_logger": {"level": "DEBUG"},
                # vLLM hands this file to uvicorn too: its access log counts the turns.
                "uvicorn": {"handlers": ["vllm"], "level": "INFO", "propagate": False},
                "uvicorn.access": {"handlers": ["vllm"], "level": "INFO",
                                   "propagate": False}},
}

T0 = time.monotonic()


def say(message: str) -> None:
    """One progress line, with the seconds since start."""
    print(f"e2e-agents [{time.monotonic() - T0:5.0f}s] {message}", file=sys.stderr, flush=True)


class Failed(Exception):
    """A check failed (the run goes on with the next agent; the exit status is 1)."""


# -- the agents ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Agent:
    """One coding agent: how it is installed, configured and run headless."""

    name: str
    package: str
    version: str
    binary: str
    #: The sidecar's route label of the API it speaks, and that API's path.
    route: str
    path: str

    def home(self, home: Path, base_url: str, model: str, prompts: str) -> dict[str, str]:
        """Write the agent's configuration into the throwaway ``home``; return its env
        (``prompts``: see :meth:`args`)."""
        env = {"HOME": str(home), "NO_UPDATE_NOTIFIER": "1", "DO_NOT_TRACK": "1"}
        if self.name == "claude":
            env |= {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "e2e",
                    "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "3000", "DISABLE_TELEMETRY": "1",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1"}
        elif self.name == "codex":
            codex = home / ".codex"
            codex.mkdir(parents=True)
            # A model provider on the node; no update check, analytics, feedback, OTel
            # export, and no plugin marketplace (it looks github.com up otherwise).
            (codex / "config.toml").write_text(
                f'model = "{model}"\nmodel_provider = "node"\n'
                "check_for_update_on_startup = false\n"
                "[model_providers.node]\n"
                f'name = "node"\nbase_url = "{base_url}/v1"\nwire_api = "responses"\n'
                'env_key = "NODE_API_KEY"\n'
                "[analytics]\nenabled = false\n[feedback]\nenabled = false\n"
                '[otel]\nexporter = "none"\n[features]\nplugins = false\n',
                encoding="utf-8")
            (home / "instructions.md").write_text(SHORT_SYSTEM + "\n", encoding="utf-8")
            env |= {"NODE_API_KEY": "e2e", "CODEX_HOME": str(codex)}
        else:
            qwen = home / ".qwen"
            qwen.mkdir(parents=True)
            # Usage statistics off (they go to a remote RUM endpoint otherwise: this is why
            # Qwen Code runs without --bare, which ignores this file), no telemetry, no
            # update check; the minimal runs also leave out the memory-extraction request
            # that follows each answer.
            settings: dict[str, Any] = {
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
                "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}
            if prompts == "minimal":
                settings["memory"] = {"enableManagedAutoMemory": False}
            (qwen / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
            env |= {"OPENAI_BASE_URL": base_url + "/v1", "OPENAI_API_KEY": "e2e",
                    "OPENAI_MODEL": model}
        return env

    def args(self, binary: Path, home: Path, model: str, prompts: str,
             tools: bool = False) -> list[str]:
        """The headless command line. ``prompts="minimal"`` leaves out what the agent lets
        one leave out (tools, the long built-in system prompt, context discovery), so the
        CPU build's prefill stays short; ``"full"`` runs the agent as it comes. ``tools``
        (the tool-call loop runs): Claude Code keeps its Bash tool, allowed to run ``grep``
        (the other two keep their tools in either mode)."""
        minimal = prompts == "minimal"
        if self.name == "claude":
            out = [str(binary), "-p", PROMPT, "--model", model, "--no-session-persistence"]
            if minimal:
                out += ["--bare", "--tools", "Bash" if tools else "",
                        "--system-prompt", SHORT_SYSTEM]
            if tools:
                out += ["--allowedTools", "Bash(grep:*)"]
            return out
        if self.name == "codex":
            out = [str(binary), "exec", "--skip-git-repo-check", "--ephemeral",
                   "--color", "never"]
            if minimal:
                out += ["-c", f'model_instructions_file="{home / "instructions.md"}"']
            return [*out, PROMPT]
        out = [str(binary)]
        if minimal:
            out += ["--system-prompt", SHORT_SYSTEM]
        return [*out, PROMPT]


AGENTS = {
    "claude": Agent("claude", "@anthropic-ai/claude-code", "2.1.332", "claude", "messages",
                    "/v1/messages"),
    "codex": Agent("codex", "@openai/codex", "0.171.0", "codex", "responses",
                   "/v1/responses"),
    "qwen": Agent("qwen", "@qwen-code/qwen-code", "0.24.4", "qwen", "chat",
                  "/v1/chat/completions"),
}


# -- processes -------------------------------------------------------------------------------


class Processes:
    """Everything started, each in its own process group; all stopped by ``stop_all``."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], log: Path, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` in a new session, output to ``log``."""
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                    start_new_session=True)
        self.running.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
        """SIGTERM to the leader (vLLM then stops its engine in order), SIGKILL to whatever
        is left of the group after ``grace`` seconds."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc in self.running:
            self.running.remove(proc)

    def stop_all(self) -> None:
        """Stop every process still running, the last started first."""
        for proc in reversed(list(self.running)):
            self.stop(proc)


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, timeout: float = 5.0) -> str:
    """GET a loopback URL; the body as text (raises on errors and non-2xx statuses)."""
    assert url.startswith("http://127.0.0.1:"), url
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback only)
        body: bytes = resp.read()
        return body.decode("utf-8", "replace")


def wait_http(url: str, proc: subprocess.Popen[bytes], seconds: float, what: str) -> None:
    """Poll ``url`` until it answers, the process exits or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            http_get(url, timeout=2.0)
        except (OSError, urllib.error.URLError):
            if proc.poll() is not None:
                raise Failed(f"{what} exited with status {proc.returncode}") from None
            if time.monotonic() > deadline:
                raise Failed(f"{what} did not answer {url} in {seconds:g}s") from None
            time.sleep(0.5)
        else:
            return


# -- what the servers say ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scrape:
    """vLLM's counters for one model, and the sidecar's requests counters (if any)."""

    running: float
    waiting: float
    generated: float
    prompt: float
    #: runaway_sidecar_requests_total by (route, outcome).
    requests: dict[tuple[str, str], float] = field(default_factory=dict)


def scrape(vllm_url: str, model: str, sidecar_metrics: str | None) -> Scrape:
    """Read vLLM's ``/metrics`` for ``model`` (and the sidecar's, when given)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(http_get(vllm_url + "/metrics")):
        for sample in family.samples:
            if sample.labels.get("model_name") == model:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    requests: dict[tuple[str, str], float] = {}
    if sidecar_metrics is not None:
        for family in text_string_to_metric_families(http_get(sidecar_metrics + "/metrics")):
            for sample in family.samples:
                if sample.name == "runaway_sidecar_requests_total":
                    key = (sample.labels["route"], sample.labels["outcome"])
                    requests[key] = requests.get(key, 0.0) + sample.value
    return Scrape(values.get("vllm:num_requests_running", 0.0),
                  values.get("vllm:num_requests_waiting", 0.0),
                  values.get("vllm:generation_tokens_total", 0.0),
                  values.get("vllm:prompt_tokens_total", 0.0), requests)


def wait_idle(vllm_url: str, model: str, sidecar_metrics: str | None,
              seconds: float = 10.0) -> tuple[Scrape, float]:
    """Poll until vLLM runs nothing for ``model`` and its generation counter stays put for
    a second; return that scrape and the seconds it took. Raises ``Failed`` after
    ``seconds``."""
    start = time.monotonic()
    last: Scrape | None = None
    while True:
        now = scrape(vllm_url, model, sidecar_metrics)
        if now.running == 0 and now.waiting == 0:
            if last is not None and last.generated == now.generated:
                return now, time.monotonic() - start
            last = now
            time.sleep(1.0)
            continue
        last = None
        if time.monotonic() - start > seconds:
            raise Failed(f"vLLM still busy {seconds:g}s after the agent exited: {now}")
        time.sleep(0.1)


_ADDRESS = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')
_LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def non_loopback(strace_log: Path) -> list[str]:
    """The addresses other than loopback in an strace log of connect/send calls."""
    found = []
    for line in strace_log.read_text(errors="replace").splitlines():
        for v4, v6 in _ADDRESS.findall(line):
            address = v4 or v6
            if address not in _LOOPBACK:
                found.append(line.strip()[:200])
    return found


def sidecar_log_since(log: Path, offset: int) -> dict[str, Any]:
    """What the sidecar logged after byte ``offset``: its access lines (path, route,
    outcome), runaways, runaway-memory hits and agent loops (with the number of the
    request they came with)."""
    with log.open("rb") as fh:
        fh.seek(offset)
        lines = fh.read().decode("utf-8", "replace").splitlines()
    access, runaways, memory_hits, agent_loops = [], 0, 0, []
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = event.get("event") if isinstance(event, dict) else None
        if kind == "access":
            access.append({k: event.get(k) for k in ("path", "route", "outcome", "status")})
        elif kind == "runaway":
            runaways += 1
        elif kind == "runaway_memory_hit":
            memory_hits += 1
        elif kind == "agent_loop":
            # The request it came with: the access lines logged before it, plus this one.
            agent_loops.append({"request": len(access) + 1,
                                **{k: event.get(k) for k in ("kind", "action", "reason",
                                                             "calls", "count")}})
    return {"access": access, "runaways": runaways, "memory_hits": memory_hits,
            "agent_loops": agent_loops}


def vllm_requests_since(log: Path, offset: int, path: str) -> int:
    """Requests for ``path`` in vLLM's own access log after byte ``offset``."""
    with log.open("rb") as fh:
        fh.seek(offset)
        text = fh.read().decode("utf-8", "replace")
    return len(re.findall(rf'"POST {re.escape(path)}[?" ]', text))


def vllm_logged_bodies(log: Path, offset: int) -> list[str]:
    """The request bodies vLLM's request logger wrote after byte ``offset`` (its
    ``JSON body`` lines; see ``VLLM_REQUEST_LOGGING``), one per request."""
    with log.open("rb") as fh:
        fh.seek(offset)
        text = fh.read().decode("utf-8", "replace")
    return [line for line in text.splitlines() if " JSON body: " in line]


# -- the run -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Node:
    """A running vLLM server for one model, and optionally a sidecar in front of it."""

    kind: str
    model: str
    vllm_url: str
    vllm_log: Path
    sidecar_url: str | None = None
    sidecar_metrics: str | None = None
    sidecar_log: Path | None = None


@dataclass(slots=True)
class Driver:
    """One invocation of the suite (see the module docstring)."""

    logs: Path
    models: Path
    vllm_python: Path
    agents_dir: Path
    agents: list[Agent]
    prompts: str
    baseline: bool
    agent_timeout: float
    baseline_timeout: float
    health_timeout: float
    procs: Processes = field(default_factory=Processes)
    failures: list[str] = field(default_factory=list)
    stages: list[tuple[str, float]] = field(default_factory=list)
    #: Requests each agent made for the healthy answer through the sidecar.
    healthy_requests: dict[str, int] = field(default_factory=dict)
    loop_requests: dict[str, int] = field(default_factory=dict)
    #: The tool-call loop models (tests/e2e/tiny_agent_model.py); None: no such phase.
    agent_models: Path | None = None
    #: Run only the tool-call loop phase (with --baseline: the before figures of issue 39).
    only_tool_loops: bool = False
    #: The bound of one tool-call loop run through a sidecar, seconds.
    sidecar_loop_timeout: float = 90.0

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage (logged, and kept for the summary)."""
        start = time.monotonic()
        say(f"{name} ...")
        try:
            yield
        finally:
            seconds = time.monotonic() - start
            self.stages.append((name, seconds))
            say(f"{name}: {seconds:.1f}s")

    def report(self, **data: Any) -> None:
        """Append one line to the run report."""
        with (self.logs / "report.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(data) + "\n")

    def model_dir(self, kind: str) -> Path:
        """The model of ``kind``: the tool-call loop models (``agent-NAME``) are built by
        tests/e2e/tiny_agent_model.py into their own directory."""
        if kind.startswith("agent-"):
            assert self.agent_models is not None, "no --agent-models"
            return self.agent_models / kind
        return self.models / kind

    def answer(self, kind: str) -> str:
        """The answer the model of ``kind`` gives (from its build's script.json)."""
        info = json.loads((self.model_dir(kind) / "script.json").read_text(encoding="utf-8"))
        answer: str = info["answer"]
        return answer

    # -- servers -------------------------------------------------------------------------

    def start_vllm(self, kind: str, log_requests: bool = False) -> Node:
        """Start vLLM serving the model of ``kind`` and wait until it answers;
        ``log_requests``: each request's body and prompt go to its log
        (``VLLM_REQUEST_LOGGING``)."""
        port = free_port()
        log = self.logs / f"vllm-{kind}.log"
        env = {**os.environ, **VLLM_ENV,
               "PYTHONPATH": str(ROOT / "tests" / "e2e" / "vllm_site")}
        extra: list[str] = []
        if log_requests:
            logging_config = self.logs / "vllm-request-logging.json"
            logging_config.write_text(json.dumps(VLLM_REQUEST_LOGGING), encoding="utf-8")
            env["VLLM_LOGGING_CONFIG_PATH"] = str(logging_config)
            extra = ["--enable-log-requests"]
        proc = self.procs.start(
            [str(self.vllm_python), "-m", "vllm.entrypoints.openai.api_server",
             "--model", str(self.model_dir(kind)), "--served-model-name", f"tiny-{kind}",
             "--host", "127.0.0.1", "--port", str(port), *VLLM_ARGS, *extra], log, env=env)
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health", proc, self.health_timeout, f"vLLM ({kind})")
        return Node(kind, f"tiny-{kind}", url, log)

    def start_sidecar(self, node: Node, config: str = SIDECAR_CONFIG,
                      name: str = "") -> subprocess.Popen[bytes]:
        """Start a sidecar in front of ``node``'s vLLM (config ``SIDECAR_CONFIG`` unless
        given; ``name`` tells its files apart); it becomes the node's sidecar."""
        stem = f"sidecar-{node.kind}{'-' + name if name else ''}"
        cfg = self.logs / f"{stem}.toml"
        cfg.write_text(config, encoding="utf-8")
        port, mport = free_port(), free_port()
        log = self.logs / f"{stem}.log"
        proc = self.procs.start(
            [sys.executable, "-m", "sidecar", "serve", "--config", str(cfg),
             "--upstream", node.vllm_url, "--listen", f"127.0.0.1:{port}",
             "--metrics-listen", f"127.0.0.1:{mport}"], log, cwd=ROOT)
        node.sidecar_url = f"http://127.0.0.1:{port}"
        node.sidecar_metrics = f"http://127.0.0.1:{mport}"
        node.sidecar_log = log
        wait_http(node.sidecar_url + "/v1/models", proc, 60, "the sidecar")
        return proc

    # -- one agent run ---------------------------------------------------------------------

    def run_agent(self, agent: Agent, node: Node, *, via: str, timeout: float,
                  label: str, tools: bool = False,
                  max_turns: int | None = None) -> dict[str, Any]:
        """Run ``agent`` once against ``node`` (``via`` ``sidecar`` or ``vllm``); return
        its output and figures: ``seconds`` until it exited, ``answer_seconds`` until the
        model's answer first showed in its output (None: never; an agent may go on
        working after it, Qwen Code's memory extraction for one). ``max_turns``: the
        agent is stopped (``turn_bound``) once vLLM has served that many of its requests.
        The network check runs here: a run that reached any non-loopback address fails."""
        base_url = node.sidecar_url if via == "sidecar" else node.vllm_url
        assert base_url is not None
        run_dir = self.logs / label
        home, work = run_dir / "home", run_dir / "work"
        home.mkdir(parents=True)
        work.mkdir()
        (work / "parse_rows.py").write_text(PARSE_ROWS, encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "TERM": "dumb", **agent.home(home, base_url, node.model, self.prompts)}
        binary = self.agents_dir / f"{agent.name}-{agent.version}" / "node_modules" / ".bin" \
            / agent.binary
        argv = agent.args(binary, home, node.model, self.prompts, tools=tools)
        strace = run_dir / "network.strace"
        argv = ["strace", "-f", "--seccomp-bpf", "-qq", "-e", "signal=none",
                "-e", "trace=connect,sendto,sendmsg,sendmmsg", "-o", str(strace), "--",
                *argv]
        metrics = node.sidecar_metrics if via == "sidecar" else None
        before, _ = wait_idle(node.vllm_url, node.model, metrics)
        vllm_offset = node.vllm_log.stat().st_size
        sidecar_offset = node.sidecar_log.stat().st_size if node.sidecar_log else 0
        stdout, stderr = run_dir / "stdout.txt", run_dir / "stderr.txt"
        # The tool-call loop models give no answer: b"\0" never shows in an agent's output.
        answer = b"\0" if tools else self.answer(node.kind).encode()
        answer_seconds: float | None = None
        start = time.monotonic()
        with stdout.open("wb") as out, stderr.open("wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=env, cwd=work, start_new_session=True)
            self.procs.running.append(proc)
            timed_out = turn_bound = False
            while proc.poll() is None:
                if answer_seconds is None and answer in stdout.read_bytes():
                    answer_seconds = time.monotonic() - start
                if time.monotonic() - start > timeout:
                    timed_out = True
                    break
                if max_turns is not None and vllm_requests_since(
                        node.vllm_log, vllm_offset, agent.path) >= max_turns:
                    turn_bound = True
                    break
                time.sleep(0.1)
            seconds = time.monotonic() - start
            if turn_bound:
                # At once: the agents make several turns a second here, and strace leaves
                # them running for the grace period when it gets a SIGTERM.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            self.procs.stop(proc, grace=5.0)
        if answer_seconds is None and answer in stdout.read_bytes():
            answer_seconds = seconds
        after, idle_wait = wait_idle(node.vllm_url, node.model, metrics, seconds=10.0)
        text = stdout.read_text(errors="replace")
        result: dict[str, Any] = {
            "run": label, "agent": agent.name, "version": agent.version, "model": node.model,
            "via": via, "prompts": self.prompts, "seconds": round(seconds, 2),
            "answer_seconds": None if answer_seconds is None else round(answer_seconds, 2),
            "timed_out": timed_out, "turn_bound": turn_bound, "exit_status": proc.returncode,
            "generation_tokens": after.generated - before.generated,
            "prompt_tokens": after.prompt - before.prompt,
            "vllm_requests": vllm_requests_since(node.vllm_log, vllm_offset, agent.path),
            "idle_after_seconds": round(idle_wait, 2),
            "output": text.strip()[-300:],
            "stderr": stderr.read_text(errors="replace").strip()[-300:],
            "vllm_offset": vllm_offset,
        }
        if node.sidecar_log is not None and via == "sidecar":
            logged = sidecar_log_since(node.sidecar_log, sidecar_offset)
            result |= {"sidecar_requests": len(logged["access"]),
                       "sidecar_access": logged["access"], "runaways": logged["runaways"],
                       "agent_loops": logged["agent_loops"],
                       "memory_hits": logged["memory_hits"],
                       "reissued": after.requests.get((agent.route, "reissued"), 0.0)
                       - before.requests.get((agent.route, "reissued"), 0.0)}
        reached = non_loopback(strace)
        result["non_loopback"] = reached
        self.report(**result)
        say(f"{label}: {seconds:.1f}s, vLLM generated {result['generation_tokens']:g} tokens"
            f" (prefilled {result['prompt_tokens']:g}), {result['vllm_requests']} request(s)"
            f"; output {text.strip()[-80:]!r}")
        if reached:
            raise Failed(f"{label}: the agent reached non-loopback addresses: {reached[:3]}")
        return result

    def check(self, ok: bool, message: str) -> None:
        """Record a failed check (the run goes on)."""
        if not ok:
            self.failures.append(message)
            say(f"FAILED: {message}")

    # -- the phases --------------------------------------------------------------------------

    def loop_phase(self) -> None:
        """The looping model: through the sidecar (the checks), and ``--baseline`` direct."""
        with self.stage("vLLM start (loop)"):
            node = self.start_vllm("loop")
            self.start_sidecar(node)
        answer = self.answer("loop")
        for agent in self.agents:
            label = f"{agent.name}-loop-sidecar"
            with self.stage(label):
                try:
                    got = self.run_agent(agent, node, via="sidecar", timeout=self.agent_timeout,
                                         label=label)
                except Failed as exc:
                    self.check(False, str(exc))
                    continue
                self.check(not got["timed_out"], f"{label}: no exit in {self.agent_timeout}s")
                self.check(answer in got["output"],
                           f"{label}: the output does not hold the answer {answer!r}")
                self.check(got["reissued"] >= 1,
                           f"{label}: no runaway counted on route {agent.route}")
                self.check(all(a["route"] == agent.route for a in got["sidecar_access"]),
                           f"{label}: requests on another route: {got['sidecar_access']}")
                self.check(got["memory_hits"] == 0,
                           f"{label}: the agent sent a prompt that ran away again")
                self.loop_requests[agent.name] = got["sidecar_requests"]
        if self.baseline:
            assert node.sidecar_url is not None
            for agent in self.agents:
                label = f"{agent.name}-loop-direct"
                with self.stage(label):
                    try:
                        got = self.run_agent(agent, node, via="vllm",
                                             timeout=self.baseline_timeout, label=label)
                    except Failed as exc:
                        self.check(False, str(exc))
        with self.stage("vLLM stop (loop)"):
            self.procs.stop_all()

    def healthy_phase(self) -> None:
        """The healthy model: each agent directly and through the sidecar, same output."""
        with self.stage("vLLM start (healthy)"):
            node = self.start_vllm("healthy")
            self.start_sidecar(node)
        answer = self.answer("healthy")
        for agent in self.agents:
            label = f"{agent.name}-healthy"
            with self.stage(label):
                try:
                    direct = self.run_agent(agent, node, via="vllm", timeout=self.agent_timeout,
                                            label=label + "-direct")
                    proxied = self.run_agent(agent, node, via="sidecar",
                                             timeout=self.agent_timeout,
                                             label=label + "-sidecar")
                except Failed as exc:
                    self.check(False, str(exc))
                    continue
                self.check(answer in direct["output"],
                           f"{label}: the direct output does not hold the answer {answer!r}")
                self.check(proxied["output"] == direct["output"],
                           f"{label}: output differs through the sidecar: "
                           f"{proxied['output']!r} != {direct['output']!r}")
                self.check(proxied["vllm_requests"] == direct["vllm_requests"],
                           f"{label}: {proxied['vllm_requests']} requests through the sidecar,"
                           f" {direct['vllm_requests']} directly")
                self.check(proxied["runaways"] == 0 and proxied["reissued"] == 0,
                           f"{label}: the sidecar cut a healthy answer")
                self.healthy_requests[agent.name] = proxied["sidecar_requests"]
        with self.stage("vLLM stop (healthy)"):
            self.procs.stop_all()

    def tool_loop_phase(self) -> None:
        """The scripted tool-call loop (issue 39): each agent against its own tiny model,
        which calls the same tool with the same arguments on every turn.

        ``--baseline``: first without the sidecar, until the agent stops by itself (its
        turn limit, its own loop guard) or the time bound (``--baseline-timeout``); the
        report gets the turns (requests vLLM served), the tokens, the seconds and which
        guard, if any, the output names. Then, always, through a sidecar with
        ``agent_loops = "nudge"`` and with ``"refuse"`` (``tool_loop_sidecar``)."""
        for agent in self.agents:
            kind = f"agent-{agent.name}"
            with self.stage(f"vLLM start ({kind})"):
                node = self.start_vllm(kind, log_requests=True)
            if self.baseline:
                self.tool_loop_direct(agent, node)
            for action in ("nudge", "refuse"):
                with self.stage(f"{agent.name}-toolloop-{action}"):
                    try:
                        self.tool_loop_sidecar(agent, node, action)
                    except Failed as exc:
                        self.check(False, str(exc))
            with self.stage(f"vLLM stop ({kind})"):
                self.procs.stop_all()

    def tool_loop_direct(self, agent: Agent, node: Node) -> None:
        """The baseline: the agent on its loop model without the sidecar."""
        label = f"{agent.name}-toolloop-direct"
        with self.stage(label):
            try:
                got = self.run_agent(agent, node, via="vllm", timeout=self.baseline_timeout,
                                     label=label, tools=True)
            except Failed as exc:
                self.check(False, str(exc))
                return
            guard = self.guard(label)
            self.report(run=label + "-summary", agent=agent.name, turns=got["vllm_requests"],
                        seconds=got["seconds"], timed_out=got["timed_out"],
                        exit_status=got["exit_status"], guard=guard,
                        prompt_tokens=got["prompt_tokens"],
                        generation_tokens=got["generation_tokens"])
            say(f"{label}: {got['vllm_requests']} turns in {got['seconds']:.0f}s, "
                f"guard {guard}, timed out {got['timed_out']}")

    def guard(self, label: str) -> str | None:
        """The agent's own guard that the run's output names, if any (``GUARDS``)."""
        text = (self.logs / label / "stdout.txt").read_text(errors="replace") + \
            (self.logs / label / "stderr.txt").read_text(errors="replace")
        return next((name for name, pattern in GUARDS.items() if re.search(pattern, text)),
                    None)

    def tool_loop_sidecar(self, agent: Agent, node: Node, action: str) -> None:
        """The agent on its loop model through a sidecar with ``agent_loops = action``
        (threshold ``REPEAT_MIN``: K). Checked: the sidecar logs the loop once, on the
        request that carries the K-th identical call (turn K+1); ``nudge``: vLLM's
        request log shows the note in that request's body and in no other, and the agent
        goes on (stopped at turn K+3, or by its own guard); ``refuse``: nothing more goes
        upstream and the agent exits with the sidecar's message in its output."""
        k = REPEAT_MIN[agent.name]
        label = f"{agent.name}-toolloop-{action}"
        proc = self.start_sidecar(node, TOOL_LOOP_CONFIG.format(action=action, repeat_min=k),
                                  name=action)
        try:
            got = self.run_agent(agent, node, via="sidecar", timeout=self.sidecar_loop_timeout,
                                 label=label, tools=True,
                                 max_turns=k + 3 if action == "nudge" else None)
        finally:
            self.procs.stop(proc, grace=5.0)
        assert node.sidecar_log is not None
        loops = got["agent_loops"]
        first = loops[0] if loops else None
        bodies = vllm_logged_bodies(node.vllm_log, got["vllm_offset"])
        noted = [n + 1 for n, body in enumerate(bodies) if NOTE_MARK in body]
        guard = self.guard(label)
        output = (self.logs / label / "stdout.txt").read_text(errors="replace") + \
            (self.logs / label / "stderr.txt").read_text(errors="replace")
        refused = REFUSAL in output
        self.report(run=label + "-summary", agent=agent.name, action=action, repeat_min=k,
                    first_seen=first, loops=loops, turns=got["vllm_requests"],
                    sidecar_requests=got["sidecar_requests"], vllm_bodies_logged=len(bodies),
                    note_in_vllm_request=noted, seconds=got["seconds"],
                    timed_out=got["timed_out"], turn_bound=got["turn_bound"],
                    exit_status=got["exit_status"], guard=guard, refusal_in_output=refused)
        say(f"{label}: loop first seen at request {first and first['request']} "
            f"({first and first['action']}, count {first and first['count']}); vLLM served "
            f"{got['vllm_requests']}, note in vLLM request(s) {noted}; guard {guard}; "
            f"refusal in output {refused}; {got['seconds']:.1f}s")
        self.check(first is not None and first["request"] == k + 1 and first["count"] == k
                   and first["action"] == action,
                   f"{label}: the loop was not seen at turn {k + 1} with {action}: {loops}")
        if action == "nudge":
            self.check(noted == [k + 1] and len(bodies) == got["vllm_requests"],
                       f"{label}: the note is in vLLM request(s) {noted} of {len(bodies)} "
                       f"logged, not in request {k + 1} alone")
            self.check(all(loop["action"] == "passed" for loop in loops[1:]),
                       f"{label}: more than one nudge in the episode: {loops}")
            self.check(got["vllm_requests"] > k + 1,
                       f"{label}: the agent did not go on after the nudge")
        else:
            self.check(got["vllm_requests"] == k and not noted,
                       f"{label}: vLLM served {got['vllm_requests']} requests, not {k}")
            self.check(not got["timed_out"], f"{label}: the agent did not stop on the refusal")
            self.check(refused, f"{label}: the sidecar's message is not in the output: "
                       f"{got['output'][-200:]!r} {got['stderr'][-200:]!r}")

    def run(self) -> int:
        """The phases; then the request-count check and the summary."""
        try:
            if self.agent_models is not None:
                self.tool_loop_phase()
            if not self.only_tool_loops:
                self.loop_phase()
                self.healthy_phase()
        finally:
            self.procs.stop_all()
        for name, count in self.loop_requests.items():
            healthy = self.healthy_requests.get(name)
            self.check(healthy is None or count == healthy,
                       f"{name}: {count} request(s) for the looping model, {healthy} for a "
                       "healthy answer: the agent asked again")
        say("stages: " + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in self.stages))
        say("report:")
        for line in (self.logs / "report.jsonl").read_text(encoding="utf-8").splitlines():
            data = json.loads(line)
            print(json.dumps({k: v for k, v in data.items() if k != "sidecar_access"}),
                  file=sys.stderr)
        if self.failures:
            say(f"{len(self.failures)} check(s) failed:")
            for failure in self.failures:
                print(f"  - {failure}", file=sys.stderr)
            return 1
        say("all agents passed")
        return 0


def main(argv: list[str] | None = None) -> int:
    """Command line (normally called by scripts/e2e-agents.sh)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--agent-models", type=Path, default=None,
                        help="the tool-call loop models (tests/e2e/tiny_agent_model.py)")
    parser.add_argument("--only-tool-loops", action="store_true",
                        help="run only the tool-call loop phase")
    parser.add_argument("--vllm-python", type=Path, required=True)
    parser.add_argument("--agents-dir", type=Path, required=True)
    parser.add_argument("--agents", default="claude,codex,qwen")
    parser.add_argument("--prompts", choices=("minimal", "full"), default="minimal")
    parser.add_argument("--baseline", action="store_true")
    parser.add_argument("--agent-timeout", type=float, default=600)
    parser.add_argument("--baseline-timeout", type=float, default=300)
    parser.add_argument("--loop-timeout", type=float, default=90,
                        help="limit for one tool-call loop run through a sidecar, seconds")
    parser.add_argument("--health-timeout", type=float, default=300)
    parser.add_argument("--timeout", type=float, default=3600, help="overall limit, seconds")
    args = parser.parse_args(argv)

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(f"e2e-agents: stopped by signal {signum} (or the overall limit)")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(int(args.timeout))
    driver = Driver(
        logs=args.logs, models=args.models, vllm_python=args.vllm_python,
        agents_dir=args.agents_dir, agents=[AGENTS[a] for a in args.agents.split(",") if a],
        prompts=args.prompts, baseline=args.baseline, agent_timeout=args.agent_timeout,
        baseline_timeout=args.baseline_timeout, health_timeout=args.health_timeout,
        agent_models=args.agent_models, only_tool_loops=args.only_tool_loops,
        sidecar_loop_timeout=args.loop_timeout)
    return driver.run()


if __name__ == "__main__":
    sys.exit(main())
