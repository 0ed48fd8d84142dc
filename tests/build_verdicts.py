"""Every trace's verdicts as the build that runs in this process gives them.

    python -m tests.build_verdicts OUT.json FILE.jsonl [FILE.jsonl ...]

``tests/test_build.py`` runs this once on the compiled build and once on the pure-Python
source (``RUNAWAY_SIDECAR_PURE=1``) and compares the two files. Per record (``file#line``):

- ``chain``: the default chain's verdict as ``detectors.replay`` gives it (detector,
  channel, at_token, at_char; one pseudo-token per delta), or None;
- ``pieces``: the same chain fed the same channels in pieces of 61 characters: detector,
  channel and at_char (the token count follows the split; the rest must not);
- ``alone``: each text detector of :data:`CONFIGS` run on its own over each channel to the
  channel's end: the channel offset of the end of the block of its first finding, and the
  finding's reason (which prints its scores), by ``"config/channel/detector"``.

``build`` says which build ran (``detectors.native.describe``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from detectors import DetectorConfig, default_chain
from detectors.base import CONTENT, THINKING
from detectors.blocks import Blocker
from detectors.chain import THINKING_ONLY, text_analyzers
from detectors.native import compiled, describe
from detectors.replay import replay_record, split_stream
from tests.detectors.verdict_table import NEAR

#: The default thresholds, and the lower ones the verdict table pins as ``near`` (so the
#: comparison also covers how the evidence builds where nothing fires at the defaults).
CONFIGS = {"default": DetectorConfig(), "near": NEAR}
PIECE = 61


def _channels(text: str) -> list[tuple[str, str]]:
    start, end, content_at = split_stream(text)
    return [(THINKING, text[start:end]), (CONTENT, text[content_at:])]


def _pieces(text: str) -> list[Any] | None:
    chain = default_chain(CONFIGS["default"])
    start, end, content_at = split_stream(text)
    now = 0.0
    for channel, part in _channels(text):
        for i in range(0, len(part), PIECE):
            now += 0.02
            verdict = chain.feed(channel, part[i : i + PIECE], 1, now)
            if verdict is not None:
                fed = verdict.at_char  # mapped to ``text`` as ``replay_record`` does
                at = start + fed if fed <= end - start else content_at + fed - (end - start)
                return [verdict.detector, verdict.channel, at]
    return None


def _alone(text: str) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for config_name, config in CONFIGS.items():
        for channel, part in _channels(text):
            blocks = Blocker().push(part) or []
            for name, make in text_analyzers(config):
                if channel == CONTENT and name in THINKING_ONLY:
                    continue
                analyzer = make()
                for block in blocks:
                    finding = analyzer.analyze(block)
                    if finding is not None:
                        found[f"{config_name}/{channel}/{name}"] = [block.end, finding.reason]
                        break
    return found


def verdicts(paths: list[Path]) -> dict[str, Any]:
    """The table described in the module docstring, for the records of ``paths``."""
    records: dict[str, Any] = {}
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                record = json.loads(line)
                result = replay_record(record, CONFIGS["default"])
                records[f"{path.name}#{number}"] = {
                    "chain": None if not result.detected else [
                        result.detector, result.channel, result.at_token, result.at_char],
                    "pieces": _pieces(record["text"]),
                    "alone": _alone(record["text"]),
                }
    return {"build": describe(), "compiled": compiled(), "records": records}


def main(argv: list[str]) -> int:
    out, *files = argv
    Path(out).write_text(json.dumps(verdicts([Path(f) for f in files]), indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
