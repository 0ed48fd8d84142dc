"""The recorder on real attempts: a recorded detection replays to the same verdict, the
prompt stays out unless asked for, healthy and budget attempts are sampled per model and
hour, and with ``[record]`` unset there is no recorder."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from detectors import DetectorConfig
from detectors.replay import replay_record, split_stream
from detectors.tokenize import split_deltas
from sidecar.apis.openai.api import CHAT
from sidecar.config import Config, RecordConfig
from sidecar.core.exchange import Exchange
from sidecar.core.wire import RequestFacts
from sidecar.errors import ConfigError
from sidecar.labels import Mode
from sidecar.obs.metrics import Metrics
from sidecar.traces.recorder import Recorder
from sidecar.traces.writer import LocalDisk
from tests.attempts import chunk_attempt

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
MARKER = "the-prompt-marker-0451"
RAW = orjson.dumps({"model": "qwen3-32b", "stream": True,
                    "messages": [{"role": "user", "content": f"solve it {MARKER}"}]})


def trace(source_end: str, name: str = "loops") -> dict[str, Any]:
    with (TRACES / f"{name}.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if record["source"].endswith(source_end):
                return record
    raise LookupError(source_end)


def stream(reasoning: str, content: str) -> bytes:
    """A chat-completions stream of ``reasoning`` then ``content``, one pseudo-token a
    chunk, as vLLM sends it."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return b"data: " + orjson.dumps({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "qwen3-32b",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + b"\n\n"

    out = [chunk({"reasoning": piece}) for piece in split_deltas(reasoning)]
    out += [chunk({"content": piece}) for piece in split_deltas(content)]
    out += [chunk({}, "stop"), b"data: [DONE]\n\n"]
    return b"".join(out)


def recorder(tmp_path: Path, **record: Any) -> tuple[Recorder, Config, CollectorRegistry,
                                                     list[float]]:
    """A recorder on ``tmp_path`` whose clock the test moves (``clock[0]``)."""
    config = Config(record=RecordConfig(dir=str(tmp_path), **record))
    registry = CollectorRegistry()
    clock = [1_700_000_000.0]
    rec = Recorder(config.record, Metrics(registry, ["qwen3-32b"], "0"), LocalDisk(tmp_path),
                   clock=lambda: clock[0], rng=random.Random(7))
    return rec, config, registry, clock


def exchange(config: Config, mode: Mode, model: str = "qwen3-32b") -> Exchange:
    return Exchange(api=CHAT, config=config, model=model, mode=mode, request_id="req-1",
                    started=0.0, facts=RequestFacts(fingerprint="", client_stream=True))


def run(rec: Recorder, config: Config, mode: Mode, text: str, *,
        detectors: DetectorConfig | None = None, model: str = "qwen3-32b") -> None:
    """Stream ``text`` through an attempt made as the runner makes it, and hand it to the
    recorder when it ends."""
    start, end, content_at = split_stream(text)
    attempt = chunk_attempt("chat", detectors=detectors,
                            stop_on_verdict=mode in ("enforce", "cut"),
                            keep_reasoning=False, record_chars=rec.keep_chars(mode))
    attempt.feed(stream(text[start:end], text[content_at:]), 1.0)
    rec.ended(exchange(config, mode, model), attempt, RAW)


def written(directory: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for f in sorted(directory.glob("traces-*.jsonl"))
            for line in f.read_bytes().splitlines()]


def test_a_recorded_detection_replays_to_the_same_verdict(tmp_path: Path) -> None:
    """In shadow mode (the whole stream) and in enforce mode (cut at the verdict), the
    record of a real loop holds its reasoning and the verdict, and replaying the record
    gives the same detector at the same offset."""
    loop = trace("output_queries_q3_30ba3-think.json#75")
    rec, config, registry, _ = recorder(tmp_path)
    run(rec, config, "shadow", loop["text"])
    run(rec, config, "enforce", loop["text"])
    rec.writer.join()
    shadow, enforce = written(tmp_path)
    start, end, _ = split_stream(loop["text"])
    assert shadow["text"] == "<think>" + loop["text"][start:end] + "</think>"
    assert shadow["thinking_ended"] is True
    assert enforce["thinking_ended"] is False
    assert len(enforce["text"]) < len(shadow["text"])
    for record in (shadow, enforce):
        assert record["kind"] == "detection"
        assert record["label"] is None
        assert record["model"] == "qwen3-32b"
        verdict = record["verdict"]
        again = replay_record(record, DetectorConfig())
        assert (again.detector, again.at_char) == (verdict["detector"], verdict["at_char"])
        assert verdict["at_char"] <= len(record["text"])
    assert shadow["verdict"] == enforce["verdict"]
    assert registry.get_sample_value("runaway_sidecar_records_total",
                                     {"kind": "detection"}) == 2


def test_the_prompt_is_kept_out_unless_asked_for(tmp_path: Path) -> None:
    """By default no record holds the prompt; with ``exclude_prompt = false`` the
    request's messages are kept in ``prompt``."""
    loop = trace("output_queries_q3_30ba3-think.json#75")
    out, keep = tmp_path / "out", tmp_path / "keep"
    rec, config, _, _ = recorder(out)
    run(rec, config, "enforce", loop["text"])
    rec.writer.join()
    assert MARKER.encode() not in b"".join(f.read_bytes() for f in out.iterdir())
    assert "prompt" not in written(out)[0]
    rec, config, _, _ = recorder(keep, exclude_prompt=False)
    run(rec, config, "enforce", loop["text"])
    rec.writer.join()
    (record,) = written(keep)
    assert record["prompt"]["messages"][0]["content"].endswith(MARKER)


def test_healthy_and_budget_attempts_are_sampled_per_model_and_hour(tmp_path: Path) -> None:
    """Of many healthy attempts in an hour, ``samples_per_hour`` per model are written
    once the hour is over; budget hits are sampled apart from them; every detection is
    written at once."""
    healthy = [json.loads(line)["text"]
               for line in (TRACES / "healthy.jsonl").read_text().splitlines()[:12]]
    rec, config, registry, clock = recorder(tmp_path, samples_per_hour=2)
    budget = DetectorConfig(thinking_token_budget=50)
    for i, text in enumerate(healthy):
        model = "qwen3-32b" if i % 2 else "glm-z1"
        run(rec, config, "shadow", text, model=model)
        run(rec, config, "shadow", text, detectors=budget, model=model)
    rec.writer.join()
    assert written(tmp_path) == []  # the hour is not over
    clock[0] += 3600
    run(rec, config, "enforce", trace("output_queries_q3_30ba3-think.json#75")["text"])
    rec.writer.join()
    records = written(tmp_path)
    by = sorted((r["model"], r["kind"]) for r in records)
    assert by == sorted([("glm-z1", "healthy")] * 2 + [("glm-z1", "budget")] * 2
                        + [("qwen3-32b", "healthy")] * 2 + [("qwen3-32b", "budget")] * 2
                        + [("qwen3-32b", "detection")])
    for r in records:
        if r["kind"] == "healthy":
            assert r["verdict"] is None
            assert r["thinking_ended"] is True
            assert r["text"].endswith("</think>")
            assert r["text"] in {"<think>" + t[split_stream(t)[0]:split_stream(t)[1]]
                                 + "</think>" for t in healthy}
        if r["kind"] == "budget":
            assert r["verdict"]["detector"] == "thinking_token_budget"
    offered = registry.get_sample_value("runaway_sidecar_record_candidates_total",
                                        {"kind": "healthy"})
    assert offered == 12
    rec.close()


def test_samples_still_held_are_written_at_close(tmp_path: Path) -> None:
    """At shutdown the samples of the hour in progress are written, not lost."""
    rec, config, _, _ = recorder(tmp_path, samples_per_hour=3)
    text = json.loads((TRACES / "healthy.jsonl").read_text().splitlines()[0])["text"]
    for _ in range(5):
        run(rec, config, "shadow", text)
    rec.close()
    assert [r["kind"] for r in written(tmp_path)] == ["healthy"] * 3


def test_only_shadow_and_enforce_are_recorded_and_unset_records_nothing(
        tmp_path: Path) -> None:
    """With ``[record] dir`` unset there is no recorder; in ``cut`` and ``off`` mode an
    attempt keeps no reasoning for it and leaves no record."""
    assert Recorder.start(Config(), Metrics(CollectorRegistry(), [], "0")) is None
    rec, config, registry, _ = recorder(tmp_path, samples_per_hour=10)
    assert rec.keep_chars("cut") == rec.keep_chars("off") == 0
    assert rec.keep_chars("shadow") == config.record.max_reasoning_chars
    loop = trace("output_queries_q3_30ba3-think.json#75")
    run(rec, config, "cut", loop["text"])
    rec.close()
    assert list(tmp_path.iterdir()) == []
    assert registry.get_sample_value("runaway_sidecar_record_candidates_total",
                                     {"kind": "detection"}) == 0


def test_a_directory_that_cannot_be_made_is_a_config_error(tmp_path: Path) -> None:
    """``record.dir`` under a regular file: start-up fails with an error naming the key."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = dataclasses.replace(Config(), record=RecordConfig(dir=str(blocker / "traces")))
    with pytest.raises(ConfigError, match=r"'record\.dir'"):
        Recorder.start(config, Metrics(CollectorRegistry(), [], "0"))
