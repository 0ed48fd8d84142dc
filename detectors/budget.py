"""Budgets and stall: the clock- and count-driven detectors.

These need no text analysis; :class:`~detectors.chain.Chain` calls them on every delta and
on every timer tick. Time is always an argument (``now``), never read here.
"""

from __future__ import annotations

from detectors.base import THINKING, Channel, Evidence, Verdict

NO_LIMIT = -1


def _level(name: str, value: object) -> int | None:
    """Validate one level of the thinking budget: None or -1 sets nothing, else an int >= 0."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not a boolean")  # noqa: TRY004 (one error type for the 400 mapping)
    if isinstance(value, str):
        text = value.strip()
        if not (text.isascii() and text.lstrip("-").isdigit()):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        value = int(text)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")  # noqa: TRY004
    if value == NO_LIMIT:
        return None
    if value < 0:
        raise ValueError(f"{name} must be -1 (no limit) or >= 0, got {value}")
    return value


def resolve_thinking_budget(
    server_default: int | None,
    model_override: int | None,
    body_value: object,
    header_value: object,
) -> int | None:
    """The thinking-token budget of one request, or None for no budget.

    Precedence, highest first: the ``X-Thinking-Budget`` header, the request body's
    ``thinking_token_budget``, the per-model override, the server default. The first level
    that sets a limit wins. At every level ``None`` (absent) or ``-1`` means "no limit at this
    level", so the decision falls through to the next one. Values are integers ``>= 0``
    (header strings such as ``"2048"`` are parsed; floats with an integral value are
    accepted from JSON). Booleans, other types and values below -1 raise ``ValueError``
    naming the level, which the proxy maps to a 400 response.
    """
    for name, value in (
        ("X-Thinking-Budget header", header_value),
        ("thinking_token_budget", body_value),
        ("model thinking_token_budget", model_override),
        ("server thinking_token_budget", server_default),
    ):
        budget = _level(name, value)
        if budget is not None:
            return budget
    return None


class ThinkingTokenBudget:
    """Fires on the thinking delta that makes the thinking tokens reach ``budget``."""

    __slots__ = ("_fired", "budget", "name")

    def __init__(self, budget: int) -> None:
        self.name = "thinking_token_budget"
        #: The thinking tokens at which it fires (a caller may compare before it asks).
        self.budget = budget
        self._fired = False

    def check(self, spent: int, at_token: int, at_char: int) -> Verdict | None:
        """``spent`` is the thinking-token total including the current delta."""
        if self._fired or spent < self.budget:
            return None
        self._fired = True
        return Verdict(
            self.name,
            THINKING,
            f"thinking used {spent} tokens, budget is {self.budget}",
            Evidence("", 0, spent),
            at_token,
            at_char,
        )


class ThinkingSecondsBudget:
    """Fires when the thinking phase has run ``seconds`` past ``started_at``.

    The thinking phase starts with the first thinking delta and ends with the first content
    delta; before and after it this budget does not apply.
    """

    __slots__ = ("_fired", "_seconds", "deadline", "name")

    def __init__(self, seconds: float, started_at: float) -> None:
        self.name = "thinking_seconds_budget"
        self._seconds = seconds
        #: The time from which it fires (a caller may compare before it asks).
        self.deadline = started_at + seconds
        self._fired = False

    def check(self, now: float, at_token: int, at_char: int) -> Verdict | None:
        """Call while in the thinking phase, with the current time."""
        if self._fired or now < self.deadline:
            return None
        self._fired = True
        return Verdict(
            self.name,
            THINKING,
            f"thinking ran past its {self._seconds:g} s budget",
            Evidence("", 0, 0),
            at_token,
            at_char,
        )


class Stall:
    """Fires when no delta arrived for ``seconds`` (counting from the request start).

    The caller keeps the time of the last delta (the request start before the first) and
    passes it to ``check``: a delta then costs one store, not a call."""

    __slots__ = ("_fired", "_seconds", "name")

    def __init__(self, seconds: float) -> None:
        self.name = "stall"
        self._seconds = seconds
        self._fired = False

    def check(self, now: float, last: float, channel: Channel, at_token: int,
              at_char: int) -> Verdict | None:
        """Called by the timer; ``last`` is when the last delta came (or the request
        started) and ``channel`` that delta's channel."""
        idle = now - last
        if self._fired or idle < self._seconds:
            return None
        self._fired = True
        return Verdict(
            self.name,
            channel,
            f"no token for {idle:.1f} s (limit {self._seconds:g} s)",
            Evidence("", 0, 0),
            at_token,
            at_char,
        )
