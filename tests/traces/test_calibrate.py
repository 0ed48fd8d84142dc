"""Calibration on labelled traces: the figures it reports per model, and a proposal that
never makes a labelled healthy trace fire, however the healthy traces look."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from detectors import DetectorConfig
from detectors.replay import replay_record
from detectors.scores import SCORES
from sidecar.config import Config, ModelOverride, load_config
from sidecar.service.calibrate import run_calibrate, settings_of
from sidecar.traces.calibrate import ModelReport, calibrate, regex_literal, toml_entry
from sidecar.traces.store import load

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
MODEL = "glm-z1-32b"


def shared(name: str, count: int, model: str = MODEL) -> list[dict[str, Any]]:
    """The first ``count`` records of a shared traces file, as if ``model`` wrote them."""
    lines = (TRACES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()[:count]
    return [{**json.loads(line), "model": model} for line in lines]


def write(directory: Path, records: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "traces-test.jsonl").open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return directory


def hard_healthy() -> list[dict[str, Any]]:
    """Healthy traces the default chain fires on: reasoning that keeps coming back to its
    sentences (recurrence's copied shingles and ``sentences``; the chain no longer fires on
    candidate schedules written as prose, GLM-Z1's false alarm) and a run of words with no
    punctuation (degeneration, a rule with no calibrated threshold)."""
    salad = " ".join(f"word{i % 97}" for i in range(700))
    return [
        {"id": "redrafts", "model": MODEL, "label": "healthy",
         "text": "<think>" + ruminating(1, 0.8) + "</think>The answer is 17 minutes."},
        {"id": "salad", "model": MODEL, "label": "healthy",
         "text": "<think>Let me list them.\n" + salad + "\nDone.</think>ok"},
    ]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[ModelReport], Path]:
    short_loops = [r for r in shared("loops", 43) if len(r["text"]) < 20_000]
    records = (shared("healthy", 32) + hard_healthy() + short_loops
               + shared("ambiguous", 3))
    directory = write(tmp_path_factory.mktemp("cal"), records)
    traces = load(directory)
    return calibrate(traces, lambda m: (DetectorConfig(), None)), directory


def test_the_figures_in_force(reports: tuple[list[ModelReport], Path]) -> None:
    """Per model: loops caught and false alarms as ``replay`` counts them, the healthy
    maxima of each score, and each threshold's margin over them."""
    (report,), _ = reports
    assert report.model == MODEL
    assert (report.current.loops, report.current.healthy, len(report.ambiguous)) == (5, 34, 3)
    caught = sum(replay_record(s.trace.record, DetectorConfig()).detected
                 for s in report.items if s.label == "loop")
    assert report.current.caught == caught
    assert report.current.false_alarms == 2  # the two hard healthy traces
    margins = report.margins()
    for s in SCORES:
        top = max(x.scores.maxima()[s.key] for x in report.items if x.label == "healthy")
        assert margins[s.key]["healthy_max"] == pytest.approx(top)
        if top:
            assert margins[s.key]["margin"] == round(getattr(DetectorConfig(), s.threshold)
                                                     / top, 2)
    assert margins["thinking_token_budget"]["value"] is None


def test_the_proposal_never_fires_on_a_labelled_healthy_trace(
        reports: tuple[list[ModelReport], Path], tmp_path: Path) -> None:
    """The proposed ``[[models]]`` entry, loaded through the config loader, makes no
    healthy trace fire in a replay (budget included), the hard ones too; a detector that
    fires by a rule with no calibrated threshold is switched off, with a note."""
    (report,), _ = reports
    assert report.after.false_alarms == 0
    entry = toml_entry(report, 1.5)
    path = tmp_path / "proposed.toml"
    path.write_text(entry, encoding="utf-8")
    config = load_config(path, env={})
    detectors, budget = settings_of(config, MODEL)
    assert budget is not None
    assert detectors.degeneration_enabled is False
    assert any("degeneration_enabled = false" in n for n in report.notes)
    proposed = dataclasses.replace(detectors, thinking_token_budget=budget)
    for s in report.items:
        if s.label == "healthy":
            assert not replay_record(s.trace.record, proposed).detected, s.trace.id
            assert s.tokens < budget
    assert report.proposed["recurrence_evidence"] > DetectorConfig().recurrence_evidence


def test_the_proposal_keeps_its_margin(reports: tuple[list[ModelReport], Path]) -> None:
    """Each proposed threshold is at least the margin over the healthy maximum (a count
    at least one more), and the budget is 1.5 times the most thinking tokens."""
    (report,), _ = reports
    for key, m in report.margins(proposal=True).items():
        if m["healthy_max"] and m["value"] is not None:
            if key == "recurrence.window" and m["value"] >= 1.0:
                assert m["value"] > m["healthy_max"]  # a share: 1.0, or above 1 (off)
                continue
            assert m["value"] >= m["healthy_max"] * 1.5 - 1e-9 or (
                isinstance(m["value"], int) and m["value"] > m["healthy_max"]), key
    assert report.proposed_budget is not None
    assert report.proposed_budget >= report.longest_tokens * 1.5


def test_few_healthy_traces_only_raise(tmp_path: Path) -> None:
    """With fewer healthy traces than ``min_healthy`` nothing is lowered and no budget is
    set where there was none, but a threshold a healthy trace comes close to is raised."""
    directory = write(tmp_path, shared("healthy", 5) + hard_healthy()[:1])
    (report,) = calibrate(load(directory), lambda m: (DetectorConfig(), None))
    assert report.proposed_budget is None
    defaults = DetectorConfig()
    for key, value in report.proposed.items():
        assert value > getattr(defaults, key) or value is False, key
    assert "recurrence_evidence" in report.proposed
    assert report.after.false_alarms == 0


def test_settings_in_force_come_from_the_config() -> None:
    """A model's ``[[models]]`` thresholds and budget are the settings it is scored with."""
    config = Config(models=(ModelOverride(match="glm", thinking_token_budget=9000,
                                          detectors={"recurrence_evidence": 3.0}),))
    detectors, budget = settings_of(config, MODEL)
    assert (detectors.recurrence_evidence, budget) == (3.0, 9000)
    assert settings_of(config, "qwen3") == (config.detectors, None)


def test_model_names_become_literal_patterns() -> None:
    """The proposal's ``match`` finds exactly the model's name."""
    import re

    name = "Qwen/QwQ-32B (OpenRouter qwen/qwq-32b) v1.0+x"
    assert re.fullmatch(regex_literal(name), name)
    assert not re.fullmatch(regex_literal(name), name.replace(".", "0"))


def test_the_command_prints_json_and_fails_cleanly(reports: tuple[list[ModelReport], Path],
                                                   tmp_path: Path) -> None:
    """``--json`` gives one object per model and per trace; a directory with no labelled
    trace, or a bad line, exits 2 with one line naming it."""
    _, directory = reports
    out, err = io.StringIO(), io.StringIO()
    code = run_calibrate(directory, Config(), json_out=True, html=None, margin=1.5,
                         min_healthy=30, limit=10, out=out, err=err)
    assert code == 0
    data = json.loads(out.getvalue())
    (model,) = data["models"]
    assert model["model"] == MODEL
    assert model["proposed"]["false_alarms"] == 0
    assert model["toml"].startswith("[[models]]")
    assert len(data["traces"]) == 39
    empty = write(tmp_path / "empty", [{"text": "<think>x</think>"}])
    assert run_calibrate(empty, Config(), json_out=True, html=None, margin=1.5,
                         min_healthy=30, limit=10, out=io.StringIO(), err=err) == 2
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.jsonl").write_text("{oops\n")
    err = io.StringIO()
    assert run_calibrate(tmp_path / "bad", Config(), json_out=False, html=None, margin=1.5,
                         min_healthy=30, limit=10, out=io.StringIO(), err=err) == 2
    assert "x.jsonl:1" in err.getvalue()


def ruminating(seed: int, share: float, chars: int = 16_000) -> str:
    """Reasoning of sentences made of random words (none with a figure), where about
    ``share`` of them are one of the last 60 written, again: the shape ``sentences``
    measures, at the strength the test asks."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))
             for _ in range(300)]
    out: list[str] = []
    said: list[str] = []
    written = 0
    while written < chars:
        if said and rng.random() < share:
            sentence = rng.choice(said[-60:])
        else:
            sentence = "So the " + " ".join(rng.choice(words)
                                            for _ in range(rng.randint(6, 10))) + "."
            said.append(sentence)
        out.append(sentence)
        written += len(sentence) + 1
    return " ".join(out)


SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "po", "la", "ge", "fu",
             "ri", "zo", "be")


def test_the_sentences_threshold_is_fitted_per_model(tmp_path: Path) -> None:
    """``sentences_repeat_chars`` is fitted like the other thresholds, model by model: a
    model whose healthy reasoning comes back to its sentences (the default fires on it)
    gets it raised over its healthy maximum, and one that rarely does gets it lowered,
    never below half; each proposal, loaded as ``[[models]]``, fires on no healthy trace
    of its model and still catches its loops."""
    records: list[dict[str, Any]] = []
    for model, healthy_share, loop_share in (("ruminant", 0.3, 0.8), ("terse", 0.06, 0.25)):
        records += [{"id": f"{model}-h{seed}", "model": model, "label": "healthy",
                     "text": f"<think>{ruminating(seed, healthy_share)}</think>ok"}
                    for seed in range(6)]
        records += [{"id": f"{model}-l{seed}", "model": model, "label": "loop",
                     "text": f"<think>{ruminating(100 + seed, loop_share)}"}
                    for seed in range(4)]
    directory = write(tmp_path, records)
    reports = {r.model: r for r in calibrate(load(directory),
                                             lambda m: (DetectorConfig(), None),
                                             min_healthy=6)}
    default = DetectorConfig().sentences_repeat_chars
    ruminant, terse = reports["ruminant"], reports["terse"]
    assert ruminant.current.false_alarms == 6  # the default fires on every healthy one
    assert ruminant.maxima["sentences.repeated"] >= default
    raised = ruminant.proposed["sentences_repeat_chars"]
    assert raised >= 1.5 * ruminant.maxima["sentences.repeated"]
    lowered = terse.proposed["sentences_repeat_chars"]
    assert default / 2 <= lowered < default
    assert lowered >= 1.5 * terse.maxima["sentences.repeated"]
    for report, value in ((ruminant, raised), (terse, lowered)):
        margin = report.margins(proposal=True)["sentences.repeated"]
        assert margin["value"] == value
        assert margin["margin"] >= 1.5
        assert (report.after.false_alarms, report.after.caught) == (0, 4), report.model
        path = tmp_path / f"{report.model}.toml"
        path.write_text(toml_entry(report, 1.5), encoding="utf-8")
        detectors, _ = settings_of(load_config(path, env={}), report.model)
        assert detectors.sentences_repeat_chars == value
        for s in report.items:
            fired = replay_record(s.trace.record, detectors)
            assert fired.detected == (s.label == "loop"), s.trace.id
    # The lowered threshold cuts the terse model's loops earlier (its weak loops: late).
    loops = [s.trace.id for s in terse.items if s.label == "loop"]
    before = [terse.current.fired[i][0] for i in loops]
    after = [terse.after.fired[i][0] for i in loops]
    assert all(a is not None and b is not None and a <= b for a, b in zip(after, before,
                                                                         strict=True))
    assert sum(a or 0 for a in after) < sum(b or 0 for b in before)
