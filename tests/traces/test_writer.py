"""The record writer: bounded size, rotation, a full queue that drops instead of waiting,
a refusing disk, and what it counts (fakes of a slow and of a failing disk)."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry

from sidecar.obs.metrics import Metrics
from sidecar.traces.record import Capture
from sidecar.traces.writer import LocalDisk, Writer


def capture(i: int, chars: int = 1000) -> Capture:
    reasoning = (f"record {i}: " + "x" * chars)[:chars]
    return Capture(kind="healthy", request_id=f"r{i}", attempt=0, step="original",
                   model="m", mode="shadow", wall=1_700_000_000.0, reasoning=reasoning,
                   truncated=False, thinking_ended=True, thinking_tokens=chars // 4)


def metrics() -> tuple[Metrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return Metrics(registry, ["m"], "0"), registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    got = registry.get_sample_value(f"runaway_sidecar_{name}", labels)
    assert got is not None, name
    return got


def trace_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("traces-*.jsonl"))


class SlowDisk(LocalDisk):
    """A disk whose writes wait until the test opens the gate (a stalled device)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def append(self, data: bytes) -> None:
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        super().append(data)


class FailingDisk(LocalDisk):
    """A disk that refuses the first ``failures`` writes (a full or read-only device)."""

    def __init__(self, directory: Path, failures: int) -> None:
        super().__init__(directory)
        self.failures = failures

    def append(self, data: bytes) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError(28, "No space left on device")
        super().append(data)


def test_rotation_and_size_cap_keep_the_directory_bounded(tmp_path: Path) -> None:
    """Files are closed past ``file_bytes``, the oldest go past ``max_bytes``, and after
    every write the trace files together hold at most ``max_bytes``; a labels file beside
    them is neither counted nor deleted."""
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(b"{}\n" * 10_000)
    m, registry = metrics()
    ticks = iter(range(1_700_000_000, 1_800_000_000, 1))
    writer = Writer(LocalDisk(tmp_path), m, file_bytes=5_000, max_bytes=12_000, queue_size=8,
                    clock=lambda: float(next(ticks)))
    sizes = []
    for i in range(60):
        writer.submit(capture(i))
        writer.join()
        files = trace_files(tmp_path)
        sizes.append(sum(f.stat().st_size for f in files))
        assert all(f.stat().st_size <= 5_000 for f in files)
    assert writer.close()
    assert max(sizes) <= 12_000
    files = trace_files(tmp_path)
    assert 2 <= len(files) <= 3
    kept = [orjson.loads(line)["source"] for f in files for line in f.read_bytes().splitlines()]
    # The newest records stayed, in order; the oldest went with their files.
    assert kept == [f"runaway-sidecar:r{i}#0" for i in range(60 - len(kept), 60)]
    assert labels.stat().st_size == 30_000
    assert value(registry, "records_total", kind="healthy") == 60
    written = sum(len(capture(i).line()) for i in range(60))
    assert value(registry, "record_bytes_total") == written
    assert value(registry, "record_files_removed_total") >= 8


def test_a_slow_disk_never_blocks_submit(tmp_path: Path) -> None:
    """While the disk is stuck, ``submit`` returns at once: the queue fills, and what
    does not fit is dropped and counted; once the disk moves, the queued ones are written."""
    m, registry = metrics()
    disk = SlowDisk(tmp_path)
    writer = Writer(disk, m, file_bytes=1_000_000, max_bytes=4_000_000, queue_size=4)
    assert writer.submit(capture(0))
    assert disk.entered.wait(10)  # the thread holds record 0, stuck in the write
    accepted = [writer.submit(capture(i)) for i in range(1, 11)]
    assert accepted == [True] * 4 + [False] * 6
    assert value(registry, "records_dropped_total", reason="queue_full") == 6
    disk.gate.set()
    writer.join()
    assert writer.close()
    lines = [orjson.loads(x) for f in trace_files(tmp_path) for x in f.read_bytes().splitlines()]
    assert [r["source"] for r in lines] == [f"runaway-sidecar:r{i}#0" for i in range(5)]
    assert value(registry, "records_total", kind="healthy") == 5


def test_a_refused_write_is_counted_and_the_next_starts_a_new_file(tmp_path: Path) -> None:
    """A write the disk refuses is dropped and counted; the next record is written, to a
    new file."""
    m, registry = metrics()
    writer = Writer(FailingDisk(tmp_path, failures=2), m, file_bytes=100_000,
                    max_bytes=1_000_000, queue_size=8)
    for i in range(4):
        writer.submit(capture(i))
    writer.join()
    assert writer.close()
    assert value(registry, "records_dropped_total", reason="write_error") == 2
    assert value(registry, "records_total", kind="healthy") == 2
    sources = [orjson.loads(x)["source"] for f in trace_files(tmp_path)
               for x in f.read_bytes().splitlines()]
    assert sources == ["runaway-sidecar:r2#0", "runaway-sidecar:r3#0"]


def test_a_record_larger_than_a_file_is_dropped(tmp_path: Path) -> None:
    """A record that could not fit in one trace file is not written, and is counted."""
    m, registry = metrics()
    writer = Writer(LocalDisk(tmp_path), m, file_bytes=2_000, max_bytes=4_000, queue_size=4)
    writer.submit(capture(0, chars=5_000))
    writer.submit(capture(1, chars=500))
    writer.join()
    assert writer.close()
    assert value(registry, "records_dropped_total", reason="too_large") == 1
    assert value(registry, "records_total", kind="healthy") == 1


def test_a_file_deleted_by_another_worker_is_not_written_on(tmp_path: Path) -> None:
    """Another worker's size cap may delete this worker's current file: the next record
    goes to a new file, not to the deleted one."""
    m, _ = metrics()
    writer = Writer(LocalDisk(tmp_path), m, file_bytes=100_000, max_bytes=1_000_000,
                    queue_size=4)
    writer.submit(capture(0))
    writer.join()
    (first,) = trace_files(tmp_path)
    first.unlink()
    writer.submit(capture(1))
    writer.join()
    assert writer.close()
    (second,) = trace_files(tmp_path)
    assert second.name != first.name
    assert orjson.loads(second.read_bytes())["source"] == "runaway-sidecar:r1#0"
