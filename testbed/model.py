"""Build the test bed's tiny random-weight Llama model, offline, in about a second.

The live test bed needs a *real* sampling model behind a real gateway, not a mock: temperature
must change the output, a seed must fix it, and streaming must come from a real generate loop.
Downloading even a small model is impossible in CI (no hub), so the model is made here:

- a byte-level BPE tokenizer trained with ``tokenizers`` on the few KB of text below, so that
  any input encodes and every output decodes;
- a Llama config of about 100k parameters with random weights from a fixed seed, so that the
  model is the same on every machine;
- a chat template that renders every message shape the suite sends (list content, assistant
  ``tool_calls``, ``tool`` results), so ``/v1/chat/completions`` never fails on the template;
- a generation config that suppresses the special tokens and non-printable bytes, so a reply is
  always ``max_tokens`` tokens of printable ASCII: never empty, never half a UTF-8 sequence.

Run as ``python -m testbed.model OUT_DIR`` with the test bed's interpreter (torch, transformers
and tokenizers are needed; the test runner itself does not import them). With
``-- serve ARGS...`` after it, the same process then runs ``transformers serve ARGS`` (the real
CLI, in-process): torch and transformers are imported once instead of twice, about 5 s saved.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

MODEL_NAME = "tiny-llama"
SEED = 20261129

SPECIAL_TOKENS = ("<|bos|>", "<|end|>", "<|pad|>")

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "<|{{ m['role'] }}|>"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% elif m['content'] %}{% for p in m['content'] %}"
    "{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if m['tool_calls'] %}{% for tc in m['tool_calls'] %}"
    "{% set fn = tc['function'] if tc['function'] is defined else tc %}"
    " call {{ fn['name'] }} {{ fn['arguments'] | tojson }}"
    "{% endfor %}{% endif %}"
    "<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

# A few KB of plain text: enough for a few hundred BPE merges, small enough to read.
CORPUS = """\
A gateway sits between a training run and the models it calls. It checks the key, picks the
upstream, counts the tokens and passes the reply back. When it works nobody notices it; when it
breaks, a training run stalls at three in the morning and the logs only say that a request failed.
The contract suite asks a few small questions before the run starts. Does the base URL point at
the right place? Is the key accepted, and is a wrong key refused? Does every model answer, and
does it answer in the shape the client expects? Does streaming end cleanly, with a final marker?
Are concurrent requests served at the same time, or one after another? Does temperature change
the output, or is every sample the same? Do custom headers reach the upstream, so that a version
tag recorded by the client can be found again in the server logs?
The tiny model behind this test bed knows nothing. Its weights are random and its vocabulary was
learned from this very paragraph. It still samples like a real model: raise the temperature and
the words change; fix the seed and they repeat. That is all a contract test needs from it.
Hello, world. The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor
jugs. How vexingly quick daft zebras jump. Sphinx of black quartz, judge my vow.
One, two, three, four, five, six, seven, eight, nine, ten. Monday, Tuesday, Wednesday, Thursday,
Friday, Saturday, Sunday. January, February, March, April, May, June, July, August, September,
October, November, December. North, south, east, west. Red, orange, yellow, green, blue, violet.
def add(a, b): return a + b. for i in range(10): print(i). {"role": "user", "content": "hi"}.
The weather today is mild, with a light wind from the west and a chance of rain in the evening.
Please reply with one short sentence. Thank you. You are a helpful assistant. What time is it?
The answer is forty-two. The result was saved to disk. The request timed out after ten seconds.
"""


def build(out_dir: Path) -> Path:
    """Write tokenizer, config, random weights and generation config to ``out_dir``; return it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch  # type: ignore[import-not-found]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # type: ignore[import-not-found]
    from transformers import (  # type: ignore[import-not-found]
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    torch.manual_seed(SEED)
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    bos, end, pad = SPECIAL_TOKENS
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token=bos, eos_token=end, pad_token=pad, model_max_length=2048
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=16,
        suppress_tokens=_unwanted_ids(tokenizer),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    return out_dir


def _unwanted_ids(tokenizer: object) -> list[int]:
    """Ids of special tokens and of tokens that decode to anything but printable ASCII."""
    vocab: dict[str, int] = tokenizer.get_vocab()  # type: ignore[attr-defined]
    decode = tokenizer.decode  # type: ignore[attr-defined]
    unwanted = []
    for token, idx in vocab.items():
        text = decode([idx])
        if token in SPECIAL_TOKENS or not text or not all(" " <= ch <= "~" for ch in text):
            unwanted.append(idx)
    return sorted(unwanted)


def param_count(out_dir: Path) -> int:
    """Number of parameters in the saved model (read from its config, no torch needed)."""
    cfg = json.loads((out_dir / "config.json").read_text())
    h, v, i, n = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h
    return int(2 * v * h + n * per_layer + h)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    then = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the model into (kept if it has one)")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    out: Path = args.out_dir
    if not (out / "model.safetensors").exists():
        build(out)
    print(f"{MODEL_NAME}: {param_count(out)} parameters in {out}", file=sys.stderr, flush=True)
    if not then:
        return 0
    from transformers.cli.transformers import main as transformers_cli  # type: ignore[import-not-found]

    sys.argv = ["transformers", *then]
    return int(transformers_cli() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
