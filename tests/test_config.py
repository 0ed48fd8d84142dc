"""Config loading: TOML, environment, flags, precedence and one-line errors naming the key."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.config import Config, load_config, option_keys
from sidecar.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_defaults() -> None:
    """With nothing set the documented defaults apply."""
    cfg = load_config(None, env={})
    assert cfg == Config()
    assert cfg.mode == "enforce"
    assert cfg.metrics_listen == "127.0.0.1:9464"


def test_file_env_flag_precedence(tmp_path: Path) -> None:
    """Flag beats environment beats file beats default, for top-level and table keys."""
    path = write(tmp_path, 'mode = "shadow"\nlisten = "127.0.0.1:7000"\n'
                           "[detectors]\nstall_seconds = 5.0\n")
    env = {"RUNAWAY_SIDECAR_LISTEN": "127.0.0.1:7001",
           "RUNAWAY_SIDECAR_DETECTORS_STALL_SECONDS": "7"}
    cfg = load_config(path, env=env, overrides={"listen": "127.0.0.1:7002"})
    assert cfg.mode == "shadow"
    assert cfg.listen == "127.0.0.1:7002"
    assert cfg.detectors.stall_seconds == 7.0


def test_tables_of_rules(tmp_path: Path) -> None:
    """``[[models]]`` and ``[[reissue.rules]]`` load as typed entries."""
    path = write(tmp_path, '[[models]]\nmatch = "qwen"\nmode = "shadow"\n'
                           '[reissue]\nladder = ["no-think", "salvage"]\n'
                           '[[reissue.rules]]\nmatch = "x"\nset = {think = false}\n')
    cfg = load_config(path, env={})
    assert cfg.models[0].mode == "shadow"
    assert cfg.reissue.ladder == ("no-think", "salvage")
    assert cfg.reissue.rules[0].set == {"think": False}


def test_model_detector_thresholds(tmp_path: Path) -> None:
    """A ``[[models]]`` entry's ``detectors`` table loads typed (an integer given for a
    float threshold is a float) and holds only the keys it sets."""
    path = write(tmp_path, '[[models]]\nmatch = "qwen"\n'
                           "detectors = {recurrence_evidence = 3, restatement_copies = 9}\n"
                           '[[models]]\nmatch = "glm"\n')
    cfg = load_config(path, env={})
    assert cfg.models[0].detectors == {"recurrence_evidence": 3.0, "restatement_copies": 9}
    assert isinstance(cfg.models[0].detectors["recurrence_evidence"], float)
    assert cfg.models[1].detectors == {}


def test_record_table(tmp_path: Path) -> None:
    """``[record]`` is off by default and its keys load from the file and the
    environment."""
    assert Config().record.dir is None
    assert Config().record.exclude_prompt is True
    path = write(tmp_path, '[record]\ndir = "/var/lib/x"\nsamples_per_hour = 2\n')
    cfg = load_config(path, env={"RUNAWAY_SIDECAR_RECORD_EXCLUDE_PROMPT": "false"})
    assert (cfg.record.dir, cfg.record.samples_per_hour) == ("/var/lib/x", 2)
    assert cfg.record.exclude_prompt is False


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('mode = "loud"', "mode"),
        ("workers = \"two\"", "workers"),
        ("bogus = 1", "bogus"),
        ("[detectors]\nstall_seconds = \"soon\"", "detectors.stall_seconds"),
        ("[detectors]\nnope = 1", "detectors.nope"),
        ('listen = "nowhere"', "listen"),
        ('upstream = "ftp://x"', "upstream"),
        ('[reissue]\nladder = ["jump"]', "reissue.ladder"),
        ('[[models]]\nmatch = "("', "models[0].match"),
        ("[[models]]\nmode = \"off\"", "models[0].match"),
        ("upstream_keepalive_seconds = -1", "upstream_keepalive_seconds"),
        ("upstream_keepalive_seconds = nan", "upstream_keepalive_seconds"),
        ('[[models]]\nmatch = "q"\ndetectors = {nope = 1}', "models[0].detectors.nope"),
        ('[[models]]\nmatch = "q"\ndetectors = {restatement_copies = "x"}',
         "models[0].detectors.restatement_copies"),
        ('[[models]]\nmatch = "q"\ndetectors = {thinking_token_budget = 9}',
         "models[0].detectors.thinking_token_budget"),
        ('[[models]]\nmatch = "q"\ndetectors = {recurrence_history = 1000}',
         "models[0].detectors"),
        ('[record]\ndir = ""', "record.dir"),
        ("[record]\nsamples_per_hour = -1", "record.samples_per_hour"),
        ("[record]\nmax_reasoning_chars = 10", "record.max_reasoning_chars"),
        ("[record]\nfile_bytes = 100000", "record.file_bytes"),
        ("[record]\nmax_bytes = 2000000", "record.max_bytes"),
        ("[record]\nqueue = 0", "record.queue"),
        ('agent_loops = "loud"', "agent_loops"),
        ('[[models]]\nmatch = "x"\nagent_loops = "enforce"', "models[0].agent_loops"),
        ("[agent_loop_detector]\nrepeat_min = 1", "agent_loop_detector"),
        ("[agent_loop_detector]\nwindow = 5", "agent_loop_detector"),
        ("[agent_loop_detector]\ncycle_min = \"x\"", "agent_loop_detector.cycle_min"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    """Every bad value is a ConfigError whose message names the offending key."""
    with pytest.raises(ConfigError, match=re.escape(f"'{key}")):
        load_config(write(tmp_path, text), env={})


def test_agent_loops_settings(tmp_path: Path) -> None:
    """agent_loops globally (shadow by default), per model, by environment and flag; the
    thresholds as a table; a bad threshold's message says what is wrong."""
    assert Config().agent_loops == "shadow"
    path = write(tmp_path, 'agent_loops = "nudge"\n'
                           '[agent_loop_detector]\nrepeat_min = 4\n'
                           '[[models]]\nmatch = "coder"\nagent_loops = "refuse"\n')
    cfg = load_config(path, env={"RUNAWAY_SIDECAR_AGENT_LOOP_DETECTOR_CYCLE_MIN": "5"})
    assert cfg.agent_loops == "nudge"
    assert (cfg.agent_loop_detector.repeat_min, cfg.agent_loop_detector.cycle_min) == (4, 5)
    assert cfg.models[0].agent_loops == "refuse"
    flagged = load_config(None, env={"RUNAWAY_SIDECAR_AGENT_LOOPS": "off"},
                          overrides={"agent_loop_detector.window": "80"})
    assert flagged.agent_loops == "off"
    assert flagged.agent_loop_detector.window == 80
    with pytest.raises(ConfigError, match="thresholds must be at least 2"):
        load_config(write(tmp_path, "[agent_loop_detector]\ntext_min = 0"), env={})


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    """Unreadable or invalid files are ConfigErrors too."""
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "mode = "), env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.toml", env={})


def test_every_option_has_a_flag() -> None:
    """Each scalar option is exposed as a flag in ``serve --help``."""
    out = subprocess.run([sys.executable, "-m", "sidecar", "serve", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for key, _ in option_keys():
        assert "--" + key.replace("_", "-") in out


def test_cli_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    """``serve`` with a bad config prints one line naming the key and exits 2."""
    path = write(tmp_path, 'mode = "loud"\n')
    proc = subprocess.run([sys.executable, "-m", "sidecar", "serve", "--config", str(path)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "'mode'" in lines[0]
