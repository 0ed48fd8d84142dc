"""Text of a puzzle search that enumerates candidate schedules, as a reasoning model writes
it: every candidate is a numbered list of steps with running totals, candidates share their
first steps and differ in the people, the order and the numbers after that."""

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
