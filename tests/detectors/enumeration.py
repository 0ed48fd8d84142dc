"""Text of a puzzle search that enumerates candidate schedules, as a reasoning model writes
it: every candidate is a numbered list of steps with running totals, or the same steps
written as prose lines or sentences; candidates share their first steps and differ in the
people, the order and the numbers after that."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

TIMES = {"A": 1, "B": 3, "C": 6, "D": 8}


def schedules() -> Iterator[list[tuple[str, int]]]:
    """Every five-move schedule that brings four people across a bridge two at a time with
    one torch: (move, minutes) pairs, in a fixed order."""

    def go(near: frozenset[str], far: frozenset[str], moves: list[tuple[str, int]]
           ) -> Iterator[list[tuple[str, int]]]:
        if not near:
            yield moves
            return
        for pair in combinations(sorted(near), 2):
            t = max(TIMES[p] for p in pair)
            crossed = far | set(pair)
            left = near - set(pair)
            step = (f"{pair[0]} and {pair[1]} cross", t)
            if not left:
                yield [*moves, step]
                continue
            for back in sorted(crossed):
                yield from go(left | {back}, crossed - {back},
                              [*moves, step, (f"{back} returns", TIMES[back])])

    yield from go(frozenset(TIMES), frozenset(), [])


Order = list[list[tuple[str, int]]]


def inline(limit: int, order: Order | None = None) -> str:
    """Candidates written inline, "1. A and B cross:3. Total:3. 2. A returns:1. Total:4. ..."
    one paragraph per candidate (``order``, or all in a fixed order), until ``limit``
    characters."""
    parts = ["Let me list the possible schedules and add up the time of each one.\n\n"]
    size = len(parts[0])
    for n, moves in enumerate(order or schedules(), 1):
        total = 0
        steps = []
        for i, (move, t) in enumerate(moves, 1):
            total += t
            steps.append(f"{i}. {move}:{t}. Total:{total}.")
        verdict = "That works." if total <= 17 else f"That is {total - 17} too many."
        para = f"Option {n}: " + " ".join(steps) + f" {verdict}\n\n"
        parts.append(para)
        size += len(para)
        if size >= limit:
            break
    return "".join(parts)


def listed(limit: int, order: Order | None = None) -> str:
    """The same candidates as numbered lists, one step a line, with a line of commentary."""
    parts = []
    size = 0
    for n, moves in enumerate(order or schedules(), 1):
        total = 0
        lines = [f"Option {n}:"]
        for i, (move, t) in enumerate(moves, 1):
            total += t
            lines.append(f"{i}. {move} ({t}), total {total}.")
        lines.append(f"So option {n} takes {total} minutes in all.")
        para = "\n".join(lines) + "\n\n"
        parts.append(para)
        size += len(para)
        if size >= limit:
            break
    return "".join(parts)


#: What a search says before each candidate, in turn, after its number.
LEADS = (
    "let me try another order.",
    "what if the order changes?",
    "maybe a different pair goes first.",
    "another possibility to check.",
    "let me think about that one again.",
    "try a different sequence this time.",
)


def _step(move: str, minutes: int) -> str:
    return f"{move}, {minutes} minute{'' if minutes == 1 else 's'}."


def prose(limit: int, order: Order | None = None, *, lines: bool = True) -> str:
    """The candidates written as prose, no list markers: a lead sentence ("Option 7, let me
    try another order."), then one step a line ("A and B cross, 3 minutes.") or one
    sentence each in a paragraph, then the total ("That makes 19 minutes in total, 2 too
    many."), until ``limit`` characters."""
    parts = ["We need to get everyone across in 17 minutes at most.\n\n"]
    size = len(parts[0])
    sep = "\n" if lines else " "
    for n, moves in enumerate(order or schedules(), 1):
        total = sum(t for _, t in moves)
        verdict = "which works." if total <= 17 else f"{total - 17} too many."
        para = sep.join([
            f"Option {n}, {LEADS[n % len(LEADS)]}",
            *(_step(move, t) for move, t in moves),
            f"That makes {total} minutes in total, {verdict}",
        ]) + "\n\n"
        parts.append(para)
        size += len(para)
        if size >= limit:
            break
    return "".join(parts)
