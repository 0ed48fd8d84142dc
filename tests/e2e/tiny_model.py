"""Tiny Qwen3-architecture models with scripted greedy output, for the real-vLLM e2e suite.

Contract
--------
``python tests/e2e/tiny_model.py OUT_DIR --kind loop|leaky|healthy|korean`` writes a Hugging Face
model directory (config, safetensors weights, tokenizer, chat template, generation config and a
``script.json`` describing what the model will say) that vLLM serves with
``--reasoning-parser qwen3``. Run it with the vLLM venv's python: it needs torch, transformers and
tokenizers. Importing this module needs none of them, so the e2e tests (which run in the project
venv) read the scripted texts from here.

What the greedy decoder emits, by the last token of the prompt:

==========================  ===============================================================
prompt ends with             output
==========================  ===============================================================
``assistant\\n`` (thinking   ``<think>`` then, per kind: ``loop``/``leaky``: the English loop
on)                          sentence forever; ``korean``: the Korean loop sentence forever;
                             ``healthy``: HEALTHY_THOUGHT, ``</think>``, ``\\n\\n``, the answer,
                             end of turn.
``\\n\\n`` (thinking off:     the answer, then end of turn; ``leaky``: the answer, then the
template pre-fills           English loop sentence forever, in ``content``.
``<think>\\n\\n</think>\\n\\n``)
``</think>``                 ``\\n\\n``, then as above. This is the salvage path: a final
                             assistant message ``<think>\\n...\\n</think>\\n\\n`` sent with
                             ``continue_final_message`` renders (after transformers trims the
                             trailing whitespace) to a prompt ending in ``</think>``.
anything else                end of turn at once.
==========================  ===============================================================

Pacing: the network has LAYERS decoder layers that compute nothing (all-zero weights). They
only cost time: with one layer vLLM's CPU build emits ~600 tokens/s on a 2-core machine, faster
than its own API server, the sidecar and the test client can consume them on the remaining core,
so every cut would land hundreds of tokens late. Eight layers give ~250 tokens/s, closer to
a GPU stream (the field report saw 65).

How: the network is a bigram table. Every transformer sub-layer has all-zero weights, so the
residual stream at the last position is just the embedding of the last token. Each token that
has a scripted successor gets its own one-hot embedding direction (scaled so RMSNorm leaves it
unchanged); every other token shares one extra direction. The LM head maps direction ``i`` to
a logit of LOGIT on the successor of token ``i`` and 0 elsewhere, so the argmax is exact and even
temperature-1 sampling picks the scripted token with probability ~1 - V*exp(-LOGIT). A bigram can
only follow a chain if every token on it has one successor, which is why the scripts are built
from words that never repeat (or repeat only with the same follower, as in a loop).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import pathlib
from collections.abc import Sequence
from typing import Any

KINDS = ("loop", "leaky", "healthy", "korean")

ANSWER_EN = "Fix: guard against an empty list before indexing!"
ANSWER_KO = "Fix: 인덱싱 전에 빈 목록인지 먼저 확인하세요!"
LOOP_EN = (
    " Wait, maybe my earlier analysis of this crash was wrong so I should re-read"
    " the stack trace from its first frame again."
)
LOOP_KO = " 잠시만, 내가 앞서 분석한 원인이 틀렸을지도 모르니 로그를 처음부터 다시 읽어 보자."

# Syllables for the healthy thought: 14 consonants x 5 vowels, two or three per word, so a few
# hundred words can be drawn without any word (and so any token) occurring twice.
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
HEALTHY_WORDS = 300

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EOS = "<|im_end|>"
LOGIT = 50.0
LAYERS = 8

# Qwen3-style ChatML template. It honours enable_thinking (false pre-fills an empty think block,
# as Qwen3 does) and, like Qwen3, re-renders an assistant message that carries </think> as
# "<think>\n{reasoning}\n</think>\n\n{content}", which is what the salvage step relies on.
# An assistant message with its reasoning in a field of its own (vLLM passes an Anthropic
# thinking block or a Responses reasoning item of the history as ``reasoning``, and as
# ``reasoning_content``) is rendered the same way, as Qwen3 does for the turns of the current
# tool loop (this template does it for every turn): the history-cleaning tests read the
# prompt's size. The template reads ``reasoning``: with ``reasoning_content`` named in it,
# llama.cpp's answers lost the "\n\n" they start with (all its e2e suite's answer checks
# failed), so llama.cpp handles such a template differently.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- set content = message['content'] if message['content'] is string else '' -%}"
    "{%- if message['role'] == 'assistant' and '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') -%}"
    "{%- set answer = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + answer"
    " + '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'assistant' and message['reasoning'] is string -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + message['reasoning'].strip('\\n')"
    " + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def healthy_thought() -> str:
    """The healthy model's reasoning: "Okay" and HEALTHY_WORDS distinct pseudo-words."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    n = len(syllables)
    words: list[str] = []
    # Stride through the 2-syllable space with a step coprime to n*n, then 3-syllable words if
    # more are needed; distinctness is asserted, the order only has to look unpatterned.
    step = 37
    for k in range(HEALTHY_WORDS):
        i = (k * step) % (n * n)
        word = syllables[i // n] + syllables[i % n]
        if k % 7 == 3:
            word += syllables[(k * 11) % n]
        words.append(word)
    assert len(set(words)) == len(words), "healthy words must be distinct"
    return "Okay " + " ".join(words)


HEALTHY_THOUGHT = healthy_thought()


def script(kind: str) -> dict[str, Any]:
    """What the model of `kind` says: the texts the e2e tests compare against."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}, expected one of {KINDS}")
    answer = ANSWER_KO if kind == "korean" else ANSWER_EN
    loop = {"loop": LOOP_EN, "leaky": LOOP_EN, "korean": LOOP_KO, "healthy": None}[kind]
    return {
        "kind": kind,
        "answer": answer,
        "thinking_loop": loop,
        "content_loop": LOOP_EN if kind == "leaky" else None,
        "healthy_thought": HEALTHY_THOUGHT if kind == "healthy" else None,
    }


def fixture_hash() -> str:
    """Hash of this file: model directories built from the same source are interchangeable."""
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Everything below needs torch/transformers/tokenizers (the vLLM venv), imported lazily.


def _build_tokenizer(out: pathlib.Path) -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [ANSWER_EN, ANSWER_KO, LOOP_EN, LOOP_KO, HEALTHY_THOUGHT]
    template_words = ["system\n", "user\n", "assistant\n", "\n\n", "\n", "Hello\n"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # A vocabulary budget far above what the corpus can fill, so training stops only when every
    # pre-token is one token: each scripted word then is one token with one successor.
    trainer = trainers.BpeTrainer(
        vocab_size=20000,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((texts + template_words) * 4, trainer=trainer)
    # Like the real Qwen3 tokenizer: the think markers are added tokens but not special ones, so
    # they survive detokenization and the reasoning parser sees them as text and as token ids.
    markers = (THINK_OPEN, THINK_CLOSE)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in markers])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=SPECIAL_TOKENS[0],
        chat_template=CHAT_TEMPLATE,
    )
    hf.save_pretrained(out)
    return hf


def _chains(kind: str, hf: Any) -> tuple[dict[int, int], dict[str, list[int]]]:
    """Successor table for `kind`, and the token sequences the verifier expects."""

    def ids(text: str) -> list[int]:
        return list(hf.encode(text, add_special_tokens=False))

    def tid(token: str) -> int:
        return int(hf.convert_tokens_to_ids(token))

    nl, nlnl = ids("\n"), ids("\n\n")
    assert len(nl) == 1, ("newline must be one token", nl)
    assert len(nlnl) == 1, ("double newline must be one token", nlnl)
    think, close, eos = tid(THINK_OPEN), tid(THINK_CLOSE), tid(EOS)
    s = script(kind)
    answer = ids(s["answer"])
    nxt: dict[int, int] = {}

    def chain(seq: Sequence[int]) -> None:
        for a, b in itertools.pairwise(seq):
            if nxt.get(a, b) != b:
                raise AssertionError(
                    f"{kind}: token {hf.decode([a])!r} would need two successors: "
                    f"{hf.decode([nxt[a]])!r} and {hf.decode([b])!r}"
                )
            nxt[a] = b

    expected: dict[str, list[int]] = {}
    if kind == "healthy":
        thought = ids(HEALTHY_THOUGHT)
        chain([nl[0], think, *thought, close])
        expected["on"] = [think, *thought, close, nlnl[0], *answer, eos]
    else:
        loop = ids(s["thinking_loop"])
        chain([nl[0], think, *loop, loop[0]])
        expected["on"] = [think, *loop, *loop, *loop[:3]]
    if kind == "leaky":
        content_loop = ids(LOOP_EN)
        chain([close, nlnl[0], *answer, content_loop[0]])
        expected["off"] = [*answer, *content_loop, *content_loop[:3]]
    else:
        chain([close, nlnl[0], *answer, eos])
        expected["off"] = [*answer, eos]
    expected["salvage"] = [nlnl[0], *expected["off"]]
    return nxt, expected


def _build_weights(out: pathlib.Path, hf: Any, nxt: dict[int, int], layers: int) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    vocab = len(hf)
    eos = int(hf.convert_tokens_to_ids(EOS))
    states = sorted(nxt)
    # One direction per token with a successor, one shared "unscripted" direction, rounded up
    # to a multiple of 64 to keep the CPU kernels on their usual shapes.
    hidden = ((len(states) + 1 + 63) // 64) * 64
    fallback = len(states)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        eos_token_id=eos,
        bos_token_id=None,
        pad_token_id=hf.pad_token_id,
    )
    cfg.dtype = "float32"
    model = Qwen3ForCausalLM(cfg).to(torch.float32)
    scale = float(hidden) ** 0.5  # a scaled one-hot has RMS 1, so RMSNorm passes it unchanged
    embed = torch.zeros(vocab, hidden)
    embed[:, fallback] = scale
    head = torch.zeros(vocab, hidden)
    head[eos, fallback] = LOGIT / scale
    for row, token in enumerate(states):
        embed[token].zero_()
        embed[token, row] = scale
        head[nxt[token], row] = LOGIT / scale
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.zero_()
        model.model.embed_tokens.weight.copy_(embed)
        model.lm_head.weight.copy_(head)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos, "pad_token_id": hf.pad_token_id}, indent=2) + "\n"
    )
    return model


def _greedy_check(model: Any, prompt: list[int], want: list[int]) -> list[int]:
    """Greedy predictions along ``prompt + want`` in one forward pass (teacher forcing):
    they equal ``want`` exactly when greedy decoding from ``prompt`` produces ``want``."""
    import torch

    seq = torch.tensor([prompt + want])
    with torch.no_grad():
        logits = model(seq).logits[0]
    preds = torch.argmax(logits[len(prompt) - 1 : len(prompt) - 1 + len(want)], dim=-1)
    return [int(t) for t in preds]


def _verify(kind: str, hf: Any, model: Any, expected: dict[str, list[int]]) -> None:
    """Run the saved network through transformers on the real rendered prompts."""
    user = [{"role": "user", "content": "My parser crashes on an empty list. Why?"}]
    salvage = [*user, {"role": "assistant", "content": "<think>\nLet me look.\n</think>\n\n"}]
    prompts = {
        "on": hf.apply_chat_template(user, add_generation_prompt=True, tokenize=False),
        "off": hf.apply_chat_template(
            user, add_generation_prompt=True, tokenize=False, enable_thinking=False
        ),
        "salvage": hf.apply_chat_template(
            salvage, add_generation_prompt=False, continue_final_message=True, tokenize=False
        ),
    }
    assert prompts["on"].endswith("<|im_start|>assistant\n"), prompts["on"]
    # A history's reasoning in its own field is part of the prompt (see CHAT_TEMPLATE).
    turn = [*user, {"role": "assistant", "content": "Fix.", "reasoning": "Let me look."},
            {"role": "user", "content": "Thanks."}]
    rendered = hf.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
    assert "<think>\nLet me look.\n</think>\n\nFix.<|im_end|>" in rendered, rendered
    # transformers may or may not keep the trailing "\n\n" of the final message; both endings
    # are on the scripted path ("</think>" chains into "\n\n").
    assert prompts["salvage"].rstrip("\n").endswith("Let me look.\n</think>"), prompts["salvage"]
    for name, text in prompts.items():
        want = expected[name]
        if name == "salvage" and text.endswith("\n\n"):
            want = expected["off"]
        got = _greedy_check(model, list(hf.encode(text, add_special_tokens=False)), want)
        if got != want:
            raise AssertionError(
                f"{kind}/{name}: greedy output differs\n"
                f" got {hf.decode(got)!r}\nwant {hf.decode(want)!r}"
            )


def build(
    out: pathlib.Path, kind: str, *, layers: int = LAYERS, verify: bool = True
) -> dict[str, Any]:
    """Write the model of `kind` into `out` and return its script (also saved as script.json)."""
    out.mkdir(parents=True, exist_ok=True)
    hf = _build_tokenizer(out)
    nxt, expected = _chains(kind, hf)
    model = _build_weights(out, hf, nxt, layers)
    if verify:
        _verify(kind, hf, model, expected)
    info = {
        **script(kind),
        "fixture_sha256": fixture_hash(),
        "vocab_size": len(hf),
        "scripted_tokens": len(nxt),
        "thinking_tokens": len(expected["on"]) if kind == "healthy" else None,
        # The text of every token the model can emit, so a test can count the tokens of the
        # text it received (each scripted word is one token; see "How" above).
        "token_pieces": sorted(
            {hf.decode([t]) for t in {*nxt, *nxt.values()}}
            - {THINK_OPEN, THINK_CLOSE, EOS, *SPECIAL_TOKENS}
        ),
    }
    (out / "script.json").write_text(json.dumps(info, ensure_ascii=False, indent=2) + "\n")
    return info


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--layers", type=int, default=LAYERS, help="zeroed decoder layers")
    parser.add_argument("--no-verify", action="store_true", help="skip the transformers self-check")
    args = parser.parse_args(argv)
    info = build(args.out_dir, args.kind, layers=args.layers, verify=not args.no_verify)
    print(
        f"{args.kind}: vocab {info['vocab_size']}, {info['scripted_tokens']} scripted tokens"
        f" -> {args.out_dir}"
    )


if __name__ == "__main__":
    main()
