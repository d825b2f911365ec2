#!/usr/bin/python3
"""CPU decode and prefill at the MoE shapes of issue 18, against the measured limits.

Runs build/bin/decode_bench once per shape and mode and prints one markdown table per mode:
  resident  every expert in RAM (decode after a 512-token prefill; prefill of those 512 tokens)
  busy      resident, with one core kept busy by `yes > /dev/null` beside it (vs the quiet rate)
  cold      a fresh node whose cache holds the whole model: the first 64 tokens after a start
  quarter   a cache of a quarter of the expert bytes: against the disk-bound limit

The shapes are the issue's with the layer count scaled down so each model stays near 1.5 GB
(the real ones are 3-6 GB or more; per-token bytes and rates scale with the layers kept).
Usage: bench/shape_bench.py [--bin build/bin/decode_bench] [--shapes mixtral,qwen3,...]
                            [--modes resident,busy,cold,quarter] [--dir /tmp/colibri-shape-bench]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

# name: (label, decode_bench flags, the real model's layer count)
SHAPES = {
    "mixtral": ("Mixtral-like: hidden 2048, 8 experts top-2, FFN 8192, Q4_K / Q8_0 attention",
                "--layers 5 --hidden 2048 --ffn 8192 --experts 8 --top-k 2 --heads 16 --kv-heads 4"
                " --quant q4_k --dense-quant q8_0", 24),
    "qwen3": ("Qwen3-30B-A3B-like: hidden 2048, 128 experts top-8, FFN 768, 32/4 heads, Q4_K / Q8_0",
              "--layers 4 --hidden 2048 --ffn 768 --experts 128 --top-k 8 --heads 32 --kv-heads 4"
              " --quant q4_k --dense-quant q8_0", 8),
    "small-q8": ("small Mixtral-like, all Q8_0: hidden 1024, 8 experts top-2, FFN 4096",
                 "--layers 12 --hidden 1024 --ffn 4096 --experts 8 --top-k 2 --heads 16 --kv-heads 4"
                 " --quant q8_0 --dense-quant q8_0", 16),
    "deepseek": ("DeepSeek-V3-like: hidden 2048, 256 experts top-8, FFN 512, GQA 16/4 (no MLA, no shared expert), Q4_K / Q8_0",
                 "--layers 3 --hidden 2048 --ffn 512 --experts 256 --top-k 8 --heads 16 --kv-heads 4"
                 " --quant q4_k --dense-quant q8_0", 61),
    "gpt-oss": ("gpt-oss-like: hidden 2880, 128 experts top-4, FFN 2880, 45/9 heads of 64, MXFP4 / Q8_0",
                "--layers 1 --hidden 2880 --ffn 2880 --experts 128 --top-k 4 --heads 45 --kv-heads 9"
                " --quant mxfp4 --dense-quant q8_0", 36),
}

MODE_FLAGS = {
    "resident": "--mode resident --prompt 512 --tokens 32",
    "busy": "--mode resident --prompt 512 --tokens 32",
    "cold": "--mode cold --tokens 64",
    # Sampled, not greedy: a random model's greedy tokens repeat, and so does its routing.
    "quarter": "--mode quarter --prompt 512 --tokens 40 --warmup 8 --temperature 1",
}


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def run(binary, shape_flags, mode, model_dir):
    cmd = [binary] + shape_flags.split() + MODE_FLAGS[mode].split() + ["--dir", model_dir, "--reuse", "--keep", "--json"]
    busy = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if mode == "busy" else None
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    finally:
        if busy:
            busy.kill()
            busy.wait()
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin/decode_bench")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--modes", default="resident,busy,cold,quarter")
    ap.add_argument("--dir", default="/tmp/colibri-shape-bench")
    args = ap.parse_args()
    shapes = args.shapes.split(",")
    modes = args.modes.split(",")
    for s in shapes:
        if s not in SHAPES:
            sys.exit(f"unknown shape {s!r}; known: {', '.join(SHAPES)}")
    for m in modes:
        if m not in MODE_FLAGS:
            sys.exit(f"unknown mode {m!r}; known: {', '.join(MODE_FLAGS)}")
    results = {}
    loads = [loadavg()]
    for s in shapes:
        model_dir = os.path.join(args.dir, s)
        for m in modes:
            results[(s, m)] = run(args.bin, SHAPES[s][1], m, model_dir)
            loads.append(loadavg())
        shutil.rmtree(model_dir, ignore_errors=True)
    print(f"load average (1 min) before / during the runs: {loads[0]} / {', '.join(loads[1:])}; "
          f"{os.cpu_count()} CPUs\n")
    print("| shape (layers kept / real) | model GB | GB/s | MB/token | limit tok/s |")
    print("|---|---|---|---|---|")
    for s in shapes:
        r = next(results[(s, m)] for m in modes)
        print(f"| {SHAPES[s][0]} ({r['layers']} / {SHAPES[s][2]}) | {r['model_bytes'] / 1e9:.2f} | "
              f"{r['bandwidth_bytes_per_second'] / 1e9:.1f} | {r['touched_bytes_per_token'] / 1e6:.1f} | "
              f"{r['limit_tok_s']:.1f} |")
    print()
    for m in modes:
        if m == "resident":
            print("Fully resident (decode: median token after a 512-token prefill):\n")
            print("| shape | decode tok/s | / limit | prefill tok/s (512) | parallel regions / layer / token |")
            print("|---|---|---|---|---|")
        elif m == "busy":
            print("One busy core (`yes > /dev/null` beside it):\n")
            print("| shape | decode tok/s | / limit | / quiet | prefill tok/s | / quiet |")
            print("|---|---|---|---|---|---|")
        elif m == "cold":
            print("Cold start (first 64 tokens of a fresh node, cache holds the model, warm start on):\n")
            print("| shape | first-64 tok/s | / limit | / resident |")
            print("|---|---|---|---|")
        else:
            print("A quarter of the expert bytes cached (decode after 8 tokens; prefill of 512):\n")
            print("| shape | disk GB/s | MB read/token | decode tok/s | / disk limit | prefill tok/s | / disk limit |")
            print("|---|---|---|---|---|---|---|")
        for s in shapes:
            r = results[(s, m)]
            name = s
            dec = r["decode_median_tok_s"] if m in ("resident", "busy") else r["decode_tok_s"]
            quiet = results.get((s, "resident"))
            if m == "resident":
                regions = f"{r['regions_per_layer']:.1f}" if "regions_per_layer" in r else "-"
                print(f"| {name} | {dec:.1f} | {dec / r['limit_tok_s']:.0%} | {r['prefill_tok_s']:.1f} | {regions} |")
            elif m == "busy":
                q = f"{dec / quiet['decode_median_tok_s']:.0%}" if quiet else "-"
                qp = f"{r['prefill_tok_s'] / quiet['prefill_tok_s']:.0%}" if quiet else "-"
                print(f"| {name} | {dec:.1f} | {dec / r['limit_tok_s']:.0%} | {q} | {r['prefill_tok_s']:.1f} | {qp} |")
            elif m == "cold":
                q = f"{dec / quiet['decode_median_tok_s']:.0%}" if quiet else "-"
                print(f"| {name} | {dec:.1f} | {dec / r['limit_tok_s']:.0%} | {q} |")
            else:
                dl = r["disk_limit_tok_s"]
                pl = r["prefill_disk_limit_tok_s"]
                print(f"| {name} | {r['disk_bytes_per_second'] / 1e9:.2f} | {r['fetched_bytes_per_token'] / 1e6:.1f} | "
                      f"{dec:.1f} | {dec / dl if dl else 0:.0%} | {r['prefill_tok_s']:.1f} | "
                      f"{r['prefill_tok_s'] / pl if pl else 0:.0%} |")
        print()


if __name__ == "__main__":
    main()
