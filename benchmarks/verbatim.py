"""How much of a trace repeats verbatim, and how soon the chain fires on a verbatim loop.

Run from the repository root:

- ``.venv/bin/python -m benchmarks.verbatim measure [FILE ...] [--top N]``: per trace of
  tests/data/traces (default: ``healthy`` and ``added-healthy``), the longest stretch of the
  thinking that repeats earlier text verbatim (a *copy*, at any distance), and the longest
  *run*: a copy that overlaps its source, so the text is a unit written at least twice in a
  row (``copies = (copied + period) / period``, the period being the copy's distance).
- ``.venv/bin/python -m benchmarks.verbatim timing``: the synthetic table. 6,000 characters
  of a healthy trace's reasoning, then a unit of U characters cut from another one, written
  12 times; the chain's verdict in characters after the loop's start (the start of its first
  copy) and in copies, with the default config and with the copy rule of ``periodic`` off
  (``periodic_copy_chars = 0``, the chain before it), in the same run.

The copies are found by a greedy parse: at each position the last occurrences (up to 6) of
the next 32 characters are extended as far as the text matches, the longest-lasting one is
kept (by copies, then length) and the parse moves past it. Stretches inside a ``` fence are
code; a copy with at least half of its characters in code is left out (code keeps its own
rule), as the ``periodic`` copy rule leaves it out.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detectors import DetectorConfig, default_chain
from detectors.replay import split_stream
from detectors.tokenize import split_deltas

TRACES = Path(__file__).resolve().parent.parent / "tests" / "data" / "traces"
ANCHOR = 32
CANDIDATES = 6
UNITS = (100, 200, 300, 400, 600, 800, 1000, 1200, 2000, 3000)


@dataclass(frozen=True, slots=True)
class Copy:
    """A stretch ``[at, at + copied)`` of the thinking equal to the text ``period`` earlier."""

    at: int
    period: int
    copied: int

    @property
    def copies(self) -> float:
        """How many units the stretch and its source make (2 or more: a run)."""
        return (self.copied + self.period) / self.period


def copies_of(text: str) -> list[Copy]:
    """The greedy parse of ``text`` into copies of earlier text (see the module docstring)."""
    where: defaultdict[str, list[int]] = defaultdict(list)
    found: list[Copy] = []
    n = len(text)
    indexed = 0
    i = 0
    while i + ANCHOR <= n:
        while indexed < i:
            where[text[indexed : indexed + ANCHOR]].append(indexed)
            indexed += 1
        best: Copy | None = None
        for j in reversed(where.get(text[i : i + ANCHOR], [])[-CANDIDATES:]):
            length = ANCHOR
            while i + length < n and text[i + length] == text[j + length]:
                length += 1
            c = Copy(i, i - j, length)
            if best is None or (c.copies, c.copied) > (best.copies, best.copied):
                best = c
        if best is None:
            i += 1
        else:
            found.append(best)
            i += best.copied
    return found


def code_mask(text: str) -> bytearray:
    """1 for each character inside a ``` fence (the fence lines included), else 0."""
    mask = bytearray(len(text))
    fence = False
    at = 0
    for line in text.split("\n"):
        end = min(len(text), at + len(line) + 1)
        marker = line.lstrip().startswith("```")
        if marker:
            fence = not fence
        if marker or fence:
            mask[at:end] = b"\x01" * (end - at)
        at = end
    return mask


def thinking(record: dict[str, Any]) -> tuple[int, str]:
    """Where the reasoning starts in the record's text, and the reasoning."""
    start, end, _ = split_stream(record["text"])
    return start, str(record["text"][start:end])


def measure(names: list[str], top: int) -> None:
    """Print, over the traces of ``names``, the longest copies and runs outside code."""
    rows = []
    for name in names:
        with (TRACES / f"{name}.jsonl").open(encoding="utf-8") as fh:
            for index, line in enumerate(fh):
                record = json.loads(line)
                start, text = thinking(record)
                mask = code_mask(text)
                prose = [
                    c for c in copies_of(text)
                    if 2 * sum(mask[c.at : c.at + c.copied]) < c.copied
                ]
                longest = max(prose, key=lambda c: c.copied, default=None)
                runs = [c for c in prose if c.copied >= c.period]
                run = max(runs, key=lambda c: c.copied, default=None)
                rows.append((name, index, record, start, longest, run))
    print(f"{len(rows)} traces of {', '.join(names)}")
    _copy_table("longest verbatim copy (any distance), outside code",
                [(r, r[4]) for r in rows if r[4]], top)
    runs = [(r, r[5]) for r in rows if r[5]]
    _copy_table("longest run (a unit written at least twice in a row), outside code", runs, top)
    print(f"\ntraces with a run: {len(runs)}; with a run of 100+ character units: "
          f"{sum(1 for _, c in runs if c.period >= 100)}")


def _copy_table(title: str, found: list[tuple[tuple[Any, ...], Copy]], top: int) -> None:
    """Print the ``top`` longest of ``found`` (a trace's row and one of its copies) as a
    Markdown table under ``title``."""
    print(f"\n{title}:")
    print("| trace | model | label | at | period | copied | copies |")
    print("|---|---|---|---|---|---|---|")
    for (name, index, record, start, *_), c in sorted(found, key=lambda f: -f[1].copied)[:top]:
        print(f"| {name}#{index} {record['source'].rsplit('/', 1)[-1]} | {record['model']} | "
              f"{record['label']} | {start + c.at} | {c.period} | {c.copied} | "
              f"{c.copies:.2f} |")


def _reasoning(index: int) -> str:
    with (TRACES / "healthy.jsonl").open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i == index:
                return thinking(json.loads(line))[1]
    raise IndexError(index)


def first_verdict(text: str, config: DetectorConfig) -> tuple[str, int] | None:
    """(detector, at_char) of the chain's verdict on ``text`` fed as thinking."""
    chain = default_chain(config)
    for i, delta in enumerate(split_deltas(text)):
        verdict = chain.feed("thinking", delta, 1, i * 0.01)
        if verdict is not None:
            return verdict.detector, verdict.at_char
    return None


def timing() -> None:
    """Print the synthetic table (see the module docstring)."""
    head = _reasoning(14)[:6000] + "\n\n"
    source = _reasoning(15)
    configs = (("default", DetectorConfig()), ("copy rule off", DetectorConfig(
        periodic_copy_chars=0)))
    print("| unit (chars) | " + " | ".join(f"{n}: after onset (copies)" for n, _ in configs)
          + " | " + " | ".join(f"{n}: detector" for n, _ in configs) + " |")
    print("|---|" + "---|" * 2 * len(configs))
    for size in UNITS:
        unit = source[3000 : 3000 + size]
        cells, names = [], []
        for _, config in configs:
            found = first_verdict(head + unit * 12, config)
            if found is None:
                cells.append("-")
                names.append("-")
                continue
            after = found[1] - len(head)
            cells.append(f"{after:,} ({after / size:.2f})")
            names.append(found[0])
        print(f"| {size:,} | " + " | ".join(cells) + " | " + " | ".join(names) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="longest verbatim copies and runs per trace")
    m.add_argument("files", nargs="*", default=["healthy", "added-healthy"],
                   help="names of tests/data/traces/*.jsonl files")
    m.add_argument("--top", type=int, default=12)
    sub.add_parser("timing", help="the synthetic table")
    args = parser.parse_args(argv)
    if args.command == "measure":
        measure(args.files, args.top)
    else:
        timing()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
