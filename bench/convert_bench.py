#!/usr/bin/python3
"""Conversion throughput: colibri-convert on a multi-GB synthetic Mixtral-shaped BF16 checkpoint
(real Hugging Face layout and tensor names, from tools/gen_tiny_model.py), per output format.

    bench/convert_bench.py [--layers 8] [--hidden 2048] [--ffn 5632] [--formats f16,q8_0,q4_k_m]

Prints a markdown table: input GB, seconds, input GB/s, output size, for each format.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests'))
import testlib  # noqa: E402


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--layers', type=int, default=8)
    ap.add_argument('--hidden', type=int, default=2048)
    ap.add_argument('--ffn', type=int, default=5632)
    ap.add_argument('--formats', default='f16,q8_0,q4_k_m')
    a = ap.parse_args()
    d = testlib.tempdir('colibri-convert-bench-')
    try:
        hf = os.path.join(d, 'hf')
        t0 = time.time()
        testlib.gen_model(hf, 'mixtral', 'micro', 'bf16',
                          extra=('--hidden', str(a.hidden), '--layers', str(a.layers), '--heads', '16', '--kv-heads',
                                 '4', '--ffn', str(a.ffn), '--vocab', '32000', '--shards', '4'))
        gen_s = time.time() - t0
        in_bytes = sum(os.path.getsize(os.path.join(hf, f)) for f in os.listdir(hf) if f.endswith('.safetensors'))
        print(f'input: {in_bytes / 1e9:.2f} GB BF16 safetensors (4 shards), {a.layers} layers, hidden {a.hidden}, '
              f'expert ffn {a.ffn}, 8 experts; generated in {gen_s:.0f} s; {os.cpu_count()} cores\n')
        print('| format | seconds | input GB/s | output GB | bytes/weight vs BF16 |')
        print('|---|---|---|---|---|')
        for fmt in a.formats.split(','):
            out = os.path.join(d, fmt)
            t0 = time.time()
            testlib.convert(hf, out, fmt)
            secs = time.time() - t0
            size = dir_bytes(out)
            print(f'| {fmt} | {secs:.1f} | {in_bytes / 1e9 / secs:.2f} | {size / 1e9:.2f} | {size / in_bytes:.3f} |',
                  flush=True)
            testlib.rmtree(out)
    finally:
        testlib.rmtree(d)


if __name__ == '__main__':
    main()
