#!/usr/bin/env python3
"""Build tests/data/agent-trajectories/ from public agent trajectories (issue 39).

    .venv/bin/python scripts/build-agent-trajectories.py --swe-agent DIR --mini-swe-agent DIR \\
        --agent-evals DIR [--out tests/data/agent-trajectories]

Each DIR is a git directory (a bare clone or a mirror) of the source repository; the files
are read from the commits named in SOURCES, so a rebuild gives the same records. Sources:

- princeton-nlp/SWE-agent (MIT): the ``.traj`` demonstrations and test fixtures, solved
  runs (deduplicated by content);
- SWE-agent/mini-swe-agent (MIT): ``tests/test_data/github_issue.traj.json``, a solved run;
- lgonzalez876/AgentEvals (no license stated): 143 evaluation transcripts of six models in
  one tool-using scenario, each with its outcome and, for 32, the harness's verdict that it
  hit the 100-step recursion limit ("stuck in a loop or very complex reasoning").

Each record is one trajectory as :mod:`detectors.agent_loops` events, with its source
(repository, path, commit, license), outcome, label and the reason for the label. Labels
come from LABELS below: written from each run's outcome and from reading it, never from
the detector. Tool results and reply texts are replaced by stand-ins that the detector
cannot tell apart from the originals: a result by a digest of its text with durations,
times and dates masked, a reply by a digest of its normalized text (short replies, which
never count, keep their normalized text). In the records of a source with no license
stated, nothing of the source is kept verbatim: each argument string becomes a digest of
its canonical text ("a:" and 12 hex digits), a tool name that is not a plain identifier
(a fragment of an error message the transcript's parser took for a call) a digest of it
("n:"), and a short reply a digest of 8 letters that still never counts. Equal inputs give
equal digests, so the detector sees equal and different exactly as before. The script
checks that the findings (kind, calls with their stand-ins, count, indices) are the same
on the originals and the stand-ins at every threshold from 2 to 10, that no two different
strings share a digest, and fails otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from detectors.agent_history import canonical_arguments
from detectors.agent_loops import (
    Event,
    LoopCall,
    LoopConfig,
    Reply,
    Step,
    UserTurn,
    check,
    mask_volatile,
    normalize_text,
    result_text,
)

#: The license field of a source that states none: its records keep nothing verbatim.
UNLICENSED = "none stated"
SOURCES = {
    "swe-agent": ("princeton-nlp/SWE-agent", "0772c99c", "MIT"),
    "mini-swe-agent": ("SWE-agent/mini-swe-agent", "a83fcae82d2a08f0ee0c688f9d137b3566c097f8",
                       "MIT"),
    "agent-evals": ("lgonzalez876/AgentEvals", "ecef80342d0715974fdb935968163b3e6e5cc81d",
                    UNLICENSED),
}


def git(repo: Path, *args: str) -> str:
    """Output of a git command in ``repo``."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def resolve(repo: Path, commit: str) -> str:
    """The full commit id of a (possibly abbreviated) ``commit``."""
    return git(repo, "rev-parse", commit).strip()


# -- stand-ins -------------------------------------------------------------------------------

def result_stand_in(result: object) -> str | None:
    """A digest of the result's masked text: equal exactly when the detector finds the
    results the same."""
    text = result_text(result)
    if text is None:
        return None
    return "r:" + hashlib.sha256(mask_volatile(text).encode()).hexdigest()[:12]


def _letters(text: str, n: int) -> str:
    """``n`` letters of a digest of ``text``: normalization keeps them as they are."""
    return "".join("abcdefghijklmnop"[int(c, 16)]
                   for c in hashlib.sha256(text.encode()).hexdigest()[:n])


def reply_stand_in(text: str, digest_short: bool) -> str:
    """A digest of the normalized text; a short text (it never counts) stays itself, or
    with ``digest_short`` becomes 8 letters, still too short to count."""
    norm = normalize_text(text)
    if len(norm) < LoopConfig().text_min_chars:
        return _letters(norm, 8) if digest_short else norm
    return _letters(norm, 16)


def argument_stand_in(arguments: str) -> str:
    """A digest of the canonical arguments: equal exactly when the arguments are."""
    return "a:" + hashlib.sha256(arguments.encode()).hexdigest()[:12]


_TOOL_NAME = re.compile(r"[A-Za-z_][\w.-]{0,63}|\(unlogged\)")


def name_stand_in(name: str) -> str:
    """A tool name as it is when it is a plain identifier, else a digest of it."""
    if _TOOL_NAME.fullmatch(name):
        return name
    return "n:" + hashlib.sha256(name.encode()).hexdigest()[:12]


def encode(events: list[Event], verbatim: bool) -> list[list[Any]]:
    """Events as compact JSON arrays, with stand-ins: ``["c", index, name, arguments,
    result]``, ``["r", index, text]``, ``["u", index]``. Without ``verbatim``, names,
    arguments and short replies are digests too."""
    out: list[list[Any]] = []
    for e in events:
        if isinstance(e, Step):
            name, arguments = (e.name, e.arguments) if verbatim else \
                (name_stand_in(e.name), argument_stand_in(e.arguments))
            out.append(["c", e.index, name, arguments, result_stand_in(e.result)])
        elif isinstance(e, Reply):
            out.append(["r", e.index, reply_stand_in(e.text, not verbatim)])
        else:
            out.append(["u", e.index])
    return out


def decode(records: list[list[Any]]) -> list[Event]:
    """Compact arrays back to events (the tests and the benchmark read them so)."""
    events: list[Event] = []
    for r in records:
        if r[0] == "c":
            events.append(Step(r[1], r[2], r[3], r[4]))
        elif r[0] == "r":
            events.append(Reply(r[1], r[2]))
        else:
            events.append(UserTurn(r[1]))
    return events


def findings_at_all_thresholds(events: list[Event], digest_calls: bool = False,
                               ) -> list[tuple[Any, ...]]:
    """Findings at every threshold 2..10, without excerpts (they are what stand-ins hide);
    with ``digest_calls``, the calls they name as their stand-ins."""
    out = []
    for k in range(2, 11):
        config = LoopConfig(repeat_min=k, cycle_min=k, text_min=k, window=max(64, 3 * k))
        out.append(tuple(
            (f.kind, tuple(LoopCall(name_stand_in(c.name), argument_stand_in(c.arguments))
                           for c in f.calls) if digest_calls else f.calls, f.count, f.indices)
            for f in check(events, config)))
    return out


def check_digests_unique(records: list[dict[str, Any]], originals: list[list[Event]]) -> None:
    """Fail if two different names, arguments or long replies share a digest (short
    replies never count, whatever their digest)."""
    seen: dict[str, str] = {}
    for rec, events in zip(records, originals, strict=True):
        if rec["source"]["license"] != UNLICENSED:
            continue
        for event, row in zip(events, rec["events"], strict=True):
            if isinstance(event, Step):
                pairs = [(event.name, row[2]), (event.arguments, row[3])]
            elif isinstance(event, Reply) and len(row[2]) == 16:
                pairs = [(normalize_text(event.text), row[2])]
            else:
                pairs = []
            for original, digest in pairs:
                if seen.setdefault(digest, original) != original:
                    raise SystemExit(f"{rec['id']}: two strings share the digest {digest}")


# -- readers ---------------------------------------------------------------------------------

def swe_agent_events(data: dict[str, Any]) -> list[Event]:
    """A SWE-agent ``.traj``: each step's action (the command line) and observation."""
    events: list[Event] = [UserTurn(0)]
    for i, step in enumerate(data.get("trajectory") or []):
        action = str(step.get("action", "")).strip()
        name = action.split(maxsplit=1)[0] if action else ""
        events.append(Step(2 * i + 1, name, canonical_arguments(action),
                           step.get("observation", "")))
    return events


_MSWEA = re.compile(r"```mswea_bash_command\s*\n(.*?)```", re.DOTALL)


def mini_swe_agent_events(messages: list[dict[str, Any]]) -> list[Event]:
    """mini-swe-agent messages: the bash block of each assistant message and the output
    in the next user message."""
    events: list[Event] = []
    for i, m in enumerate(messages):
        if m.get("role") == "user" and i > 0 and messages[i - 1].get("role") == "assistant":
            continue  # an output, taken with its command
        if m.get("role") == "user":
            events.append(UserTurn(i))
        elif m.get("role") == "assistant":
            match = _MSWEA.search(m.get("content", ""))
            if match is None:
                events.append(Reply(i, m.get("content", "")))
                continue
            nxt = messages[i + 1]["content"] if i + 1 < len(messages) else None
            events.append(Step(i, "bash", canonical_arguments(match.group(1).strip()), nxt))
    return events


_ENTRY = re.compile(r"^\* (Agent Message|Tool Call|Tool Output|Human Message):[ ]?", re.M)


def split_calls(line: str) -> list[tuple[str, str]]:
    """``a(x=1), b()`` -> [("a", "x=1"), ("b", "")], commas inside parentheses kept."""
    calls, depth, start = [], 0, 0
    for j, ch in enumerate(line):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            calls.append(line[start:j])
            start = j + 1
    calls.append(line[start:])
    out = []
    for call in (c.strip() for c in calls):
        name, _, rest = call.partition("(")
        out.append((name.strip(), rest[:-1] if rest.endswith(")") else rest))
    return out


def agent_evals_events(text: str) -> list[Event]:
    """An AgentEvals transcript. Its tool outputs that no ``Tool Call`` line names (the
    harness's plan tools, logged as outputs only) become calls of their own that can never
    match another ("(unlogged)" with a serial number): the real history had some call
    there, and it broke any run."""
    log = text.split("## Conversation Log", 1)[-1].split("## EVALUATION TIMEOUT", 1)[0]
    marks = list(_ENTRY.finditer(log))
    entries = [(m.group(1), log[m.end():marks[n + 1].start() if n + 1 < len(marks)
                                else len(log)].strip()) for n, m in enumerate(marks)]
    events: list[Event] = []
    pending: list[tuple[int, str, str]] = []  # named calls waiting for their outputs
    serial = 0
    last_message: tuple[int, str] | None = None

    def flush_message() -> None:
        nonlocal last_message
        if last_message is not None:
            events.append(Reply(*last_message))
            last_message = None

    for n, (kind, body) in enumerate(entries):
        if kind == "Tool Call":
            flush_message()
            # Calls logged without an output (the harness's "Execution failed" retries)
            # have no result in the history: they never match another call.
            events.extend(Step(i, name, canonical_arguments(args), None)
                          for i, name, args in pending)
            pending = [(n, name, args) for name, args in split_calls(body)]
        elif kind == "Tool Output":
            if pending:
                index, name, args = pending.pop(0)
                events.append(Step(index, name, canonical_arguments(args), body))
            else:
                last_message = None  # the message came with (unlogged) calls
                serial += 1
                events.append(Step(n, "(unlogged)", f'{{"serial":{serial}}}', body))
        elif kind == "Agent Message":
            flush_message()
            last_message = (n, body)
        else:
            flush_message()
            events.append(UserTurn(n))
    flush_message()
    events.extend(Step(i, name, canonical_arguments(args), None) for i, name, args in pending)
    return events


# -- labels ------------------------------------------------------------------------------------

#: Labels written from each run's outcome and a reading of it (see the module docstring).
LABELS = json.loads((Path(__file__).resolve().parent / "agent-trajectory-labels.json")
                    .read_text(encoding="utf-8"))


def records(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every record, in a stable order."""
    out: list[dict[str, Any]] = []
    originals: list[list[Event]] = []
    seen: set[str] = set()

    def add(key: str, rid: str, path: str, events: list[Event], **meta: Any) -> None:
        repo_dir = {"swe-agent": args.swe_agent, "mini-swe-agent": args.mini_swe_agent,
                    "agent-evals": args.agent_evals}[key]
        name, commit, license_ = SOURCES[key]
        label = LABELS[rid]
        verbatim = license_ != UNLICENSED
        encoded = encode(events, verbatim)
        if findings_at_all_thresholds(events, not verbatim) != \
                findings_at_all_thresholds(decode(encoded)):
            raise SystemExit(f"{rid}: the stand-ins change the findings")
        originals.append(events)
        out.append({"id": rid, "source": {"repository": name, "path": path,
                                          "commit": resolve(repo_dir, commit),
                                          "license": license_},
                    **meta, "label": label["label"], "label_reason": label["reason"],
                    "events": encoded})

    commit = SOURCES["swe-agent"][1]
    paths = sorted(p for p in git(args.swe_agent, "ls-tree", "-r", "--name-only",
                                  commit).splitlines() if p.endswith(".traj"))
    for path in paths:
        raw = git(args.swe_agent, "show", f"{commit}:{path}")
        digest = hashlib.sha256(raw.encode()).hexdigest()
        data = json.loads(raw)
        if digest in seen or not data.get("trajectory"):
            continue
        seen.add(digest)
        rid = "swe-agent:" + path.rsplit("/", 2)[-2] + "/" + Path(path).stem
        add("swe-agent", rid, path, swe_agent_events(data), agent="SWE-agent",
            outcome=str((data.get("info") or {}).get("exit_status")))

    commit = SOURCES["mini-swe-agent"][1]
    path = "tests/test_data/github_issue.traj.json"
    messages = json.loads(git(args.mini_swe_agent, "show", f"{commit}:{path}"))
    add("mini-swe-agent", "mini-swe-agent:github_issue", path, mini_swe_agent_events(messages),
        agent="mini-swe-agent", outcome="submitted")

    commit = SOURCES["agent-evals"][1]
    paths = sorted(p for p in git(args.agent_evals, "ls-tree", "-r", "--name-only",
                                  commit, "data/agent_eval").splitlines() if p.endswith(".md"))
    for path in paths:
        rid = "agent-evals:" + path.removeprefix("data/agent_eval/").removesuffix(".md")
        if rid not in LABELS:
            continue  # not a transcript (summaries), or not in the snapshot read
        text = git(args.agent_evals, "show", f"{commit}:{path}")
        outcome = re.search(r"\*\*Mission Outcome:\*\* (.*)", text)
        add("agent-evals", rid, path, agent_evals_events(text), agent="AgentEvals harness",
            outcome=(outcome.group(1).strip() if outcome else "none logged")
            + ("; hit the 100-step recursion limit" if "EVALUATION TIMEOUT" in text else ""))
    check_digests_unique(out, originals)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--swe-agent", type=Path, required=True)
    parser.add_argument("--mini-swe-agent", type=Path, required=True)
    parser.add_argument("--agent-evals", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("tests/data/agent-trajectories"))
    args = parser.parse_args(argv)
    recs = records(args)
    args.out.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n"
                   for rec in recs)
    # mtime 0: the same records give the same bytes.
    (args.out / "trajectories.jsonl.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
    counts: dict[str, int] = {}
    for rec in recs:
        counts[rec["label"]] = counts.get(rec["label"], 0) + 1
    print(f"{len(recs)} trajectories -> {args.out}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
