"""Agent loops across turns, at the request level (pure): what a request whose history
shows a loop gets (docs/agent-loops.md).

:func:`check` runs after ``prepare.shape`` on the body the upstream is to get. It reads
the trailing history through the API (``WireApi.agent_history``), runs
:func:`detectors.agent_loops.check` on it when it holds a tool call, and applies the
request's action (:func:`loop_mode`: the ``X-Agent-Loops`` header, the model's
``[[models]]`` entry, the global ``agent_loops``):

- ``shadow``: the request goes as it came; the finding is counted and logged;
- ``nudge``: one note (:func:`note_text`) is added where the API has the user speak last
  (``WireApi.with_loop_note``), on the request where the loop first reaches its threshold
  only (once per episode; later requests of the same run go as they came), and never when
  the body already holds a note (a second sidecar in the path). The note is not part of
  the prompt's fingerprint (the facts are kept from before it), so the runaway memory
  knows the request with and without it as the same prompt;
- ``refuse``: the request is answered with a 400 in the API's error shape
  (:func:`refusal_text`), while the history ends in the loop; once the user has spoken
  after the loop's last call (an instruction after the refusal), the request gets the
  note instead, so the conversation can go on. A ``text`` loop always has a user message
  after its last reply, so under ``refuse`` it gets the note.

Nothing here runs per streamed chunk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import orjson

from detectors.agent_loops import Event, LoopFinding, Step, UserTurn
from detectors.agent_loops import check as find_loops
from sidecar.config import Config, model_override
from sidecar.core.plan import Refusal
from sidecar.core.prepare import Shaped
from sidecar.core.wire import WireApi
from sidecar.labels import AGENT_LOOP_MODES, AgentLoopAction, AgentLoopMode

#: The per-request control.
HEADER = "X-Agent-Loops"
#: How every note begins: a body that holds it already gets no second one.
NOTE_MARK = "[runaway-sidecar: agent loop]"


@dataclass(frozen=True, slots=True)
class Found:
    """A loop in a request's history, and what was done about it."""

    finding: LoopFinding
    action: AgentLoopAction
    #: Why a ``nudge`` or ``refuse`` request went as it came (``passed``) or was nudged
    #: instead of refused; empty otherwise.
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Checked:
    """The outcome of :func:`check`: the request to send on (``shaped``, with the note
    when nudged), the loop found (None: none, or not looked for), and the refusal that
    answers the request instead (``refuse``)."""

    shaped: Shaped
    found: Found | None = None
    refusal: Refusal | None = None


def loop_mode(cfg: Config, model: str | None, headers: Mapping[str, str]
              ) -> AgentLoopMode | Refusal:
    """The request's action: the header, the model's entry, the global setting."""
    given = headers.get(HEADER)
    if given is not None:
        value = given.strip().lower()
        for mode in AGENT_LOOP_MODES:
            if mode == value:
                return mode
        return Refusal(f"{HEADER} must be one of {', '.join(AGENT_LOOP_MODES)}", HEADER)
    override = model_override(cfg, model or "")
    if override is not None and override.agent_loops is not None:
        return override.agent_loops
    return cfg.agent_loops


def _calls(finding: LoopFinding) -> str:
    return ", ".join(f"`{call.name}`" for call in finding.calls)


def note_text(finding: LoopFinding) -> str:
    """The note a ``nudge`` adds for the model: the call, how often, and a request to
    change approach."""
    if finding.kind == "repeat":
        what = (f"You have called the tool {_calls(finding)} {finding.count} times in a row "
                "with the same arguments, and its result did not change.")
    elif finding.kind == "cycle":
        what = (f"You have repeated the same sequence of tool calls ({_calls(finding)}) "
                f"{finding.count} times, and the results did not change.")
    else:
        what = f"You have given the same reply {finding.count} times in a row."
    return (f"{NOTE_MARK} {what} Doing it again will not give a different result. Stop "
            "repeating it and try a different approach.")


def refusal_text(finding: LoopFinding) -> str:
    """The message of a ``refuse``: for the agent's user, who is the one to act."""
    if finding.kind == "repeat":
        what = (f"the model called the tool {_calls(finding)} {finding.count} times in a row "
                "with the same arguments and got the same result each time")
    elif finding.kind == "cycle":
        what = (f"the model repeated the tool calls {_calls(finding)} {finding.count} times "
                "with the same results")
    else:
        what = f"the model gave the same reply {finding.count} times in a row"
    return (f"runaway-sidecar stopped an agent loop: {what}. Repeating the request will "
            "not help: give the agent a different instruction.")


def first_reached(finding: LoopFinding, threshold: int, period: int) -> bool:
    """Whether the history's newest turn is the one that took ``finding`` to its
    ``threshold``: without that turn's calls (those at its last index) the run of
    ``period``-call units would be below it."""
    last = finding.indices[-1]
    before = sum(1 for index in finding.indices if index != last)
    return before // period < threshold


def _user_after(events: Sequence[Event], finding: LoopFinding) -> bool:
    last = finding.indices[-1]
    return any(isinstance(e, UserTurn) and e.index > last for e in events)


def _nudged(cfg: Config, api: WireApi, shaped: Shaped, finding: LoopFinding,
            reason: str = "") -> Checked:
    """Add the note to ``shaped`` once per episode (any time after a refusal, ``reason``
    set: the user spoke since), or let it pass (see the module docstring)."""
    loops = cfg.agent_loop_detector
    threshold, period = {"repeat": (loops.repeat_min, 1), "text": (loops.text_min, 1),
                         "cycle": (loops.cycle_min, len(finding.calls))}[finding.kind]
    if NOTE_MARK.encode() in shaped.raw:
        return Checked(shaped, Found(finding, "passed", "note_in_body"))
    if not reason and not first_reached(finding, threshold, period):
        return Checked(shaped, Found(finding, "passed", "nudged_before"))
    body = api.with_loop_note(shaped.body, note_text(finding))
    if body is None:
        return Checked(shaped, Found(finding, "passed", "no_place_for_note"))
    # ``facts`` stay those of the body without the note: its fingerprint is the prompt's.
    return Checked(replace(shaped, body=body, raw=orjson.dumps(body)),
                   Found(finding, "nudge", reason))


def check(cfg: Config, api: WireApi, shaped: Shaped, headers: Mapping[str, str]) -> Checked:
    """Look for an agent loop in ``shaped``'s history and apply the request's action (see
    the module docstring); a malformed ``X-Agent-Loops`` is refused."""
    mode = loop_mode(cfg, shaped.model, headers)
    if isinstance(mode, Refusal):
        return Checked(shaped, refusal=mode)
    if mode == "off":
        return Checked(shaped)
    events = api.agent_history(shaped.body, cfg.agent_loop_detector.window)
    if not any(isinstance(e, Step) for e in events):
        return Checked(shaped)
    found = find_loops(events, cfg.agent_loop_detector)
    if not found:
        return Checked(shaped)
    finding = found[0]
    if mode == "shadow":
        return Checked(shaped, Found(finding, "shadow"))
    if mode == "refuse":
        if not _user_after(events, finding):
            return Checked(shaped, Found(finding, "refuse"),
                           Refusal(refusal_text(finding), _history_param(api)))
        return _nudged(cfg, api, shaped, finding, "user_after_loop")
    return _nudged(cfg, api, shaped, finding)


def _history_param(api: WireApi) -> str:
    return "input" if api.route == "responses" else "messages"
