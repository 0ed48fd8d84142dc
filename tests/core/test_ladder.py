"""The reissue ladder as a table: attempt endings in, decisions and counts out (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.core.ladder import Ended, Ladder, Next, step_label
from sidecar.labels import Mode

RUNAWAY = Ended(runaway=True)
ANSWERED = Ended()


def walk(endings: list[Ended], *, steps: tuple[str, ...] = ("no-think",), mode: Mode = "enforce",
         max_attempts: int = 3, choices: int = 1, salvageable: bool = True) -> list[Next]:
    """The decisions a ladder makes for ``endings``, one attempt each, until it stops."""
    ladder = Ladder(steps, max_attempts=max_attempts, mode=mode, choices=choices,
                    salvageable=salvageable)
    out = []
    for ended in endings:
        ladder.started()
        nxt = ladder.after(ended)
        out.append(nxt)
        if nxt.kind != "reissue":
            break
    return out


def brief(nxt: Next) -> tuple[Any, ...]:
    return (nxt.kind, nxt.step or nxt.action, nxt.outcome, nxt.reissue)


@pytest.mark.parametrize(("endings", "kwargs", "expected"), [
    # answered at once: nothing to count
    ([ANSWERED], {}, [("done", None, None, None)]),
    # the first attempt runs away, thinking off answers
    ([RUNAWAY, ANSWERED], {},
     [("reissue", "no-think", None, None),
      ("done", None, "reissued", ("thinking_off", "ok"))]),
    # the reissue runs away too: the one-step ladder is exhausted
    ([RUNAWAY, RUNAWAY], {},
     [("reissue", "no-think", None, None),
      ("end", "finish", "exhausted", ("thinking_off", "runaway"))]),
    # two steps: salvage, then a fallback model that answers
    ([RUNAWAY, RUNAWAY, ANSWERED], {"steps": ("salvage", "fallback:small")},
     [("reissue", "salvage", None, None),
      ("reissue", "fallback:small", None, ("salvage", "runaway")),
      ("done", None, "reissued", ("fallback_model", "ok"))]),
    # salvage cannot continue this request (n>1, no messages): it is a no-think step
    ([RUNAWAY, ANSWERED], {"steps": ("salvage",), "salvageable": False},
     [("reissue", "no-think", None, None),
      ("done", None, "reissued", ("thinking_off", "ok"))]),
    # the attempts bound ends the ladder before its steps do
    ([RUNAWAY, RUNAWAY], {"steps": ("no-think", "fallback:a", "fallback:b"), "max_attempts": 2},
     [("reissue", "no-think", None, None),
      ("end", "finish", "exhausted", ("thinking_off", "runaway"))]),
    # max_attempts 1: no reissue at all
    ([RUNAWAY], {"max_attempts": 1}, [("end", "finish", "exhausted", None)]),
    # an empty ladder
    ([RUNAWAY], {"steps": ()}, [("end", "finish", "exhausted", None)]),
    # cut mode: end cleanly, never reissue
    ([RUNAWAY], {"mode": "cut"}, [("end", "cut", "cut", None)]),
    # shadow mode: the verdict is recorded, nothing changes
    ([RUNAWAY], {"mode": "shadow"}, [("done", None, "shadow", None)]),
    # the first attempt is answered with an error status: relayed as it came
    ([Ended(status=400)], {}, [("relay", None, None, None)]),
    # a reissue refused with a 4xx: the thinking-off rule does not fit
    ([RUNAWAY, Ended(status=400)], {},
     [("reissue", "no-think", None, None),
      ("fail", None, "upstream_error", ("thinking_off", "rejected"))]),
    # a reissue answered 5xx: an upstream error
    ([RUNAWAY, Ended(status=503)], {},
     [("reissue", "no-think", None, None),
      ("fail", None, "upstream_error", ("thinking_off", "upstream_error"))]),
    # the upstream fails on the first attempt, and on a reissue
    ([Ended(failed="connect")], {}, [("fail", None, "upstream_error", None)]),
    ([RUNAWAY, Ended(failed="timeout")], {"steps": ("fallback:x",)},
     [("reissue", "fallback:x", None, None),
      ("fail", None, "upstream_error", ("fallback_model", "upstream_error"))]),
    # an in-stream error ends the first attempt
    ([Ended(stream_error=True)], {}, [("done", None, "upstream_error", None)]),
    # ... and a reissue (its error event reached the client; the reissue counts as ok)
    ([RUNAWAY, Ended(stream_error=True)], {},
     [("reissue", "no-think", None, None),
      ("done", None, "reissued", ("thinking_off", "ok"))]),
])
def test_ladder_table(endings: list[Ended], kwargs: dict[str, Any],
                      expected: list[tuple[Any, ...]]) -> None:
    """Each sequence of attempt endings gives these decisions, outcomes and reissue counts."""
    assert [brief(n) for n in walk(endings, **kwargs)] == expected


def test_what_a_runaway_counts() -> None:
    """A runaway is recorded and remembered on every cut; only enforce counts exhaustion;
    shadow records without remembering."""
    reissue, end = walk([RUNAWAY, RUNAWAY])
    assert (reissue.record_verdict, reissue.remember, reissue.exhausted) == (True, True, False)
    assert (end.record_verdict, end.remember, end.exhausted) == (True, True, True)
    (cut,) = walk([RUNAWAY], mode="cut")
    assert (cut.record_verdict, cut.remember, cut.exhausted) == (True, True, False)
    (shadow,) = walk([RUNAWAY], mode="shadow")
    assert (shadow.record_verdict, shadow.remember) == (True, False)
    (answered,) = walk([ANSWERED])
    assert (answered.record_verdict, answered.remember) == (False, False)


def test_upstream_error_counts() -> None:
    """A failed attempt counts its error kind; an in-stream error on the first attempt
    counts as a 5xx; a refused reissue counts no upstream error of its own."""
    assert walk([Ended(failed="reset")])[0].upstream_error == "reset"
    assert walk([Ended(stream_error=True)])[0].upstream_error == "status_5xx"
    assert walk([RUNAWAY, Ended(status=400)])[-1].upstream_error is None


def test_open_choices_shrink_as_choices_finish() -> None:
    """With n=3, a choice finished by the cut attempt is not reissued; the rest keep their
    client indices in order."""
    first, second = walk([Ended(runaway=True, finished=frozenset({1})),
                          Ended(runaway=True, finished=frozenset({2}))],
                         steps=("no-think", "no-think"), choices=3)
    assert first.open_choices == (0, 2)
    assert (second.kind, second.open_choices) == ("reissue", (0,))


def test_interrupted_attempts() -> None:
    """A client that leaves, or a sidecar error, counts against the reissue in flight and
    not against a first attempt."""
    ladder = Ladder(("no-think",), max_attempts=3, mode="enforce", choices=1, salvageable=True)
    ladder.started()
    assert ladder.interrupted("client_disconnect") is None
    ladder.after(RUNAWAY)
    ladder.started()
    assert ladder.interrupted("client_disconnect") == ("thinking_off", "client_disconnect")
    assert ladder.interrupted("error") == ("thinking_off", "error")


def test_salvage_ahead_and_labels() -> None:
    """Attempts keep reasoning only while a salvage step is still to come; step labels."""
    ladder = Ladder(("salvage", "no-think"), max_attempts=5, mode="enforce", choices=1,
                    salvageable=True)
    assert ladder.salvage_ahead
    ladder.started()
    ladder.after(RUNAWAY)
    assert not ladder.salvage_ahead
    assert [step_label(s) for s in ("no-think", "salvage", "fallback:m")] == [
        "thinking_off", "salvage", "fallback_model"]
