"""The trace recorder behind the exchange runner: what a sidecar with ``[record]`` writes
of real streams, that a stuck disk holds no stream up, and that without ``[record]``
nothing is recorded."""

from __future__ import annotations

import asyncio
import io
import threading
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry

from detectors import DetectorConfig
from detectors.replay import replay_record
from sidecar.config import RecordConfig
from sidecar.obs.metrics import Metrics
from sidecar.traces.calibrate import calibrate
from sidecar.traces.label import run_label
from sidecar.traces.recorder import Recorder
from sidecar.traces.store import load
from sidecar.traces.writer import LocalDisk
from tests.net.test_runner import LOOP_BODY, raw_stream
from tests.stack import StackFactory

HEALTHY_BODY = {**LOOP_BODY, "model": "sim-healthy"}


def records(directory: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for f in sorted(directory.glob("traces-*.jsonl"))
            for line in f.read_bytes().splitlines()]


class StuckDisk(LocalDisk):
    """A disk whose writes wait until the test lets them go (a stalled device)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.gate = threading.Event()

    def append(self, data: bytes) -> None:
        assert self.gate.wait(30)
        super().append(data)


async def test_shadow_traffic_is_recorded(make_stack: StackFactory, tmp_path: Path) -> None:
    """In shadow mode a looping stream is recorded at once, with its verdict, and replays
    to it; the healthy one is sampled and written when the sidecar closes; the prompt is
    not in any record."""
    stack = await make_stack(mode="shadow", record=RecordConfig(dir=str(tmp_path)))
    assert stack.proxy.recorder is not None
    status, _, _ = await raw_stream(stack.url, LOOP_BODY)
    assert status == 200
    status, _, _ = await raw_stream(stack.url, HEALTHY_BODY)
    assert status == 200
    stack.proxy.recorder.writer.join()
    (loop,) = records(tmp_path)
    assert loop["kind"] == "detection"
    assert loop["model"] == "sim-loop"
    verdict = loop["verdict"]
    assert isinstance(verdict, dict)
    again = replay_record(loop, DetectorConfig())
    assert (again.detector, again.at_char) == (verdict["detector"], verdict["at_char"])
    await stack.sidecar.close()  # the app's cleanup closes the recorder
    kinds = sorted(str(r["kind"]) for r in records(tmp_path))
    assert kinds == ["detection", "healthy"]
    assert b"Fix the bug in my parser" not in b"".join(
        f.read_bytes() for f in tmp_path.glob("traces-*.jsonl"))
    assert stack.metric("runaway_sidecar_records_total", kind="healthy") == 1


async def test_recorded_traffic_is_what_label_and_calibrate_read(
        make_stack: StackFactory, tmp_path: Path) -> None:
    """The records a proxied stream leaves are traces the offline tools take as they are:
    ``traces label`` reads each one's verdict and saves the operator's labels beside them,
    and ``calibrate`` replays them per model to the verdict the sidecar gave live."""
    stack = await make_stack(mode="shadow", record=RecordConfig(dir=str(tmp_path)))
    for body in (LOOP_BODY, HEALTHY_BODY):
        status, _, _ = await raw_stream(stack.url, body)
        assert status == 200
    await stack.sidecar.close()
    traces = load(tmp_path)
    assert sorted((t.model, t.record["kind"]) for t in traces) == [
        ("sim-healthy", "healthy"), ("sim-loop", "detection")]
    for t in traces:
        assert t.label is None
        assert t.text.startswith("<think>")
        assert t.record["thinking_chars"] == len(t.text) - len("<think>") - (
            len("</think>") if t.record["thinking_ended"] else 0)
        assert isinstance(t.record["thinking_tokens"], int)
        assert t.record["thinking_tokens"] > 0
    # The operator marks the loop (its onset unknown) and the healthy one.
    typed = "".join("l\n\n" if t.record["kind"] == "detection" else "h\n" for t in traces)
    shown = io.StringIO()
    assert run_label(tmp_path, io.StringIO(typed), shown, clock=lambda: 0.0) == 2
    assert "verdict: " in shown.getvalue()
    labelled = {t.model: t.label for t in load(tmp_path)}
    assert labelled == {"sim-loop": "loop", "sim-healthy": "healthy"}
    reports = {r.model: r for r in calibrate(load(tmp_path),
                                             lambda _: (DetectorConfig(), None))}
    loop, healthy = reports["sim-loop"], reports["sim-healthy"]
    assert (loop.current.caught, loop.current.loops) == (1, 1)
    ((trace_id, (at, detector)),) = loop.current.fired.items()
    (recorded,) = [t.record for t in traces if t.id == trace_id]
    verdict = recorded["verdict"]
    assert isinstance(verdict, dict)
    assert (detector, at) == (verdict["detector"], verdict["at_char"])
    assert (healthy.current.false_alarms, healthy.current.healthy) == (0, 1)


async def test_a_stuck_disk_holds_no_stream_up(make_stack: StackFactory,
                                               tmp_path: Path) -> None:
    """While the record disk is stuck, looping and healthy streams in enforce mode are all
    answered (the gate opens only after them); records past the queue are dropped and
    counted, and the others are written once the disk moves."""
    stack = await make_stack(mode="enforce")
    disk = StuckDisk(tmp_path)
    registry = CollectorRegistry()
    recorder = Recorder(RecordConfig(dir=str(tmp_path), queue=1), Metrics(registry, [], "0"),
                        disk)
    stack.proxy.recorder = recorder
    stack.proxy._runner.recorder = recorder  # the test's stuck disk
    results = await asyncio.gather(*(raw_stream(stack.url, body)
                                     for body in [LOOP_BODY] * 4 + [HEALTHY_BODY] * 4))
    assert [status for status, _, _ in results] == [200] * 8
    assert all(data.rstrip().endswith(b"data: [DONE]") for _, _, data in results)
    dropped = registry.get_sample_value("runaway_sidecar_records_dropped_total",
                                        {"reason": "queue_full"})
    # Four detections: one in the stuck write, one queued, the others dropped (a third
    # when two came before the writer took the first).
    assert dropped in (2.0, 3.0)
    disk.gate.set()
    recorder.writer.join()
    kinds = [r["kind"] for r in records(tmp_path)]
    assert kinds == ["detection"] * (4 - int(dropped))
    recorder.close()


async def test_without_record_nothing_is_recorded(make_stack: StackFactory, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``[record]`` unset there is no recorder (neither the proxy's nor its runner's),
    no file is written, and no record is counted."""
    monkeypatch.chdir(tmp_path)
    stack = await make_stack(mode="shadow")
    assert stack.proxy.recorder is None
    assert stack.proxy._runner.recorder is None
    for body in (LOOP_BODY, HEALTHY_BODY):
        status, _, _ = await raw_stream(stack.url, body)
        assert status == 200
    await stack.sidecar.close()
    assert list(tmp_path.iterdir()) == []
    for kind in ("detection", "healthy", "budget"):
        assert stack.metric("runaway_sidecar_record_candidates_total", kind=kind) == 0
        assert stack.metric("runaway_sidecar_records_total", kind=kind) == 0
