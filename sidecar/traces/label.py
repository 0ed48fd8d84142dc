"""``runaway-sidecar traces label DIR``: the operator reads each trace's tail and verdict
and marks it loop, healthy or ambiguous, one typed line at a time.

:class:`Session` is the whole interaction as a pure state machine (a line in, the text to
show and the label to save out), so tests drive it with strings; :func:`run_label` wires
it to a terminal (or any text stream) and appends each label to ``DIR/labels.jsonl`` as
it is made (``sidecar.traces.store``), so quitting, or a closed terminal, loses nothing.

Commands: ``l`` loop (then where it starts: a few words pasted from its first copy, or a
character offset; Enter when unknown), ``h`` healthy, ``a`` ambiguous, ``s`` skip,
``u`` undo the last label of this session (and go back to its trace), ``m`` a longer
tail, ``f`` the text where the detector fired, ``?`` help, ``q`` quit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from detectors import DetectorConfig
from detectors.replay import replay_record, split_stream
from sidecar.traces.store import LABELS_FILE, Label, Mark, Trace, append_mark, load

HELP = ("[l]oop  [h]ealthy  [a]mbiguous  [s]kip  [u]ndo  [m]ore of the tail  "
        "[f]ired: the text there  [?] help  [q]uit")
_KEYS: dict[str, Label] = {"l": "loop", "h": "healthy", "a": "ambiguous"}


@dataclass(frozen=True, slots=True)
class Step:
    """What one line of input did: text to show, a label line to save, whether the
    session is over."""

    show: str
    mark: Mark | None = None
    done: bool = False


def _verdict(trace: Trace, config: DetectorConfig) -> tuple[str, int | None]:
    """A line about the trace's verdict, and where it fired in ``text`` (None: nowhere).
    The recorded verdict if the record has one, else a replay with ``config``."""
    recorded = trace.record.get("verdict")
    if isinstance(recorded, dict):
        at = recorded.get("at_char")
        where = f"at character {at:,}" if isinstance(at, int) else "on the answer"
        return (f"verdict: {recorded.get('detector')} on {recorded.get('channel')} {where}: "
                f"{recorded.get('reason')}\n  excerpt: {recorded.get('excerpt')!r}",
                at if isinstance(at, int) else None)
    if "verdict" in trace.record:
        return "verdict: none (no detector fired)", None
    result = replay_record(trace.record, config)
    if not result.detected:
        return "verdict (replayed): none of the detectors fires", None
    return (f"verdict (replayed): {result.detector} on {result.channel} at character "
            f"{result.at_char:,}", result.at_char)


class Session:
    """Labelling ``traces`` in order (see the module docstring). ``screen`` is the first
    thing to show; ``handle`` takes each line typed."""

    def __init__(self, traces: Sequence[Trace], *, tail: int = 1200,
                 config: DetectorConfig | None = None) -> None:
        self._traces = list(traces)
        self._tail = tail
        self._config = config or DetectorConfig()
        self._i = 0
        self._longer = 1
        self._onset_for: Label | None = None
        self._history: list[int] = []
        self.labelled = 0

    @property
    def prompt(self) -> str:
        """What to print before reading the next line."""
        return "onset> " if self._onset_for else "> "

    def screen(self) -> str:
        """The current trace: its facts, its verdict and its tail."""
        if self._i >= len(self._traces):
            return self._finished()
        t = self._traces[self._i]
        r: dict[str, Any] = dict(t.record)
        text = t.text
        start, end, _ = split_stream(text)
        reasoning = text[start:end]
        verdict, _ = _verdict(t, self._config)
        tail = self._tail * self._longer
        shown = reasoning[-tail:]
        facts = [f"model {t.model}"]
        facts += [f"{k} {r[k]}" for k in ("kind", "mode", "recorded_at") if r.get(k)]
        tokens = r.get("thinking_tokens")
        ended = "ended" if end < len(text) or r.get("thinking_ended") else "did not end"
        label = f"  (labelled {t.label})" if t.label else ""
        return "\n".join([
            f"[{self._i + 1}/{len(self._traces)}] {t.id}  ({t.where}){label}",
            "  ".join(facts),
            f"reasoning: {len(reasoning):,} characters, {ended}"
            + (f", {tokens:,} tokens" if isinstance(tokens, int) else ""),
            verdict,
            f"--- the last {len(shown):,} characters of the reasoning " + "-" * 30,
            shown,
            "-" * 72,
            HELP,
        ])

    def handle(self, line: str) -> Step:
        """Take one typed line (without its line end)."""
        if self._onset_for is not None:
            return self._onset(line.strip())
        key = line.strip().lower()[:1]
        if key == "q":
            return Step(f"{self.labelled} labelled in this session.", done=True)
        if self._i >= len(self._traces) and key != "u":
            return Step(self._finished())
        if key in _KEYS:
            if _KEYS[key] == "loop":
                self._onset_for = "loop"
                return Step("Where does the loop start? Paste a few words of its first "
                            "copy, or give a character offset; Enter: unknown.")
            return self._mark(_KEYS[key], None)
        if key == "s":
            return self._next()
        if key == "u":
            if not self._history:
                return Step("Nothing to undo in this session.")
            self._i = self._history.pop()
            self._longer = 1
            self.labelled -= 1
            return Step("Undone.\n" + self.screen(), Mark(self._traces[self._i].id, None))
        if key == "m":
            self._longer *= 3
            return Step(self.screen())
        if key == "f":
            return Step(self._fired())
        if key == "?":
            return Step(__doc__.split("\n\n")[-1].strip() if __doc__ else HELP)
        return Step(f"Unknown command {line.strip()!r}. {HELP}")

    def _onset(self, given: str) -> Step:
        text = self._traces[self._i].text
        start, end, _ = split_stream(text)
        label = self._onset_for
        assert label is not None
        if not given:
            self._onset_for = None
            return self._mark(label, None)
        if given.isdigit():
            at = int(given)
            if not 0 <= at <= len(text):
                return Step(f"The text has {len(text):,} characters; try again "
                            "(Enter: unknown).")
        else:
            at = text.find(given, start)
            if at < 0 or at >= end:
                return Step("Those words are not in the reasoning; paste them exactly, "
                            "or give a character offset (Enter: unknown).")
        self._onset_for = None
        return self._mark(label, at)

    def _mark(self, label: Label, onset: int | None) -> Step:
        mark = Mark(self._traces[self._i].id, label, onset)
        self._history.append(self._i)
        self.labelled += 1
        where = "" if onset is None else f" from character {onset:,}"
        return Step(f"Marked {label}{where}.\n" + self._next().show, mark)

    def _next(self) -> Step:
        self._i += 1
        self._longer = 1
        return Step(self.screen())

    def _fired(self) -> str:
        t = self._traces[self._i]
        _, at = _verdict(t, self._config)
        if at is None:
            return "No verdict on the reasoning to show."
        text = t.text
        return (f"--- around character {at:,}, where it fired " + "-" * 30 + "\n"
                + text[max(0, at - 800):at] + "\u2590" + text[at:at + 300] + "\n" + "-" * 72)

    def _finished(self) -> str:
        return (f"All {len(self._traces)} traces seen; {self.labelled} labelled in this "
                "session. [u]ndo the last label, or [q]uit.")


def run_label(directory: Path, inp: TextIO, out: TextIO, *, tail: int = 1200,
              relabel: bool = False, config: DetectorConfig | None = None,
              clock: Callable[[], float] = time.time) -> int:
    """Label the traces of ``directory`` not labelled yet (all with ``relabel``), reading
    commands from ``inp`` and writing to ``out``; each label is appended to
    ``DIR/labels.jsonl`` at once. Returns the number labelled."""
    traces = [t for t in load(directory) if relabel or t.label is None]
    session = Session(traces, tail=tail, config=config)
    out.write(f"{len(traces)} traces to label in {directory} (labels go to "
              f"{directory / LABELS_FILE}).\n{session.screen()}\n")
    if not traces:
        return 0
    with (directory / LABELS_FILE).open("a", encoding="utf-8") as labels:
        while True:
            out.write(session.prompt)
            out.flush()
            line = inp.readline()
            if not line:  # end of input: as q
                line = "q"
            step = session.handle(line.rstrip("\n"))
            if step.mark is not None:
                append_mark(labels, step.mark, clock())
            out.write(step.show + "\n")
            if step.done:
                return session.labelled
