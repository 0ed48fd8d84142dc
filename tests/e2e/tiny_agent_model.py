"""Tiny scripted models that always call the same tool with the same arguments (issue 39).

Contract
--------
``python tests/e2e/tiny_agent_model.py OUT_DIR --agent claude|codex|qwen`` writes a Hugging
Face model directory that vLLM serves with ``--reasoning-parser qwen3 --enable-auto-tool-choice
--tool-call-parser hermes``. Whatever the conversation, its greedy output is an empty think
block and one hermes-style tool call, then the end of the turn::

    <think></think><tool_call>
    {"name": NAME, "arguments": ARGUMENTS}
    </tool_call>

so an agent runs the call, sends the result back and gets the same call again, turn after
turn: the agent loop of issue 39, seen from the agent's side. NAME and ARGUMENTS are the
agent's own read-only tool (``CALLS``): the three agents offer different tools. The model
cannot take advice (a nudge changes nothing here). Importing this module needs no torch;
building needs the vLLM venv (torch, transformers, tokenizers), like ``tiny_model.py``,
whose bigram construction it reuses.

How: as in ``tiny_model.py``, a network with all-zero layers is a bigram table over the
last prompt token. A rendered prompt always ends in ``assistant\\n`` (thinking on) or in the
``\\n\\n`` of a pre-filled empty think block (thinking off), so the chains are
``\\n -> <think> -> </think> -> CALL -> <|im_end|>`` and ``\\n\\n -> CALL``, where the
whole tool-call text is one added token: its JSON repeats punctuation tokens that a bigram
chain could not follow.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

#: The call each agent's model makes: a read-only look at the e2e work directory's
#: ``parse_rows.py``, with each agent's own tool. Claude Code runs with ``--tools Bash`` and
#: ``--allowedTools 'Bash(grep:*)'``; Codex CLI's shell tool is ``exec_command``; Qwen Code's
#: headless mode offers no shell without ``--yolo``, so its model uses ``grep_search``.
CALLS: dict[str, dict[str, Any]] = {
    "claude": {"name": "Bash", "arguments": {"command": "grep -n rows parse_rows.py",
                                             "description": "Find rows in parse_rows.py"}},
    "codex": {"name": "exec_command", "arguments": {"cmd": "grep -n rows parse_rows.py"}},
    "qwen": {"name": "grep_search", "arguments": {"pattern": "rows"}},
}
AGENTS = tuple(CALLS)
THINK_OPEN, THINK_CLOSE, EOS = "<think>", "</think>", "<|im_end|>"
MAX_POSITIONS = 262144


def tool_call_text(agent: str) -> str:
    """The hermes-style tool call the model of ``agent`` emits after its think block."""
    return "<tool_call>\n" + json.dumps(CALLS[agent]) + "\n</tool_call>"


def fixture_hash() -> str:
    """Hash of this file and of ``tiny_model.py``: model directories built from the same
    sources are interchangeable."""
    here = pathlib.Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in ("tiny_agent_model.py", "tiny_model.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:16]


def _build_tokenizer(out: pathlib.Path, agent: str) -> Any:
    from tiny_model import CHAT_TEMPLATE, SPECIAL_TOKENS
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = ["system\n", "user\n", "assistant\n", "tool\n", "\n\n", "\n", "Hello\n"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=1,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(words * 4, trainer=trainer)
    added = (THINK_OPEN, THINK_CLOSE, tool_call_text(agent))
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS,
                                 pad_token=SPECIAL_TOKENS[0], chat_template=CHAT_TEMPLATE)
    hf.save_pretrained(out)
    return hf


def _verify(hf: Any, model: Any, want: list[int]) -> None:
    """Greedy output on a first turn and on a turn after a tool result, thinking on and
    off, through transformers (teacher-forced, as ``tiny_model._greedy_check``)."""
    from tiny_model import _greedy_check

    user = [{"role": "user", "content": "Fix the IndexError in parse_rows()."}]
    later = [*user, {"role": "assistant", "content": ""},
             {"role": "tool", "content": "3:    return [dict(zip(header, row))]"}]
    for messages in (user, later):
        for thinking in (True, False):
            text = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                          enable_thinking=thinking)
            seq = want if thinking else want[2:]
            got = _greedy_check(model, list(hf.encode(text, add_special_tokens=False)), seq)
            if got != seq:
                raise AssertionError(f"greedy output differs: {hf.decode(got)!r}")


def build(out: pathlib.Path, agent: str, *, verify: bool = True) -> dict[str, Any]:
    """Write the model of ``agent`` into ``out``; return its script (also script.json)."""
    from tiny_model import LAYERS, _build_weights

    out.mkdir(parents=True, exist_ok=True)
    hf = _build_tokenizer(out, agent)

    def tid(token: str) -> int:
        return int(hf.convert_tokens_to_ids(token))

    nl = hf.encode("\n", add_special_tokens=False)
    nlnl = hf.encode("\n\n", add_special_tokens=False)
    call = hf.encode(tool_call_text(agent), add_special_tokens=False)
    assert len(nl) == len(nlnl) == len(call) == 1, (nl, nlnl, call)
    chain = [nl[0], tid(THINK_OPEN), tid(THINK_CLOSE), call[0], tid(EOS)]
    nxt = dict(itertools.pairwise(chain)) | {nlnl[0]: call[0]}
    model = _build_weights(out, hf, nxt, LAYERS)
    # A looping agent's history outgrows tiny_model's 32768 positions within minutes (vLLM's
    # CPU worker crashed at 32,936): the layers compute nothing, so any length is as good.
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["max_position_embeddings"] = MAX_POSITIONS
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if verify:
        _verify(hf, model, chain[1:])
    info = {"kind": f"agent-{agent}", "agent": agent, "tool_call": CALLS[agent],
            "output": THINK_OPEN + THINK_CLOSE + tool_call_text(agent),
            "fixture_sha256": fixture_hash(), "vocab_size": len(hf)}
    (out / "script.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--agent", choices=AGENTS, required=True)
    parser.add_argument("--no-verify", action="store_true", help="skip the transformers check")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    info = build(args.out_dir, args.agent, verify=not args.no_verify)
    print(f"{info['kind']}: vocab {info['vocab_size']} -> {args.out_dir}")


if __name__ == "__main__":
    main()
