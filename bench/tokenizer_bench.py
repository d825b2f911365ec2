#!/usr/bin/python3
"""Tokenizer encode throughput: colibri (colibri-cli tokenize --stats) vs transformers.js
(@lenml/tokenizers on node), on the same ~1 MB mixed corpus, measured in one run.

    bench/tokenizer_bench.py [--repeat 3] [--no-write]

The corpus mixes the reference corpus of tests/tokenizer/corpus.py (English, CJK, other scripts,
emoji, code, digits, special-token strings). Both sides encode the whole text without special
tokens; the time covers encoding only (tokenizer loading and the JIT warm-up are excluded). The
token counts of both sides must agree, or the numbers are meaningless and the bench fails.
Prints a markdown table and appends it under "## Tokenizer" in bench/RESULTS.md.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "tokenizer"))
import corpus  # noqa: E402
import npm_reference as ref  # noqa: E402
import results_md  # noqa: E402

HEADING = "## Tokenizer"


def ours(model, path, repeat):
    out = subprocess.run([ref.CLI, "tokenize", "--tokenizer", ref.model_dir(model), "--text-file", path,
                          "--no-special", "--stats", "--repeat", str(repeat)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


INTRO = ("`bench/tokenizer_bench.py`: encode throughput on a ~1 MB mixed corpus (English, CJK, other "
         "scripts, emoji, code, digits), no special tokens, colibri-cli vs transformers.js "
         "(@lenml/tokenizers on node 20) in one run, one thread on each side; loading and warm-up excluded; "
         "both sides produce the same token count.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="encodes of the corpus per side and model")
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch bench/RESULTS.md")
    args = ap.parse_args()
    try:
        ref.ensure_packages()
    except ref.Unavailable as e:
        sys.exit("tokenizer_bench: reference unavailable: %s" % e)
    text = corpus.bench_corpus()
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write(text)
        path = f.name
    rows = []
    try:
        for model in ref.MODEL_PACKAGES:
            mine = ours(model, path, args.repeat)
            theirs = ref.run_node({"model": model, "bench": {"text": text, "repeat": args.repeat}})["bench"]
            if mine["tokens"] != theirs["tokens"]:
                sys.exit("tokenizer_bench: %s token counts differ: colibri %d, transformers.js %d" %
                         (model, mine["tokens"], theirs["tokens"]))
            rows.append((model, mine["bytes"], mine["tokens"], mine["mb_per_s"], theirs["mb_per_s"]))
    finally:
        os.unlink(path)
    lines = ["%s, %d encodes per side:" % (datetime.date.today().isoformat(), args.repeat), "",
             "| tokenizer | corpus (bytes) | tokens | colibri (MB/s) | transformers.js (MB/s) | speed-up |",
             "|---|---|---|---|---|---|"]
    names = {"qwen3": "Qwen3 (byte-level BPE)", "deepseek_v3": "DeepSeek-V3 (byte-level BPE)",
             "llama2": "Mistral/Mixtral (SentencePiece BPE)"}
    for model, nbytes, tokens, mine, theirs in rows:
        lines.append("| %s | %d | %d | %.2f | %.2f | %.1fx |" % (names[model], nbytes, tokens, mine, theirs, mine / theirs))
    table = "\n".join(lines)
    print(table)
    if not args.no_write:
        results_md.append(HEADING, INTRO, table)


if __name__ == "__main__":
    main()
