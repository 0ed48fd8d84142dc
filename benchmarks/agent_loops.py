"""Agent loops (issue 39): calibration on tests/data/agent-trajectories, and the check's cost.

Run from the repository root::

    .venv/bin/python -m benchmarks.agent_loops table      # recall and false alarms per K
    .venv/bin/python -m benchmarks.agent_loops cost [--reps 2000]

``table``: every trajectory is replayed as the sidecar would see it, one request per history
prefix (the check runs on every request; the last ``window`` assistant events of each
prefix, as the extractors read them). A trajectory counts as flagged at a threshold when
any of its prefixes gives a finding of that kind. Recall is over the ``loop`` trajectories;
false alarms are counted on the ``healthy`` ones (runs that succeeded and ended by
themselves) and, apart, on the ``no-loop`` ones (failed or cut short while still acting).
K is the kind's own threshold (``repeat_min``, ``cycle_min``, ``text_min``), the others
held out of reach; ``all`` uses the shipped defaults and varies nothing.

``cost``: the history check on an already-parsed request body, per API, for a 200-turn
history (100 tool calls with results, 100 text-only user/assistant exchanges around them)
and for a history of about 100,000 tokens (long tool results): the per-API extractor plus
:func:`detectors.agent_loops.check`, median and p99 microseconds over ``--reps`` runs, plus
the same for a looping history (the lazy result hashing is then paid).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from detectors.agent_history import chat_history, messages_history, responses_history
from detectors.agent_loops import (
    KINDS,
    Event,
    LoopConfig,
    Reply,
    Step,
    UserTurn,
    check,
)

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "agent-trajectories" \
    / "trajectories.jsonl.gz"
OUT_OF_REACH = 30


def load(path: Path = DATA) -> list[dict[str, Any]]:
    """The trajectory records, events decoded."""
    out = []
    for line in gzip.decompress(path.read_bytes()).decode().splitlines():
        rec = json.loads(line)
        rec["history"] = decode(rec.pop("events"))
        out.append(rec)
    return out


def decode(records: list[list[Any]]) -> list[Event]:
    """The compact event arrays of the data file (scripts/build-agent-trajectories.py)."""
    events: list[Event] = []
    for r in records:
        if r[0] == "c":
            events.append(Step(r[1], r[2], r[3], r[4]))
        elif r[0] == "r":
            events.append(Reply(r[1], r[2]))
        else:
            events.append(UserTurn(r[1]))
    return events


def trailing(history: list[Event], end: int, window: int) -> list[Event]:
    """The prefix ``history[:end]`` as an extractor gives it: its last ``window`` assistant
    events and the user turns among them."""
    out: list[Event] = []
    budget = window
    for event in reversed(history[:end]):
        if budget <= 0:
            break
        if not isinstance(event, UserTurn):
            budget -= 1
        out.append(event)
    out.reverse()
    return out


def first_finding(history: list[Event], config: LoopConfig, kind: str) -> int | None:
    """The first prefix length at which ``kind`` is found, or None."""
    for end in range(1, len(history) + 1):
        if isinstance(history[end - 1], UserTurn):
            continue
        if any(f.kind == kind for f in check(trailing(history, end, config.window), config)):
            return end
    return None


def config_for(kind: str, k: int) -> LoopConfig:
    """Threshold ``k`` for ``kind``; the other kinds out of reach (no trajectory of the set
    has a run of 30), the shipped window."""
    values = {"repeat": OUT_OF_REACH, "cycle": OUT_OF_REACH, "text": OUT_OF_REACH}
    values[kind] = k
    return LoopConfig(repeat_min=values["repeat"], cycle_min=values["cycle"],
                      text_min=values["text"], window=3 * OUT_OF_REACH)


def table(records: list[dict[str, Any]]) -> None:
    """Print recall and false alarms per kind and K."""
    groups = {label: [r for r in records if r["label"] == label]
              for label in ("loop", "healthy", "no-loop")}
    print(f"trajectories: {len(records)} (loop {len(groups['loop'])}, healthy "
          f"{len(groups['healthy'])}, no-loop {len(groups['no-loop'])})")
    print(f"{'kind':<7}{'K':>3}  {'recall':>12}  {'false alarms (healthy)':>23}  "
          f"{'(no-loop)':>10}")
    for kind in KINDS:
        for k in range(2, 11):
            config = config_for(kind, k)
            row = {label: [r["id"] for r in rs
                           if first_finding(r["history"], config, kind) is not None]
                   for label, rs in groups.items()}
            n_loop = len(groups["loop"])
            print(f"{kind:<7}{k:>3}  {len(row['loop']):>3}/{n_loop:<3}"
                  f"{len(row['loop']) / n_loop:>6.0%}  {len(row['healthy']):>12}/"
                  f"{len(groups['healthy']):<10}  {len(row['no-loop']):>4}/"
                  f"{len(groups['no-loop'])}" + (f"  FA: {', '.join(row['healthy'])}"
                                                if row["healthy"] and k >= 3 else ""))
    defaults = LoopConfig()
    flagged = {label: [r["id"] for r in rs if any(
        first_finding(r["history"], defaults, kind) is not None for kind in KINDS)]
        for label, rs in groups.items()}
    print(f"all kinds at the defaults (repeat {defaults.repeat_min}, cycle "
          f"{defaults.cycle_min}, text {defaults.text_min}, window {defaults.window}): "
          f"recall {len(flagged['loop'])}/{len(groups['loop'])}, false alarms healthy "
          f"{len(flagged['healthy'])}/{len(groups['healthy'])}, no-loop "
          f"{len(flagged['no-loop'])}/{len(groups['no-loop'])}")
    missed = sorted({r["id"] for r in groups["loop"]} - set(flagged["loop"]))
    print("loops missed at the defaults: " + (", ".join(missed) or "none"))


# -- cost ----------------------------------------------------------------------------------

def _body(api: str, turns: int, result_chars: int, loop: bool) -> dict[str, Any]:
    """A parsed request body of ``turns`` turns for ``api`` (half tool calls with results,
    half text exchanges), results of ``result_chars`` characters; ``loop``: the last 10
    calls are the same call with the same result."""
    messages: list[Any] = []
    calls = turns // 2
    for i in range(calls):
        same = loop and i >= calls - 10
        args = {"command": "pytest -q" if same else f"grep -n item_{i} src/"}
        result = ("E" if same else chr(65 + i % 26)) * result_chars + ("" if same else str(i))
        cid = f"call_{i}"
        if api == "messages":
            messages.append({"role": "assistant", "content": [
                {"type": "text", "text": f"Checking {i}."},
                {"type": "tool_use", "id": cid, "name": "Bash", "input": args}]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": cid, "content": result}]})
        elif api == "responses":
            messages.append({"type": "function_call", "call_id": cid, "name": "exec_command",
                             "arguments": json.dumps(args)})
            messages.append({"type": "function_call_output", "call_id": cid,
                             "output": result})
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": "run_shell_command", "arguments": json.dumps(args)}}]})
            messages.append({"role": "tool", "tool_call_id": cid, "content": result})
        if i % 2 == 0 and not same:
            messages.append({"role": "user", "content": f"note {i}"})
            messages.append({"role": "assistant", "content": f"Noted, item {i}."})
    key = "input" if api == "responses" else "messages"
    return {"model": "m", key: messages}


READERS: dict[str, Callable[[Mapping[str, Any], int], list[Event]]] = {
    "messages": messages_history, "responses": responses_history, "chat": chat_history}


def cost(reps: int) -> None:
    """Print the check's cost per API and history shape."""
    config = LoopConfig()
    print(f"{'api':<10}{'history':<28}{'median us':>10}{'p99 us':>9}  findings")
    for api, reader in READERS.items():
        for name, turns, chars, loop in (("200 turns", 200, 200, False),
                                         ("200 turns, looping", 200, 200, True),
                                         ("~100k tokens (200 turns)", 200, 4000, False),
                                         ("~100k tokens, looping", 200, 4000, True)):
            body = _body(api, turns, chars, loop)
            times = []
            for _ in range(reps):
                t0 = time.perf_counter_ns()
                found = check(reader(body, config.window), config)
                times.append(time.perf_counter_ns() - t0)
            times.sort()
            print(f"{api:<10}{name:<28}{statistics.median(times) / 1000:>10.1f}"
                  f"{times[int(0.99 * (len(times) - 1))] / 1000:>9.1f}  "
                  f"{[(f.kind, f.count) for f in found]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("table")
    c = sub.add_parser("cost")
    c.add_argument("--reps", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.command == "table":
        table(load())
    else:
        cost(args.reps)


if __name__ == "__main__":
    main()
