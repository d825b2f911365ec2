#!/usr/bin/python3
"""Decode and prefill with the CPU backend's thread choice (backend/cpu/thread_choice.h) against
every op on every thread (--fixed-threads), quiet and with busy cores beside it.

Each round runs, for each shape, four decode_bench runs back to back on one model file:
quiet + choice, quiet + fixed, busy + choice, busy + fixed (choice and fixed swapped in even
rounds) ("busy": `yes > /dev/null` processes,
--busy of them, for the run's length). The table gives each run's median-token and all-token
decode rates, prefill, and the ops per layer and token that ran on one thread; the summary the
busy / quiet ratios (the issue's aim: >= 0.5) of each build, from the same round.

Usage: bench/thread_choice_bench.py [--shapes small-q8,qwen3] [--rounds 2] [--busy 1]
       [--bin build/bin/decode_bench] [--dir /tmp/colibri-thread-choice]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shape_bench import SHAPES  # noqa: E402

RUN_FLAGS = "--mode resident --prompt 128 --tokens 48"


def run(binary, shape, model_dir, fixed, busy):
    cmd = ([binary] + SHAPES[shape][1].split() + RUN_FLAGS.split() +
           ["--dir", model_dir, "--reuse", "--keep", "--json"])
    if fixed:
        cmd.append("--fixed-threads")
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(busy)]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin/decode_bench")
    ap.add_argument("--shapes", default="small-q8,qwen3")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--busy", type=int, default=1, help="busy processes beside the busy runs")
    ap.add_argument("--dir", default="/tmp/colibri-thread-choice")
    args = ap.parse_args()
    shapes = args.shapes.split(",")
    for s in shapes:
        if s not in SHAPES:
            sys.exit(f"unknown shape {s!r}; known: {', '.join(SHAPES)}")
    with open("/proc/loadavg") as f:
        print(f"load average before: {f.read().split()[0]}; {os.cpu_count()} CPUs; "
              f"decode_bench {RUN_FLAGS}; busy = {args.busy} x `yes`\n")
    print("| shape | round | load | threads | decode median tok/s | decode all tok/s | "
          "prefill tok/s | one-thread ops / layer / token |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = {}  # (shape, fixed) -> [busy / quiet of decode median, of decode all, of prefill]
    for s in shapes:
        model_dir = os.path.join(args.dir, s)
        for rnd in range(1, args.rounds + 1):
            got = {}
            for busy in (0, args.busy):
                # The order alternates by round: the machine's state drifts within a round.
                for fixed in ((False, True) if rnd % 2 else (True, False)):
                    r = run(args.bin, s, model_dir, fixed, busy)
                    got[(busy > 0, fixed)] = r
                    with open("/proc/loadavg") as f:
                        load = f.read().split()[0]
                    label = ("fixed" if fixed else "choice") + (" + busy" if busy else "")
                    print(f"| {s} | {rnd} | {load} | {label} | {r['decode_median_tok_s']:.1f} | "
                          f"{r['decode_tok_s']:.1f} | {r['prefill_tok_s']:.1f} | "
                          f"{r['single_threaded_per_layer']:.1f} |", flush=True)
            for fixed in (False, True):
                q, b = got[(False, fixed)], got[(True, fixed)]
                ratios.setdefault((s, fixed), []).append(
                    [b[k] / q[k] for k in ("decode_median_tok_s", "decode_tok_s", "prefill_tok_s")])
    print("\nbusy / quiet (median over rounds):\n")
    print("| shape | threads | decode median | decode all | prefill |")
    print("|---|---|---|---|---|")
    for s in shapes:
        for fixed in (False, True):
            rs = ratios[(s, fixed)]
            med = [statistics.median(r[i] for r in rs) for i in range(3)]
            print(f"| {s} | {'fixed' if fixed else 'choice'} | {med[0]:.2f} | {med[1]:.2f} | "
                  f"{med[2]:.2f} |")


if __name__ == "__main__":
    main()
