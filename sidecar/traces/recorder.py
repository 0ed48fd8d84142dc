"""The trace recorder: what the exchange runner calls when recording is on (``[record]``).

Per stream it costs one thing: the attempt keeps its reasoning
(:meth:`Recorder.keep_chars` sizes ``AttemptSpec.record_chars``) as its chains cut it
into 256-character blocks, nothing per delta (``Chain.keep_thinking``); past a verdict in
shadow mode, delta by delta. Everything else happens once per attempt, when it has ended
(:meth:`Recorder.ended`): a
:class:`~sidecar.traces.record.Capture` of its reasoning and verdict, kept for writing if
it is a detection, else offered to the hourly sample; the JSON line is made and written
by the writer thread (``sidecar.traces.writer``). With ``[record] dir`` unset there is no
recorder at all, and the runner asks nothing of the attempts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from sidecar.config import Config, RecordConfig
from sidecar.core.attempt import Attempt
from sidecar.core.exchange import Exchange
from sidecar.errors import ConfigError
from sidecar.labels import Mode
from sidecar.obs.metrics import Metrics
from sidecar.traces.record import Capture, Reservoir, kind_of
from sidecar.traces.writer import Disk, LocalDisk, Writer

log = structlog.get_logger("runaway_sidecar")

#: The modes whose traffic is recorded.
RECORDED: frozenset[Mode] = frozenset({"shadow", "enforce"})


class Recorder:
    """Records the attempts of watched exchanges (see the module docstring). One per
    process, made at start-up from ``[record]``; its directory and caps stay until a
    restart, the sample size and ``exclude_prompt`` follow each exchange's config."""

    def __init__(self, record: RecordConfig, metrics: Metrics, disk: Disk, *,
                 clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self._metrics = metrics
        self._clock = clock
        self._chars = record.max_reasoning_chars
        self._reservoir = Reservoir(record.samples_per_hour, rng)
        self.writer = Writer(disk, metrics, file_bytes=record.file_bytes,
                             max_bytes=record.max_bytes, queue_size=record.queue, clock=clock)

    @classmethod
    def start(cls, config: Config, metrics: Metrics) -> Recorder | None:
        """The recorder ``config`` asks for, or None when ``[record] dir`` is unset.
        Raises ``ConfigError`` when the directory cannot be made or written."""
        record = config.record
        if record.dir is None:
            return None
        try:
            disk = LocalDisk(Path(record.dir))
        except OSError as exc:
            raise ConfigError(f"key 'record.dir': cannot record to {record.dir}: "
                              f"{exc.strerror or exc}") from None
        log.info("recording", dir=record.dir, samples_per_hour=record.samples_per_hour,
                 exclude_prompt=record.exclude_prompt)
        return cls(record, metrics, disk)

    def keep_chars(self, mode: Mode) -> int:
        """Characters of reasoning an attempt of an exchange in ``mode`` keeps for the
        recorder (0: it is not recorded)."""
        return self._chars if mode in RECORDED else 0

    def ended(self, ex: Exchange, attempt: Attempt, raw: bytes) -> None:
        """An attempt of ``ex`` ended: record it (its verdict's choice, else choice 0).
        ``raw`` is the request's body, kept only when the config keeps prompts. An
        attempt with no reasoning and no verdict (thinking off) is not recorded."""
        if ex.mode not in RECORDED:
            return
        verdict = attempt.verdict
        index = attempt.verdict_index if verdict is not None else None
        index = 0 if index is None else index
        reasoning, truncated = attempt.recorded_reasoning(index)
        if not reasoning and verdict is None:
            return
        state = attempt.choices.get(index)
        kind = kind_of(verdict)
        self._metrics.record_offered(kind)
        wall = self._clock()
        capture = Capture(
            kind=kind, request_id=ex.request_id, attempt=attempt.number, step=attempt.step,
            model=ex.model, mode=ex.mode, wall=wall, reasoning=reasoning,
            truncated=truncated,
            thinking_ended=state is not None and state.content_tokens > 0,
            thinking_tokens=0 if state is None else state.thinking_tokens, verdict=verdict,
            raw=None if ex.config.record.exclude_prompt else raw)
        hour = int(wall // 3600)
        for due in self._reservoir.over(hour):
            self.writer.submit(due)
        if kind == "detection":
            self.writer.submit(capture)
            return
        self._reservoir.size = ex.config.record.samples_per_hour  # (a reload may change it)
        self._reservoir.offer(capture, hour)

    def close(self, timeout: float = 5.0) -> None:
        """Write the samples still held and what is queued (for at most ``timeout``
        seconds), then stop the writer."""
        for due in self._reservoir.drain():
            self.writer.submit(due)
        if not self.writer.close(timeout):
            log.warning("record_close_timeout", seconds=timeout)
