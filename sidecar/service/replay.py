"""``runaway-sidecar replay TRACES.jsonl [--config FILE] [--json]``.

Reads one JSON object per line, replays each through the default detector chain exactly as
the proxy feeds it (see :mod:`detectors.replay`), and prints a table and a summary, or with
``--json`` one object ``{"traces": [...], "summary": {...}}``. Exit codes: 0 on success,
2 when the file is missing or a line is not a JSON object (the message names the line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from detectors.config import DetectorConfig
from detectors.replay import ReplayResult, replay_record, summarize

EXIT_OK = 0
EXIT_USAGE = 2


def _load(path: Path) -> list[dict[str, Any]]:
    """Parse the JSONL file; raise ValueError naming the first bad line."""
    records: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object")  # noqa: TRY004
            if not isinstance(record.get("text"), str) and not (
                isinstance(record.get("reasoning"), str) or isinstance(record.get("content"), str)
            ):
                raise ValueError(f"{path}:{lineno}: needs 'text' or 'reasoning'/'content'")  # noqa: TRY004
            record.setdefault("_line", lineno)
            records.append(record)
    return records


def _pct(value: object) -> str:
    return f"{value:.1%}" if isinstance(value, float) else "-"


def _human(results: list[ReplayResult], summary: dict[str, Any], out: TextIO) -> None:
    """A readable table (one row per trace) followed by the summary figures."""
    out.write(f"{'id':<60} {'label':<10} {'detector':<14} {'channel':<8} {'at_char':>8} "
              f"{'chars':>8}\n")
    for r in results:
        out.write(
            f"{r.id[-60:]:<60} {r.label or '-':<10} {r.detector or '-':<14} "
            f"{r.channel or '-':<8} {r.at_char if r.at_char is not None else '-':>8} "
            f"{r.chars:>8}\n"
        )
    out.write("\nsummary\n")
    groups = [("all", summary["all"])]
    groups += [(f"label={k}", v) for k, v in summary["by_label"].items()]
    groups += [(f"lang={k}", v) for k, v in summary["by_lang"].items()]
    for name, g in groups:
        parts = [f"{g['detected']}/{g['traces']} detected"]
        if "recall" in g:
            delay = g.get("median_delay_chars")
            parts += [
                f"recall {_pct(g['recall'])}",
                f"recall(high) {_pct(g.get('recall_high'))}",
                f"median delay after onset {'-' if delay is None else f'{delay:.0f}'} chars",
                f"reasoning cut {_pct(g.get('reasoning_cut_share'))}",
            ]
        if "false_alarms" in g:
            parts.append(f"false alarms {g['false_alarms']} ({_pct(g['false_alarm_rate'])})")
        out.write(f"  {name:<16} " + ", ".join(parts) + "\n")


def run_replay(
    path: Path, config: DetectorConfig, *, as_json: bool, out: TextIO, err: TextIO | None = None
) -> int:
    """Replay ``path`` with ``config``; write the report to ``out`` and return the exit code.
    Errors go to ``err`` (default stderr) with exit code 2."""
    err = sys.stderr if err is None else err
    try:
        records = _load(path)
    except FileNotFoundError:
        err.write(f"replay: no such file: {path}\n")
        return EXIT_USAGE
    except (OSError, UnicodeDecodeError) as exc:
        err.write(f"replay: cannot read {path}: {exc}\n")
        return EXIT_USAGE
    except ValueError as exc:
        err.write(f"replay: {exc}\n")
        return EXIT_USAGE
    results = [
        replay_record(rec, config, fallback_id=f"line {rec['_line']}") for rec in records
    ]
    summary = summarize(results)
    if as_json:
        json.dump({"traces": [r.public() for r in results], "summary": summary}, out)
        out.write("\n")
    else:
        _human(results, summary, out)
    return EXIT_OK
