"""``runaway-sidecar calibrate DIR`` and ``runaway-sidecar traces label DIR``.

``calibrate`` reads the traces of DIR and their labels (``sidecar.traces.store``), runs
the calibration with the settings of ``--config`` (its ``[detectors]`` and each model's
``[[models]]`` entry; defaults without one) and prints, per model, what those settings
and the proposal do, each threshold's margin, and the proposed ``[[models]]`` entries;
``--json`` prints one object instead, ``--html FILE`` also writes the page
(``sidecar.traces.report``). Exit codes: 0 on success, 2 for a directory that cannot be
read, a bad record or labels line, or no labelled trace.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from detectors import DetectorConfig
from sidecar.config import Config, model_override
from sidecar.traces.calibrate import ModelReport, Outcome, calibrate, number, toml_entry
from sidecar.traces.report import page
from sidecar.traces.store import load

EXIT_OK = 0
EXIT_USAGE = 2


def settings_of(config: Config, model: str) -> tuple[DetectorConfig, int | None]:
    """The detector settings and thinking-token budget ``config`` gives ``model``'s
    requests (as ``sidecar.core.plan`` does, without per-request controls)."""
    detectors = config.detectors
    entry = model_override(config, model)
    if entry is not None and entry.detectors:
        detectors = dataclasses.replace(detectors, **entry.detectors)
    budget = detectors.thinking_token_budget
    if entry is not None and entry.thinking_token_budget is not None:
        budget = entry.thinking_token_budget
    return detectors, budget


def _outcome(o: Outcome) -> dict[str, Any]:
    return {"recall": o.recall, "loops_caught": o.caught, "loops": o.loops,
            "false_alarms": o.false_alarms, "healthy": o.healthy,
            "median_delay_chars": o.median_delay_chars, "delays_measured": o.onsets}


def as_json(reports: list[ModelReport], margin: float, min_healthy: int) -> dict[str, Any]:
    """The ``--json`` object."""
    models, traces = [], []
    for r in reports:
        models.append({
            "model": r.model, "loops": r.current.loops, "healthy": r.healthy,
            "ambiguous": len(r.ambiguous), "current": _outcome(r.current),
            "proposed": _outcome(r.after), "margins": r.margins(),
            "proposed_margins": r.margins(proposal=True),
            "proposal": {"detectors": r.proposed, "thinking_token_budget": r.proposed_budget},
            "notes": r.notes, "toml": toml_entry(r, margin)})
        traces += [{
            "id": s.trace.id, "model": r.model, "label": s.label, "chars": len(s.trace.text),
            "onset": s.trace.onset, "fired": r.current.fired[s.trace.id][0],
            "detector": r.current.fired[s.trace.id][1],
            "fired_proposed": r.after.fired[s.trace.id][0],
            "detector_proposed": r.after.fired[s.trace.id][1]} for s in r.items]
    return {"margin": margin, "min_healthy": min_healthy, "models": models, "traces": traces}


def _human(reports: list[ModelReport], margin: float, out: TextIO) -> None:
    for r in reports:
        out.write(f"\n== {r.model}: {r.current.loops} loops, {r.healthy} healthy, "
                  f"{len(r.ambiguous)} ambiguous (not scored)\n")
        out.write(f"  {'':<20} {'loops caught':>12} {'false alarms':>13} "
                  "median delay after onset\n")
        for name, o in (("settings in force", r.current), ("proposal", r.after)):
            delay = ("-" if o.median_delay_chars is None
                     else f"{number(o.median_delay_chars)} ({o.onsets} with an onset)")
            out.write(f"  {name:<20} {o.caught:>5}/{o.loops:<6} {o.false_alarms:>6}/"
                      f"{o.healthy:<6} {delay}\n")
        if r.healthy:
            out.write(f"  {'threshold':<24} {'healthy max':>12} {'in force':>10} "
                      f"{'margin':>7} {'proposed':>10} {'margin':>7}\n")
            then = r.margins(proposal=True)
            for key, m in r.margins().items():
                p = then[key]
                out.write(f"  {key:<24} {number(m['healthy_max']):>12} "
                          f"{number(m['value']):>10} {_x(m['margin']):>7} "
                          f"{number(p['value']):>10} {_x(p['margin']):>7}\n")
        for note in r.notes:
            out.write(f"  note: {note}\n")
    proposals = [toml_entry(r, margin) for r in reports if r.healthy]
    if proposals:
        out.write("\n# Proposed [[models]] entries (deploy/examples/gpu0.toml, [[models]]):\n\n"
                  + "\n".join(proposals))


def _x(value: float | None) -> str:
    return "-" if value is None else f"x{value:g}"


def run_calibrate(directory: Path, config: Config, *, json_out: bool, html: Path | None,
                  margin: float, min_healthy: int, limit: int, out: TextIO,
                  err: TextIO | None = None) -> int:
    """Calibrate on ``directory`` (see the module docstring); returns the exit code."""
    err = sys.stderr if err is None else err
    try:
        traces = load(directory)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        err.write(f"calibrate: {exc}\n")
        return EXIT_USAGE
    if not any(t.label in ("loop", "healthy") for t in traces):
        err.write(f"calibrate: no trace in {directory} is labelled loop or healthy "
                  "(runaway-sidecar traces label DIR)\n")
        return EXIT_USAGE
    reports = calibrate(traces, lambda model: settings_of(config, model), margin=margin,
                        min_healthy=min_healthy)
    if html is not None:
        html.write_text(page(reports, margin=margin, limit=limit), encoding="utf-8")
    if json_out:
        json.dump(as_json(reports, margin, min_healthy), out)
        out.write("\n")
    else:
        _human(reports, margin, out)
        if html is not None:
            out.write(f"\nreport: {html}\n")
    return EXIT_OK
