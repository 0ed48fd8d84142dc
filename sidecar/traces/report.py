"""``calibrate --html``: one self-contained page (inline CSS and SVG, no script, no
external asset) that shows a calibration (pure: reports in, HTML out).

A summary table links to each model's section (``#model-N``, in the order of the
reports). Per model: what the settings in force and the proposal do, each threshold's
margin over the healthy maxima, and the proposed ``[[models]]`` entry. Then per trace one
chart over its whole text (x: the character offset, 0 to the text's length):

- each calibrated rule's score along the reasoning, divided by its threshold in force, so
  every rule fires where its line reaches 1 (the grey line);
- the model's healthy maxima, divided the same way, as dashed lines in each rule's colour;
- where the settings in force fire (a red line, class ``fired``) and where the proposal
  fires if elsewhere (an orange dashed line, class ``fired-proposed``), the labelled
  onset (a green dashed line, class ``onset``).

Each marker carries ``data-at`` (its offset) and each chart ``data-id`` and
``data-chars``, so a test can check a marker's position. Traces are ordered loops,
healthy (nearest to a threshold first), ambiguous; past ``limit`` charts (given to every
model's loops first, then to the healthy traces nearest a threshold) the rest are listed
by name only.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from detectors.scores import SCORES
from sidecar.traces.calibrate import ModelReport, Outcome, Scored, number, toml_entry
from sidecar.traces.store import Trace

WIDTH, HEIGHT = 960, 150
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 10, 22
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
#: The chart's y axis: score / threshold from 0 to this.
Y_MAX = 1.6
MAX_POINTS = 240
COLOURS = {"periodic.copy": "#8c564b", "restatement.copies": "#9467bd",
           "recurrence.evidence": "#1f77b4", "recurrence.window": "#17becf",
           "sentences.repeated": "#e377c2"}

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1000px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 36px; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
pre { background: #f7f7f7; padding: 8px; overflow-x: auto; font-size: 12px; }
.trace { margin: 14px 0 4px; font-size: 13px; }
.trace b.loop { color: #b00; } .trace b.healthy { color: #070; } .trace b.ambiguous { color: #850; }
table.summary td:first-child { max-width: 420px; }
.legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
.legend i { display: inline-block; width: 18px; height: 3px; vertical-align: middle;
            margin-right: 4px; }
svg { display: block; background: #fff; border: 1px solid #e4e4e4; }
"""


def page(reports: Sequence[ModelReport], *, margin: float, limit: int = 400,
         title: str = "runaway-sidecar calibration") -> str:
    """The whole page (see the module docstring)."""
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>"
             f"{_e(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>", _summary(reports), _legend()]
    # The charts go to the loops of every model first, then to the healthy traces that
    # come nearest a threshold, then to the ambiguous ones.
    ranked = sorted(((_rank(item, r), id(item)) for r in reports for item in _ordered(r)),
                    key=lambda pair: pair[0])
    charted = {key for _, key in ranked[:limit]}
    for n, report in enumerate(reports, 1):
        parts.append(_model(report, margin, n))
        for item in _ordered(report):
            if id(item) in charted:
                parts.append(_chart(item, report))
            else:
                parts.append(f"<div class='trace'>{_header(item, report)} "
                             "(no chart: past the page's limit)</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _summary(reports: Sequence[ModelReport]) -> str:
    """One row per model: what the settings in force and the proposal do."""
    rows = []
    for n, r in enumerate(reports, 1):
        c, a = r.current, r.after
        rows.append(
            f"<tr><td><a href='#model-{n}'>{_e(r.model)}</a></td><td>{c.loops}</td>"
            f"<td>{c.healthy}</td>"
            f"<td>{c.caught} &rarr; {a.caught}</td>"
            f"<td>{c.false_alarms} &rarr; {a.false_alarms}</td>"
            f"<td>{_delay(c)} &rarr; {_delay(a)}</td>"
            f"<td>{len(r.proposed) + (r.proposed_budget != r.budget)}</td></tr>")
    return ("<table class='summary'><tr><th>model</th><th>loops</th><th>healthy</th>"
            "<th>loops caught</th><th>false alarms</th><th>median delay after onset</th>"
            "<th>settings changed</th></tr>" + "".join(rows)
            + "</table><p>Each cell: the settings in force &rarr; the proposal.</p>")


def _delay(o: Outcome) -> str:
    return "-" if o.median_delay_chars is None else number(o.median_delay_chars)


def _legend() -> str:
    spans = [f"<span><i style='background:{COLOURS[s.key]}'></i>{_e(s.key)}"
             f"{' (most so far)' if s.running_max else ''}</span>" for s in SCORES]
    spans += ["<span><i style='background:#999'></i>threshold in force (1.0)</span>",
              "<span><i style='background:#d00'></i>fires (settings in force)</span>",
              "<span><i style='background:#f80'></i>fires (proposal)</span>",
              "<span><i style='background:#0a0'></i>labelled onset</span>"]
    return ("<p class='legend'>Scores are divided by their threshold in force; dashed "
            "lines are the model's healthy maxima, in the same colours.<br>"
            + "".join(spans) + "</p>")


def _model(report: ModelReport, margin: float, n: int) -> str:
    c, a = report.current, report.after
    rows = []
    for name, o in (("settings in force", c), ("proposal", a)):
        delay = "-" if o.median_delay_chars is None else f"{_delay(o)} ({o.onsets})"
        rows.append(f"<tr><td>{name}</td><td>{o.caught}/{o.loops}</td>"
                    f"<td>{o.false_alarms}/{o.healthy}</td><td>{delay}</td></tr>")
    now, then = report.margins(), report.margins(proposal=True)
    margins = []
    for key, m in now.items():
        p = then[key]
        margins.append(
            f"<tr><td>{_e(key)}</td><td>{number(m['healthy_max'])}</td>"
            f"<td>{number(m['value'])}</td><td>{_x(m['margin'])}</td>"
            f"<td>{number(p['value'])}</td><td>{_x(p['margin'])}</td></tr>")
    table = ("<table><tr><th>threshold</th><th>healthy max</th><th>in force</th>"
             "<th>margin</th><th>proposed</th><th>margin</th></tr>" + "".join(margins)
             + "</table>") if margins else ""
    return (f"<h2 id='model-{n}'>{_e(report.model)}</h2><p>{c.loops} loops, {c.healthy} healthy, "
            f"{len(report.ambiguous)} ambiguous (shown, not scored).</p>"
            "<table><tr><th></th><th>loops caught</th><th>false alarms</th>"
            "<th>median delay after onset (loops)</th></tr>" + "".join(rows) + "</table>"
            + table + f"<pre>{_e(toml_entry(report, margin))}</pre>")


def _x(value: float | None) -> str:
    return "-" if value is None else f"x{value:g}"


def _ordered(report: ModelReport) -> list[Scored | Trace]:
    loops = [s for s in report.items if s.label == "loop"]
    healthy = sorted((s for s in report.items if s.label == "healthy"),
                     key=lambda s: -_closeness(s, report))
    return [*loops, *healthy, *report.ambiguous]


def _rank(item: Scored | Trace, report: ModelReport) -> tuple[int, float]:
    """Which traces get a chart first (lowest): loops, then healthy traces nearest a
    threshold, then the ambiguous ones."""
    if not isinstance(item, Scored):
        return (2, 0.0)
    return (0, 0.0) if item.label == "loop" else (1, -_closeness(item, report))


def _closeness(item: Scored, report: ModelReport) -> float:
    top = item.scores.maxima()
    return max((top[s.key] / getattr(report.config, s.threshold)
                for s in SCORES if s.key in top and getattr(report.config, s.threshold)),
               default=0.0)


def _header(item: Scored | Trace, report: ModelReport) -> str:
    trace = item.trace if isinstance(item, Scored) else item
    label = trace.label or "unlabelled"
    bits = [f"<b class='{_e(label)}'>{_e(label)}</b> {_e(trace.id)}",
            f"{len(trace.text):,} characters"]
    if isinstance(item, Scored):
        for name, o in (("fires", report.current), ("proposal", report.after)):
            at, why = o.fired[trace.id]
            bits.append(f"{name}: " + ("no" if at is None else f"{_e(why)} at {at:,}"))
    if trace.onset is not None:
        bits.append(f"onset {trace.onset:,}")
    return " &middot; ".join(bits)


def _chart(item: Scored | Trace, report: ModelReport) -> str:
    trace = item.trace if isinstance(item, Scored) else item
    chars = max(1, len(trace.text))

    def x(at: float) -> float:
        return round(LEFT + PLOT_W * min(max(at, 0), chars) / chars, 2)

    def y(v: float) -> float:
        return round(TOP + PLOT_H * (1 - min(v, Y_MAX) / Y_MAX), 2)

    svg = [f"<svg class='chart' data-id='{_e(trace.id)}' data-chars='{chars}' "
           f"width='{WIDTH}' height='{HEIGHT}' viewBox='0 0 {WIDTH} {HEIGHT}' "
           "xmlns='http://www.w3.org/2000/svg'>",
           f"<rect class='plot' x='{LEFT}' y='{TOP}' width='{PLOT_W}' height='{PLOT_H}' "
           "fill='#fcfcfc' stroke='#ccc'/>"]
    svg += [f"<text x='{LEFT - 4}' y='{y(v) + 4}' font-size='10' text-anchor='end' "
            f"fill='#666'>{v:g}</text>" for v in (0.5, 1.0, 1.5)]
    svg.append(f"<line class='threshold' x1='{LEFT}' x2='{LEFT + PLOT_W}' y1='{y(1)}' "
               f"y2='{y(1)}' stroke='#999' stroke-width='1.5'/>")
    ticks = [chars * k / 5 for k in range(6)]
    svg += [f"<text x='{x(t)}' y='{HEIGHT - 6}' font-size='10' "
            f"text-anchor='{'start' if k == 0 else 'end' if k == 5 else 'middle'}' "
            f"fill='#666'>{round(t):,}</text>" for k, t in enumerate(ticks)]
    if isinstance(item, Scored) and item.end < chars:
        svg.append(f"<rect class='answer' x='{x(item.end)}' y='{TOP}' "
                   f"width='{round(x(chars) - x(item.end), 2)}' height='{PLOT_H}' "
                   "fill='#eef3ff'><title>the answer (after the reasoning)</title></rect>")
    if isinstance(item, Scored):
        for s in SCORES:
            threshold = getattr(report.config, s.threshold)
            if s.key not in item.scores.values or not threshold:
                continue
            colour = COLOURS[s.key]
            if s.key in report.maxima:
                hy = y(report.maxima[s.key] / threshold)
                svg.append(f"<line class='healthy-max' data-score='{s.key}' x1='{LEFT}' "
                           f"x2='{LEFT + PLOT_W}' y1='{hy}' y2='{hy}' stroke='{colour}' "
                           "stroke-dasharray='5 4' stroke-width='1'/>")
            points = _thin(item.scores.ends, item.scores.values[s.key])
            path = " ".join(f"{x(item.start + e)},{y(v / threshold)}" for e, v in points)
            if path:
                svg.append(f"<polyline class='score' data-score='{s.key}' points='{path}' "
                           f"fill='none' stroke='{colour}' stroke-width='1.6'/>")
        markers = [("fired", report.current, "#d00", "")]
        markers.append(("fired-proposed", report.after, "#f80", "6 3"))
        seen: int | None = None
        for cls, o, colour, dash in markers:
            at, why = o.fired[trace.id]
            if at is None or at == seen:
                continue
            seen = at
            svg.append(f"<line class='{cls}' data-at='{at}' x1='{x(at)}' x2='{x(at)}' "
                       f"y1='{TOP}' y2='{TOP + PLOT_H}' stroke='{colour}' stroke-width='2' "
                       f"stroke-dasharray='{dash}'><title>{_e(why)} at {at:,}</title></line>")
    if trace.onset is not None:
        svg.append(f"<line class='onset' data-at='{trace.onset}' x1='{x(trace.onset)}' "
                   f"x2='{x(trace.onset)}' y1='{TOP}' y2='{TOP + PLOT_H}' stroke='#0a0' "
                   "stroke-width='2' stroke-dasharray='3 3'/>")
    svg.append("</svg>")
    return f"<div class='trace'>{_header(item, report)}</div>" + "".join(svg)


def _thin(ends: list[int], values: list[float]) -> list[tuple[int, float]]:
    """At most ``MAX_POINTS`` points, keeping each stretch's highest value (peaks show)."""
    n = len(ends)
    if n <= MAX_POINTS:
        return list(zip(ends, values, strict=True))
    step = n / MAX_POINTS
    out = []
    for k in range(MAX_POINTS):
        lo, hi = int(k * step), max(int((k + 1) * step), int(k * step) + 1)
        i = max(range(lo, min(hi, n)), key=values.__getitem__)
        out.append((ends[i], values[i]))
    return out
