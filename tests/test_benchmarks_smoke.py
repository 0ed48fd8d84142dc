"""CI smoke run of the load benchmark: it still runs and reports every field (no timing).

Tests marked ``system`` need a program or a privilege from outside the venv (``perf``; root
for cgroups), and ``slow`` ones take many seconds (bytecode tracing): the default test run
deselects both, and ``.ci/run`` runs them after installing what they need."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from benchmarks import cpuquota, hotpath, native, time_to_answer
from benchmarks.floor import READERS, parse_events
from benchmarks.floor import make_app as make_floor_app
from benchmarks.floor import make_lean_app as make_lean_floor_app
from benchmarks.loadgen import APIS, Api, LoadResult, LoadSpec, percentile, run_load
from benchmarks.margins import scores as margin_scores
from benchmarks.procs import Proc, cpu_by_process, cpu_seconds, cpu_times, descendants
from benchmarks.run import _ANSWER_TOKENS, _answer_trace, _hold_idle, _prompt, _serving_pids
from benchmarks.separation import copied, hedging, stalled_vocabulary
from detectors import DetectorConfig
from tests.stack import Stack, start_stack, stop_stack

FIELDS = {
    "concurrency", "rate", "streams", "chunks", "window_s", "chunks_per_s", "offered_per_s",
    "gap_p50_ms", "gap_p99_ms", "late_p99_ms", "ttfb_p50_ms", "ttfb_p99_ms", "errors",
    "spliced", "wall_s", "events_per_read", "error_samples",
}


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    """A simulator paced at 50 tok/s with an enforcing sidecar in front."""
    s = await start_stack(50.0, mode="enforce")
    yield s
    await stop_stack(s)


def _check(result: LoadResult) -> None:
    assert set(asdict(result)) == FIELDS
    assert result.errors == 0, result.error_samples
    assert result.streams >= 2
    assert result.chunks > result.streams  # every stream carried more than one event
    assert result.spliced == 0  # healthy text: no detector fired
    assert result.events_per_read >= 1.0
    for value in (result.chunks_per_s, result.gap_p50_ms, result.gap_p99_ms,
                  result.late_p99_ms, result.ttfb_p50_ms, result.ttfb_p99_ms):
        assert math.isfinite(value)
        assert value >= 0


@pytest.mark.parametrize("api", APIS)
async def test_loadgen_through_sidecar(stack: Stack, api: Api) -> None:
    """Two paced streams for about a second through the sidecar finish cleanly on every
    wire API the load drives, and the load says when its ramp is over (every worker
    started)."""
    ramped = asyncio.Event()
    result = await run_load(LoadSpec(stack.url, concurrency=2, duration=1.0, rate=50.0,
                                     max_tokens=30, grace=20.0, api=api), ramped)
    _check(result)
    assert ramped.is_set()


@pytest.mark.parametrize(("lean", "api"), [(False, "chat"), (True, "chat"),
                                           (True, "messages"), (True, "responses")])
async def test_loadgen_through_parsing_floor(stack: Stack, lean: bool, api: Api) -> None:
    """The bare parsing proxy of the benchmark relays complete streams too, on aiohttp's
    client and on the sidecar's (``parsing-lean``), and on every wire API."""
    app = (make_lean_floor_app(stack.sim_url) if lean else
           make_floor_app(stack.sim_url, parsing=True))
    floor = TestServer(app, host="127.0.0.1")
    await floor.start_server()
    try:
        url = str(floor.make_url("")).rstrip("/")
        result = await run_load(LoadSpec(url, concurrency=2, duration=1.0, rate=50.0,
                                         max_tokens=20, grace=20.0, api=api))
    finally:
        await floor.close()
    _check(result)


@pytest.mark.parametrize("api", APIS)
async def test_loadgen_counts_the_streams_the_sidecar_cut(api: Api) -> None:
    """A looping stream through the sidecar is cut and spliced on every API, and the load
    counts it as spliced (the sidecar's ``: runaway`` comment) with no error."""
    s = await start_stack(0.0, mode="enforce")
    try:
        result = await run_load(LoadSpec(s.url, concurrency=1, duration=0.1, rate=0.0,
                                         max_tokens=2000, model="sim-loop", max_streams=1,
                                         ramp=0, grace=20.0, api=api))
    finally:
        await stop_stack(s)
    assert (result.streams, result.errors, result.spliced) == (1, 0, 1), result.error_samples


@pytest.mark.parametrize(("path", "name"), [
    ("/v1/chat/completions", "vllm-0.32.0/chat_thinking_loop_usage.sse"),
    ("/v1/messages", "vllm-0.32.0-agent-apis/messages_thinking_loop.sse"),
    ("/v1/responses", "vllm-0.32.0-agent-apis/responses_thinking_loop.sse"),
    ("/v1/messages", "llama.cpp-agent-apis/messages_thinking_loop.sse"),
    ("/v1/responses", "llama.cpp-agent-apis/responses_thinking_loop.sse"),
])
def test_parsing_floor_reads_every_delta_of_each_api(path: str, name: str) -> None:
    """The parsing floors read, in each route's own format, all the delta text a capture
    carries (reasoning and answer), however its bytes are split, and forward the bytes
    unchanged."""
    body = (Path(__file__).parent / "data" / "captures" / name).read_bytes()
    expected = 0
    for raw in body.split(b"\n\n"):
        data = raw[raw.find(b"data: ") + 6:] if b"data: " in raw else b""
        if data and data != b"[DONE]":
            obj = json.loads(data)
            if path == "/v1/chat/completions":
                expected += sum(len(c["delta"].get(k) or "") for c in obj["choices"]
                                for k in ("reasoning", "content"))
            elif path == "/v1/messages":
                delta = obj.get("delta", {})
                expected += len(delta.get("thinking") or delta.get("text") or "")
            elif obj["type"].endswith(".delta"):
                expected += len(obj["delta"])
    assert expected > 100
    for size in (len(body), 7, 64):
        buf, out, chars = b"", b"", 0
        for at in range(0, len(body), size):
            done, buf, n = parse_events(buf, body[at:at + size], READERS[path])
            out, chars = out + done, chars + n
        assert (out + buf, chars) == (body, expected)


def test_time_to_answer_measures_each_api() -> None:
    """``time_to_answer --api``: a loop on each agent API is answered through the sidecar
    in a fraction of the time the node takes to reach max_tokens without it."""
    rows = asyncio.run(time_to_answer.run(["messages", "responses"], ["sim-loop"], 4000.0,
                                          1200, 1))
    assert [r["api"] for r in rows] == ["messages", "responses"]
    for row in rows:
        assert row["direct_tokens"] == 1200
        assert 0 < row["sidecar_tokens"] < 1200
        assert row["ratio"] < 1.0
        assert row["first_answer_s"] <= row["sidecar_s"]
        assert row["answer"].startswith("Fix")


async def test_memory_holds_streams_idle_in_waves(stack: Stack) -> None:
    """``memory``: five sim-stall streams opened two at a time through the sidecar all
    reach their idle point, and the measurement is taken once, with every one open."""
    open_at_measure: list[int] = []

    def measure() -> int:
        open_at_measure.append(int(stack.metric("runaway_sidecar_active_streams")))
        return 42

    started = time.monotonic()
    held, value = await _hold_idle(stack.url, 5, 24, 0.1, measure, wave=2)
    elapsed = time.monotonic() - started
    assert (held, value) == (5, 42)
    assert open_at_measure == [5]
    # Three waves one after another, each 24 tokens at the simulator's 50 tok/s (0.48 s):
    # all five at once would take one wave's time.
    assert elapsed >= 3 * 0.4, elapsed


async def test_memory_streams_can_carry_a_long_prompt(stack: Stack) -> None:
    """``memory --prompt-chars``: streams whose user message carries 4,000 characters of
    code still reach their idle point (the simulator counts the prompt in its context)."""
    held, _ = await _hold_idle(stack.url, 2, 24, 0.1, lambda: 0, wave=2, prompt_chars=4000)
    assert held == 2
    assert _prompt(7, 0) == "idle 7"
    long = _prompt(7, 4000)
    assert long.startswith("idle 7: ")
    assert 4000 < len(long) < 4100


def test_cpu_by_process_counts_each_child() -> None:
    """``cpu_by_process`` reports this process and a busy child separately, and the two
    add up to ``cpu_seconds`` (how a proxy of several workers is split)."""
    burn = ("import sys, time\nt = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass\nsys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while sum(cpu_by_process(os.getpid()).get(child.pid, (0.0, 0.0))) < 0.25:
            assert time.monotonic() < deadline, "the child never used 0.25 s of CPU"
            time.sleep(0.05)
        each = cpu_by_process(os.getpid())
        total = cpu_seconds(os.getpid())
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)
    assert set(each) >= {os.getpid(), child.pid}
    assert sum(each[child.pid]) >= 0.25
    assert total == pytest.approx(sum(map(sum, each.values())), abs=0.1)


async def test_memory_reports_a_stream_that_cannot_go_idle(stack: Stack) -> None:
    """A stream refused by the server fails ``memory`` at once with the status and the
    reason, instead of waiting out the idle timeout (a minute or more) for nothing."""
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="HTTP 404"):
        await _hold_idle(stack.url + "/no-such-prefix", 2, 30, 0.1, lambda: 0, wave=2)
    assert time.monotonic() - started < 10


def test_percentile_nearest_rank() -> None:
    """Nearest-rank percentiles: p50 of 1..10 is 5, p99 is 10, empty is NaN."""
    values = [float(v) for v in range(10, 0, -1)]
    assert percentile(values, 50) == 5.0
    assert percentile(values, 99) == 10.0
    assert math.isnan(percentile([], 50))


def test_hotpath_interleaved_reports_every_case(capsys: pytest.CaptureFixture[str]) -> None:
    """``hotpath --interleave`` feeds more streams than it fetched, an event of each in
    turn, and reports every case per event (the watch cases raise if a detector fires)."""
    assert hotpath.main(["--streams", "2", "--max-tokens", "20", "--reps", "1",
                         "--interleave", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["interleave"] == 5
    assert out["events"] % 5 == 0
    assert out["events"] >= 5 * 20
    assert set(out["us_per_event"]) == {"floor", "watch-nodetect", "watch-shadow",
                                        "watch-enforce"}
    assert all(v > 0 for v in out["us_per_event"].values())


@pytest.mark.slow
def test_opcodes_counts_each_proxys_own_bytecode() -> None:
    """``benchmarks.opcodes`` traces the floor and the sidecar in their own processes, and
    counts per chunk both aiohttp's bytecode and each proxy's own: the floor's parse is
    in the floor's list, the stream model in the sidecar's, neither in the other's."""
    proc = subprocess.run(
        # enforce-pure: the sidecar's source (a compiled build runs no bytecode of its own).
        [sys.executable, "-m", "benchmarks.opcodes", "--configs", "parsing,enforce-pure",
         "--streams", "2", "--duration", "1", "--max-tokens", "30", "--top", "40"],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tables = proc.stdout.split("\n\n")
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")
            for line in tables[0].splitlines()[2:]}
    assert set(rows) == {"parsing", "enforce-pure"}
    for cells in rows.values():
        assert int(cells[1]) > 0  # chunks
        assert cells[3] == "0"  # errors
        assert float(cells[4]) > 100  # bytecode per chunk: aiohttp alone executes more
    floor_list, sidecar_list = tables[1], tables[2]
    assert "benchmarks/floor.py:parse_events" in floor_list
    assert "benchmarks/floor.py:parse_events" not in sidecar_list
    assert "sidecar/apis/openai/chunks.py:StreamModel.match_event" in sidecar_list
    assert "aiohttp/" in floor_list
    assert "aiohttp/" in sidecar_list


def test_native_reads_perf_report_groups() -> None:
    """``benchmarks.native`` sums a ``perf report`` by group of shared objects; lines that
    are not sample rows (headers, blank) are skipped."""
    report = """
# comment
    40.00%          4000  [kernel.kallsyms]
    30.00%          3000  libpython3.11.so.1.0
     5.00%           500  loop.cpython-311-x86_64-linux-gnu.so
     2.00%           200  libc.so.6
     1.00%           100  orjson.cpython-311-x86_64-linux-gnu.so
     1.00%           100  _http_parser.cpython-311-x86_64-linux-gnu.so
"""
    assert native.group_samples(report) == {"kernel": 4000, "interpreter": 3000, "uvloop": 500,
                                            "libc": 200, "other C": 200}


@pytest.mark.system
def test_native_profiles_each_proxy_with_perf(tmp_path: Path) -> None:
    """``benchmarks.native`` samples the floor and the sidecar under a small paced load
    with ``perf record`` and prints samples per 1,000 chunks for each (``.ci/run``
    installs perf)."""
    assert shutil.which("perf"), "perf is required: apt-get install linux-perf"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.native", "--configs", "parsing,enforce", "-c", "4",
         "--seconds", "1", "--reps", "1", "--max-tokens", "100", "--keep", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = proc.stdout.split("\n\n")[1].splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in table[3:]}
    assert set(rows) == {"parsing", "enforce"}
    for cells in rows.values():
        assert float(cells[1]) > 0  # samples per 1,000 chunks, all
        assert float(cells[2]) > 0  # of which kernel: every chunk is read and written
    assert rows["parsing"][7] == "1.00"  # the first configuration is the reference
    assert sorted(p.name for p in tmp_path.glob("perf-*.data")) == [
        "perf-enforce-0.data", "perf-parsing-0.data"]


def test_cpu_times_split_user_and_kernel() -> None:
    """A process's CPU time from /proc is user plus kernel, and user time grows while
    Python computes (``/proc`` counts in clock ticks, so the spin is 0.3 s of CPU)."""
    pid = os.getpid()
    user0, sys0 = cpu_times(pid)
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:
        sum(range(1000))
    user1, sys1 = cpu_times(pid)
    assert user1 - user0 >= 0.2
    assert sys1 >= sys0 >= 0.0
    assert cpu_seconds(pid) >= user1 + sys1


def test_separation_copied_signal_grows_on_repeats_only() -> None:
    """The copied-shingle evidence stays at 0 on fresh text and grows on a repeated one."""
    fresh = " ".join(f"word{i}" for i in range(3000))
    paragraph = "Suppose A is a knight, then B is a knave, so A lied, which is a contradiction. "
    assert copied(fresh, 4, 0.5) == 0.0
    assert copied(paragraph * 120, 4, 0.5) > 10.0  # ~37 blocks, each adding ~0.5


def test_margins_scores_stay_low_on_fresh_text_and_reach_the_rules_on_a_loop() -> None:
    """``margins``: fresh text keeps both recurrence scores at 0; a verbatim loop passes
    both rules' thresholds (the analyzer's rules are disarmed, the scores keep growing)."""
    config = DetectorConfig()
    fresh = " ".join(f"word{i}" for i in range(3000))
    paragraph = "Suppose A is a knight, then B is a knave, so A lied, which is a contradiction. "
    assert margin_scores(fresh, config) == (0.0, 0.0)
    evidence, window = margin_scores(paragraph * 120, config)
    assert evidence > config.recurrence_evidence
    assert window > config.recurrence_threshold


def test_separation_vocabulary_and_hedging_scores() -> None:
    """Too-short texts have no score; a text of one repeated hedge scores at the top."""
    assert stalled_vocabulary("a few words only") is None
    assert hedging("wait " * 100) is None
    assert hedging("wait " * 2000) == 100.0
    stalled = stalled_vocabulary("wait hmm maybe " * 4000)
    assert stalled is not None
    assert stalled > 0.99


def test_memory_answer_trace_stalls_inside_the_answer() -> None:
    """``memory --answer``: the replay trace has the asked reasoning, and the stall point
    lies past the reasoning, with the whole content channel block still to come."""
    from sidecar.simulator.engine.behaviours import split_trace
    from sidecar.simulator.engine.tokenizer import tokenize

    line, stall_after = _answer_trace(500)
    trace = split_trace("t", json.loads(line)["text"])
    assert trace.reasoning is not None
    assert trace.closed
    reasoning_tokens = len(tokenize(trace.reasoning))
    assert 500 <= reasoning_tokens <= 503
    assert stall_after == reasoning_tokens + _ANSWER_TOKENS
    answer_before_stall = "".join(tokenize(trace.content)[:_ANSWER_TOKENS])
    assert len(answer_before_stall) > 256
    assert len(tokenize(trace.content)) > 2 * _ANSWER_TOKENS


@pytest.mark.system
def test_cpu_quota_holds_a_busy_process_and_puts_it_back() -> None:
    """``cpuquota.limited`` puts a busy child in a cgroup of its own with the quota asked
    for, the kernel throttles it, and the child goes back where it was, with the cgroup
    removed, when the block ends. Where cgroups cannot be created the error says so and
    the child stays where it was."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    unavailable: cpuquota.QuotaUnavailable | None = None
    try:
        before = Path(f"/proc/{child.pid}/cgroup").read_text()
        try:
            with cpuquota.limited([child.pid], 0.1):
                inside = Path(f"/proc/{child.pid}/cgroup").read_text()
                group = cpuquota._home(child.pid)[0]
                if (group / "cpu.max").exists():
                    quota = (group / "cpu.max").read_text().split()
                else:
                    quota = [(group / f"cpu.cfs_{name}_us").read_text().strip()
                             for name in ("quota", "period")]
                deadline = time.monotonic() + 20
                while cpuquota.throttled_seconds(child.pid) <= 0:
                    assert time.monotonic() < deadline, "the kernel never throttled the child"
                    time.sleep(0.05)
        except cpuquota.QuotaUnavailable as exc:
            unavailable = exc
        after = Path(f"/proc/{child.pid}/cgroup").read_text()
    finally:
        child.kill()
        child.wait(timeout=10)
    assert after == before
    if unavailable is not None:  # e.g. not root: the error names what is missing
        assert "cgroup" in str(unavailable)
        return
    assert f"/runaway-bench-{child.pid}" in inside
    assert group.name == f"runaway-bench-{child.pid}"
    assert quota == ["1000", str(cpuquota.PERIOD_US)]  # 0.1 of the 10 ms period
    assert not group.exists()


def test_cpu_quota_refuses_a_nonsense_fraction() -> None:
    """A quota must be a positive fraction of a CPU."""
    with pytest.raises(ValueError, match="positive fraction"), cpuquota.limited([os.getpid()], 0):
        pass


def test_serving_pids_are_the_workers_not_the_supervisor() -> None:
    """With one worker the serving process is the proxy itself; with several, the
    children of the supervisor (which only waits). Every process here waits for its
    standard input to close (the supervisor's children read the same pipe)."""
    wait = "import sys; sys.stdin.read()"
    single = Proc("single", [sys.executable, "-c", wait], 0)
    supervisor = Proc("sup", [sys.executable, "-c",
                              "import subprocess, sys\n"
                              f"ps = [subprocess.Popen([sys.executable, '-c', {wait!r}]) "
                              "for _ in range(2)]\n"
                              "sys.stdin.read()\n"
                              "for p in ps: p.wait()"], 0)
    started: list[subprocess.Popen[bytes]] = []
    try:
        for proc in (single, supervisor):
            proc.popen = subprocess.Popen(proc.cmd, stdin=subprocess.PIPE)
            started.append(proc.popen)
        deadline = time.monotonic() + 20
        while len(descendants(supervisor.pid)) < 3:
            assert time.monotonic() < deadline, "the supervisor never started its children"
            time.sleep(0.05)
        assert _serving_pids(single) == [single.pid]
        workers = _serving_pids(supervisor)
        assert len(workers) == 2
        assert supervisor.pid not in workers
    finally:
        for popen in started:
            assert popen.stdin is not None
            popen.stdin.close()
            popen.wait(timeout=10)


def test_one_detector_off_takes_a_text_detectors_name(capsys: pytest.CaptureFixture[str]) -> None:
    """``enforce-no-NAME`` switches one text detector off; another name is refused before
    anything starts, with the names it takes."""
    from benchmarks import run

    with pytest.raises(SystemExit) as exc:
        run.main(["paced", "--configs", "parsing-lean,enforce-no-recurrnce"])
    assert exc.value.code == 2
    assert "recurrence, periodic, restatement, sentences, degeneration" in capsys.readouterr().err
    # Each name is a detector the configuration can switch off.
    fields = DetectorConfig.__dataclass_fields__
    assert all(f"{name}_enabled" in fields for name in run.TEXT_DETECTORS)
