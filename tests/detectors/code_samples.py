"""Thinking text of a coding assistant, written for the code-awareness tests of recurrence.

A bugfix session quotes the user's function, reasons about it, rewrites it with a one-line
fix (and the answer shows it once more), which is healthy; a runaway re-emits the same
function again and again. The functions are ordinary Python of the kind users paste.
"""

from __future__ import annotations

#: The user's function as pasted in the prompt (38 lines): crashes on an empty window.
RATE_LIMITS = '''\
def summarize_latencies(samples, window_seconds=60, now=None):
    """Group request latencies into per-endpoint stats for the last window."""
    if now is None:
        now = time.monotonic()
    cutoff = now - window_seconds
    by_endpoint = defaultdict(list)
    for sample in samples:
        if sample.timestamp < cutoff:
            continue
        if sample.status >= 500:
            by_endpoint[sample.endpoint].append(None)
            continue
        by_endpoint[sample.endpoint].append(sample.latency_ms)

    report = {}
    for endpoint, values in by_endpoint.items():
        ok = [v for v in values if v is not None]
        errors = len(values) - len(ok)
        ok.sort()
        p50 = ok[len(ok) // 2]
        p95 = ok[int(len(ok) * 0.95)]
        p99 = ok[min(len(ok) - 1, int(len(ok) * 0.99))]
        mean = sum(ok) / len(ok)
        report[endpoint] = {
            "count": len(values),
            "errors": errors,
            "error_rate": errors / len(values),
            "p50_ms": round(p50, 1),
            "p95_ms": round(p95, 1),
            "p99_ms": round(p99, 1),
            "mean_ms": round(mean, 1),
        }

    slowest = sorted(report.items(), key=lambda kv: kv[1]["p95_ms"], reverse=True)
    for endpoint, stats in slowest[:3]:
        log.info("slow endpoint %s p95=%.1fms errors=%d",
                 endpoint, stats["p95_ms"], stats["errors"])
    return report
'''

#: The rewrite with the guard: one line added before the percentiles.
RATE_LIMITS_FIXED = RATE_LIMITS.replace(
    "        ok.sort()\n",
    "        if not ok:\n            continue\n        ok.sort()\n",
)

#: A second edit made while re-checking: p95 clamped like p99.
RATE_LIMITS_CHECKED = RATE_LIMITS_FIXED.replace(
    "p95 = ok[int(len(ok) * 0.95)]", "p95 = ok[min(len(ok) - 1, int(len(ok) * 0.95))]"
)

ANALYSIS = """\
Okay, so the user says this crashes with a ZeroDivisionError in production, but only \
sometimes, and mostly at night. Let me read through it carefully.

The first loop drops samples older than the cutoff and buckets the rest by endpoint. \
Server errors are appended as None so they still count toward the total but not toward \
the latency percentiles. That part looks intentional.

Then for each endpoint it filters out the None values into ok. If every request to an \
endpoint in the window failed with a 5xx, then ok is empty. ok.sort() is fine on an empty \
list, but ok[len(ok) // 2] would raise IndexError before we even get to the mean. Hmm, but \
the user said ZeroDivisionError, not IndexError. Wait, actually the order matters: p50 is \
computed first, so an empty list would raise IndexError on that line. Unless... let me \
check the error_rate line: errors / len(values). values can't be empty, because an \
endpoint only appears in by_endpoint if at least one sample was appended.

So where does ZeroDivisionError come from? Maybe the traceback they pasted is from an older \
version where the mean was computed first. At night traffic is low, so a quiet endpoint can \
easily have only failed requests in a 60-second window, which matches "mostly at night". \
Either way the root cause is the same: an endpoint whose window holds only errors has no \
latencies to summarize.

What should the report say for such an endpoint? Skipping it entirely would hide an \
endpoint that is failing 100% of the time, which is the worst thing to hide. But the \
simplest fix that matches the current report shape is to skip the percentile computation. \
Actually, let me keep it minimal for now and just skip, and mention the alternative in the \
answer. The slowest-endpoints log at the end sorts by p95_ms, so every entry in report \
must have that key; skipping keeps that invariant.
"""

AFTER_FIX = """\
That adds the guard right after the filtering, so ok is never empty when we index into \
it. The error_rate is still computed for endpoints that have at least one successful \
request. The log line at the end only sees endpoints that made it into the report, so it \
cannot hit a missing key.

Let me also double check p99: min(len(ok) - 1, int(len(ok) * 0.99)) keeps the index in \
range. For p95 with a single element, int(1 * 0.95) is 0, fine. With 20 elements, \
int(20 * 0.95) = 19, which is the last index, also fine. Good.

I think the answer should show the fixed function and explain the all-errors window, and \
suggest reporting those endpoints with an error_rate of 1.0 if they want them visible.
"""

CHECK_AGAIN = """\
Hmm, wait. Let me re-check p95 again more carefully, because p99 has a clamp and p95 \
doesn't. int(len(ok) * 0.95) for len(ok) = 1 gives 0, for 19 gives 18, for 20 gives 19. \
Floating point could in principle push it up to len(ok) for some lengths, so clamping it \
the same way as p99 costs nothing. Let me put the whole function together once more with \
both changes and read it top to bottom:
"""

FINAL_CHECK = """\
Reading it top to bottom: the cutoff filter, the bucketing, the guard, then the clamped \
percentiles, the mean over a non-empty list, and the log of the three slowest. Nothing \
else divides by a length that could be zero. Good, that's the version to give.
"""

ANSWER_INTRO = """\
The crash happens when every request to an endpoint inside the window failed: the \
latency list for that endpoint is empty, so indexing it for the percentiles (and the \
mean) fails. Skip such endpoints before computing the statistics:

"""

ANSWER_OUTRO = """
If you would rather see failing endpoints in the report, add an entry with \
`"error_rate": 1.0` and no percentiles instead of `continue`.
"""


def fenced(code: str) -> str:
    """``code`` in a Python fence, as models write it."""
    return f"```python\n{code}```\n\n"


def bugfix_session(recheck: bool, *, fences: bool = True) -> tuple[str, str]:
    """(thinking, content) of a healthy bugfix: quote, reason, rewrite with the guard;
    with ``recheck``, the function is put together a third time with one more edit."""
    wrap = fenced if fences else (lambda code: code + "\n")
    thinking = (
        "The user pasted this function:\n\n"
        + wrap(RATE_LIMITS)
        + ANALYSIS
        + "\nSo the fix is to skip endpoints with no successful samples. "
        "Let me rewrite the function with the guard:\n\n"
        + wrap(RATE_LIMITS_FIXED)
        + AFTER_FIX
    )
    final = RATE_LIMITS_FIXED
    if recheck:
        thinking += "\n" + CHECK_AGAIN + "\n" + wrap(RATE_LIMITS_CHECKED) + FINAL_CHECK
        final = RATE_LIMITS_CHECKED
    content = ANSWER_INTRO + fenced(final) + ANSWER_OUTRO
    return thinking, content


#: A 30-line function a runaway keeps rewriting.
MERGE = '''\
def merge_intervals(intervals):
    """Merge overlapping [start, end] intervals; touching intervals are merged too."""
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda iv: (iv[0], iv[1]))
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return merged


def total_covered(intervals):
    """Length of the union of the intervals."""
    total = 0
    for start, end in merge_intervals(intervals):
        total += end - start
    return total


def gaps(intervals, lo, hi):
    """The uncovered stretches of [lo, hi]."""
    out = []
    cursor = lo
    for start, end in merge_intervals(intervals):
        if start > cursor:
            out.append([cursor, min(start, hi)])
        cursor = max(cursor, end)
    if cursor < hi:
        out.append([cursor, hi])
    return out
'''

LOOP_INTRO = """\
The user wants the intervals merged, with touching intervals like [1, 2] and [2, 3] \
treated as overlapping, plus the total covered length and the gaps inside a range. \
Sorting by start and sweeping once is the standard approach, O(n log n). Let me write it.

"""

#: What the runaway says between its copies.
RESTART = "Wait, let me rewrite it.\n\n"


def rewrite_loop(copies: int) -> tuple[str, list[int]]:
    """A runaway that writes MERGE ``copies`` times; returns the text and the offset at
    which each copy's code starts."""
    text = LOOP_INTRO
    starts = []
    for i in range(copies):
        if i:
            text += RESTART
        starts.append(len(text) + len("```python\n"))
        text += fenced(MERGE)
    return text, starts
