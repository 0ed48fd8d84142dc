"""A pseudo-tokenizer and the Qwen3-style chat template of the simulated node.

Pure functions. Text is cut into plausible tokens: words with their leading space,
single punctuation marks, single digits, single CJK/Hangul/kana characters (a leading
space stays with the character), runs of newlines, and the special tokens of the template.
On the captures' prompt (``<|im_start|>user\\nHello<|im_end|>\\n<|im_start|>assistant\\n``)
it gives the same 9 tokens as the tiny Qwen model behind them, so usage figures match.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping, Sequence

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
EOS = "<|im_end|>"
SPECIAL_TOKENS = ("<|im_start|>", EOS, "<|endoftext|>", THINK_OPEN, THINK_CLOSE)
VOCAB_SIZE = 151_936

_CJK = (
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
)
_TOKEN_RE = re.compile(
    r"<\|[a-z_]+\|>|</?think>"  # special tokens
    rf"| ?[{_CJK}]"  # one CJK / Hangul / kana character
    rf"| ?[^\W\d_{_CJK}]+"  # a word (letters) with its leading space
    r"| ?\d"  # one digit, as Qwen tokenizers do
    r"| ?[^\w\s]"  # one punctuation mark or symbol
    r"|\n+"  # a run of newlines
    rf"|[ \t]+(?![^\W\d_]|\d|[^\w\s]|[{_CJK}])"  # spaces, leaving one to lead the next token
    r"|[\s\S]",  # anything else, one character at a time
)


def tokenize(text: str) -> list[str]:
    """Split ``text`` into token strings; joining them gives ``text`` back exactly."""
    tokens = _TOKEN_RE.findall(text)
    if "".join(tokens) != text:  # never expected; keeps the round-trip promise anyway
        return list(text)
    return tokens


def token_id(token: str) -> int:
    """A stable pseudo token id for ``token`` (same string, same id, in every process)."""
    if token in SPECIAL_TOKENS:
        return 151_643 + SPECIAL_TOKENS.index(token)
    return zlib.crc32(token.encode("utf-8")) % 151_643


def message_text(content: object) -> str:
    """The text of a chat message ``content``: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = [
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type", "text") == "text"
        ]
        return "\n".join(parts)
    return ""


def render_chat(
    messages: Iterable[Mapping[str, object]],
    *,
    add_generation_prompt: bool,
    continue_final_message: bool,
    thinking: bool,
) -> str:
    """Render messages with the Qwen3-style template the simulated model uses.

    Thinking off pre-fills an empty think block after the generation prompt, as Qwen3's
    template does for ``enable_thinking=false``. With ``continue_final_message`` the last
    message is left open (no end-of-turn token) so the model continues it.
    """
    msgs = list(messages)
    out: list[str] = []
    for i, msg in enumerate(msgs):
        role = str(msg.get("role", "user"))
        text = message_text(msg.get("content"))
        last = i == len(msgs) - 1
        if last and continue_final_message:
            out.append(f"<|im_start|>{role}\n{text}")
        else:
            out.append(f"<|im_start|>{role}\n{text}{EOS}\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
        if not thinking:
            out.append(f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n")
    return "".join(out)


def think_state_of_prompt(prompt: str) -> str:
    """Where a raw prompt leaves the model: ``"open"`` inside ``<think>``, ``"closed"``
    after a ``</think>`` that closes the newest think block, otherwise ``"none"``."""
    opened = prompt.rfind(THINK_OPEN)
    closed = prompt.rfind(THINK_CLOSE)
    if closed > opened:
        return "closed"
    if opened >= 0:
        return "open"
    return "none"
