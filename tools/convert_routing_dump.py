#!/usr/bin/python3
"""Converts a per-token routing dump to a colibri routing trace (version 1, gate weights only).

Input: JSON lines, one per generated token and MoE layer, as written by vLLM-based profilers
such as github.com/Mario928/speculative-moe (routing_data_collected/*_routing.jsonl):
  {"problem_id": P, "layer": l, "token_idx": t, "experts": [e1, e2], "gating_probs": [w1, w2]}
Records are grouped per problem and ordered by token then layer; the problems are decoded one
after another (each token is one forward pass). Only the chosen experts' gate weights exist in
such dumps, so the trace carries no "probs" (the replay treats the other experts as unknown).

Usage: tools/convert_routing_dump.py IN.jsonl OUT.jsonl --model mixtral-8x7b \
           [--n-layers 32 --n-experts 8 --top-k 2 --block-bytes 176160768]
Exit status: 0 ok, 1 unreadable or malformed input (the line is named), 2 bad arguments.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--model", default="mixtral-8x7b")
    ap.add_argument("--n-layers", type=int, default=32)
    ap.add_argument("--n-experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--block-bytes", type=int, default=0)
    a = ap.parse_args()
    if a.n_layers <= 0 or a.n_experts <= 0 or not 0 < a.top_k <= a.n_experts:
        print("error: need n_layers > 0, n_experts > 0 and 0 < top_k <= n_experts", file=sys.stderr)
        return 2
    rows = []
    try:
        with open(a.input) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    key = (int(r.get("problem_id", 0)), int(r["token_idx"]), int(r["layer"]))
                    experts = [int(e) for e in r["experts"]]
                    weights = [float(w) for w in r.get("gating_probs", [])]
                except (ValueError, KeyError, TypeError) as e:
                    print(f"error: {a.input} line {n}: {e!r}", file=sys.stderr)
                    return 1
                if not 0 <= key[2] < a.n_layers or any(not 0 <= e < a.n_experts for e in experts):
                    print(f"error: {a.input} line {n}: layer or expert outside {a.n_layers} x {a.n_experts}",
                          file=sys.stderr)
                    return 1
                if weights and len(weights) != len(experts):
                    print(f"error: {a.input} line {n}: gating_probs must match experts", file=sys.stderr)
                    return 1
                rows.append((key, experts, weights))
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rows.sort(key=lambda x: x[0])
    header = {"format": "colibri-routing-trace", "version": 1, "model": a.model, "n_layers": a.n_layers,
              "n_experts": a.n_experts, "top_k": a.top_k, "block_bytes": a.block_bytes}
    step, last = -1, None
    with open(a.output, "w") as out:
        out.write(json.dumps(header) + "\n")
        for (problem, token, layer), experts, weights in rows:
            if (problem, token) != last:
                step += 1
                last = (problem, token)
            rec = {"step": step, "item": 0, "pos": token, "layer": layer, "experts": experts, "weights": weights}
            out.write(json.dumps(rec) + "\n")
    print(f"{len(rows)} records, {step + 1} tokens -> {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
