"""The reissue ladder: what happens after each upstream attempt of an exchange (pure).

The I/O layer runs an attempt, tells the :class:`Ladder` how it ended (:class:`Ended`),
and carries out the :class:`Next` it gets back:

- ``done``: the response is complete as it is;
- ``relay``: the first attempt was answered with something other than a stream (an error
  status): pass it on as it came;
- ``fail``: report an error to the client (the upstream failed, or refused a reissue);
- ``reissue``: cut, then send the request again as ladder step ``step``;
- ``end``: cut, and end the response here (``cut`` mode, or every step ran away, or the
  attempts ran out): every open choice ends as at the length limit.

Each ``Next`` also says what to count: the exchange's outcome from now on, how the reissue
that just ended went (for ``runaway_sidecar_reissues_total``), whether to record the
verdict and remember the prompt, and whether the ladder was exhausted. Nothing here
awaits, reads a clock or touches a metric: the table tests drive it without sockets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from sidecar.labels import LadderStep, Mode, Outcome, ReissueOutcome, UpstreamErrorKind

NextKind = Literal["done", "relay", "fail", "reissue", "end"]


@dataclass(frozen=True, slots=True)
class Ended:
    """How one upstream attempt ended, as far as the ladder cares."""

    #: A detector fired during the attempt.
    runaway: bool = False
    #: The upstream answered with this non-stream status (nothing was streamed).
    status: int | None = None
    #: Talking to the upstream failed (connect, timeout, reset, malformed stream).
    failed: UpstreamErrorKind | None = None
    #: An in-stream error event ended the stream.
    stream_error: bool = False
    #: The client's choices this attempt finished.
    finished: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Next:
    """What to do after an attempt, and what to count (see the module docstring)."""

    kind: NextKind
    #: The exchange's outcome from now on (None: as it was).
    outcome: Outcome | None = None
    #: The reissue that just ended and how it went (None: it was the first attempt).
    reissue: tuple[LadderStep, ReissueOutcome] | None = None
    #: ``reissue``: the ladder step to send (``no-think``, ``salvage``, ``fallback:M``).
    step: str | None = None
    #: ``end``: ``cut`` (cut mode) or ``finish`` (the ladder ran out).
    action: Literal["cut", "finish"] | None = None
    #: ``reissue`` and ``end``: the client's choices still open, in order.
    open_choices: tuple[int, ...] = ()
    #: Count and log the attempt's verdict as a runaway.
    record_verdict: bool = False
    #: Remember the prompt's fingerprint (it ran away).
    remember: bool = False
    #: ``enforce`` ran out of steps or attempts (``runaway_sidecar_ladder_exhausted``).
    exhausted: bool = False
    #: Count an upstream error of this kind.
    upstream_error: UpstreamErrorKind | None = None


def step_label(step: str) -> LadderStep:
    """The ``step`` label of a ladder step."""
    if step == "salvage":
        return "salvage"
    return "fallback_model" if step.startswith("fallback:") else "thinking_off"


class Ladder:
    """The ladder of one exchange: ``steps`` in order after a cut (``reissue.ladder``),
    at most ``max_attempts`` upstream attempts in all, in ``mode``, for ``choices``
    client choices. ``salvageable``: the request can be continued from its reasoning
    (a ``salvage`` step is a ``no-think`` step otherwise)."""

    def __init__(self, steps: Iterable[str], *, max_attempts: int, mode: Mode, choices: int,
                 salvageable: bool) -> None:
        self._steps = list(steps)
        self._max_attempts = max_attempts
        self._mode = mode
        self._salvageable = salvageable
        self.open_choices: tuple[int, ...] = tuple(range(choices))
        #: The step that made the current attempt (``original`` for the first).
        self.step = "original"
        #: Attempts started so far.
        self.attempts = 0

    @property
    def salvage_ahead(self) -> bool:
        """A ``salvage`` step is still to come: attempts keep their reasoning for it."""
        return "salvage" in self._steps

    def started(self) -> int:
        """An attempt starts; returns its number (0 for the first)."""
        self.attempts += 1
        return self.attempts - 1

    def _reissue(self, outcome: ReissueOutcome) -> tuple[LadderStep, ReissueOutcome] | None:
        return None if self.step == "original" else (step_label(self.step), outcome)

    def interrupted(self, outcome: Literal["client_disconnect", "error"],
                    ) -> tuple[LadderStep, ReissueOutcome] | None:
        """The current attempt did not end: the client went away, or the sidecar failed.
        How the reissue went, if the attempt was one."""
        return self._reissue(outcome)

    def after(self, ended: Ended) -> Next:
        """What to do after the current attempt ended as ``ended``."""
        first = self.step == "original"
        if ended.status is not None:
            if first:
                return Next("relay")
            outcome: ReissueOutcome = "rejected" if 400 <= ended.status < 500 else "upstream_error"
            return Next("fail", outcome="upstream_error", reissue=self._reissue(outcome))
        if ended.failed is not None:
            return Next("fail", outcome="upstream_error", reissue=self._reissue("upstream_error"),
                        upstream_error=ended.failed)
        if not ended.runaway or self._mode == "shadow":
            result: Outcome | None = "shadow" if ended.runaway else None
            if not first:
                result = "reissued"
            error: UpstreamErrorKind | None = None
            if ended.stream_error and first:
                result, error = "upstream_error", "status_5xx"
            return Next("done", outcome=result, reissue=self._reissue("ok"),
                        record_verdict=ended.runaway, upstream_error=error)
        reissue = self._reissue("runaway")
        self.open_choices = tuple(i for i in self.open_choices if i not in ended.finished)
        step = self._steps.pop(0) if self._steps and self._mode == "enforce" else None
        if step is None or self.attempts >= self._max_attempts:
            cut = self._mode == "cut"
            return Next("end", outcome="cut" if cut else "exhausted", reissue=reissue,
                        action="cut" if cut else "finish", open_choices=self.open_choices,
                        record_verdict=True, remember=True, exhausted=self._mode == "enforce")
        if step == "salvage" and not self._salvageable:
            step = "no-think"
        self.step = step
        return Next("reissue", reissue=reissue, step=step, open_choices=self.open_choices,
                    record_verdict=True, remember=True)
