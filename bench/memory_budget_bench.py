#!/usr/bin/python3
"""colibri-server under a real memory cgroup: decode and prefill tokens/s against the cap, with
peak resident memory, the expert cache's hit rate and the fraction of the disk-bound limit.

For each cap (dense weights + a fraction of the experts + --slack), the server runs as a child of
a memory cgroup (v1 memory.limit_in_bytes or v2 memory.max) with every budget on auto, so it
plans from the cgroup's limit as it would in a container. Per cap: a cold prefill of --prompt
tokens (time to the first token), then a greedy decode of --tokens tokens from a short prompt.
The disk-bound limit is the disk's measured O_DIRECT rate for whole expert blocks, read through
the server's own read path (one batch, 4 blocks in flight), over the expert bytes the decode read
per token (demand misses and prefetches); the read rate column is what the decode achieved
(bytes per token x tok/s).

Usage (root, for the cgroup and drop_caches):
  bench/memory_budget_bench.py [--dir /var/tmp/colibri-memory-bench] [--fractions 0.25,0.5,0.75]
      [--layers 24 --hidden 2048 --ffn 8192 --experts 8 --top-k 2 --quant q4_k]
      [--tokens 32] [--prompt 256] [--slack 512M]
Prints a markdown table for bench/RESULTS.md.
"""
import argparse
import json
import os
import random
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'tests'))
import testlib  # noqa: E402

MiB = 1 << 20


def run_cap(a, model, cap, workdir, tag):
    cg = testlib.MemoryCgroup(cap, tag)
    server = None
    try:
        testlib.drop_caches()
        server = testlib.Service('colibri-server',
                                 ['--model', model, '--port', '0', '--host', '127.0.0.1', '--threads',
                                  str(a.threads), '--routing-heat', 'none', '--warm-start', 'off'],
                                 workdir, tag=tag, wrap=cg.wrap())
        url = f'http://127.0.0.1:{server.port(timeout=600)}'
        rng = random.Random(3)
        t0 = time.perf_counter()
        status, body = testlib.http('POST', url + '/v1/completions',
                                    {'prompt': [rng.randrange(3, 512) for _ in range(a.prompt)],
                                     'max_tokens': 1, 'temperature': 0}, timeout=3600)
        prefill_s = time.perf_counter() - t0
        if status != 200:
            raise SystemExit(f'prefill failed: {status} {body}')
        # The decode's prompt is prefilled by a first request; the measured one extends it by that
        # request's token, so the KV of the prefix is reused and what it reads is the decode's.
        prompt = [rng.randrange(3, 512) for _ in range(16)]
        status, body = testlib.http('POST', url + '/v1/completions',
                                    {'prompt': prompt, 'max_tokens': 1, 'temperature': 0,
                                     'return_token_ids': True}, timeout=3600)
        if status != 200:
            raise SystemExit(f'decode prompt failed: {status} {body}')
        first = json.loads(body)['choices'][0]['token_ids']
        _, before = testlib.http('GET', url + '/metrics')
        rate, n, _, _ = testlib.stream_decode_rate(url, prompt + first, a.tokens)
        _, after = testlib.http('GET', url + '/metrics')

        def delta(name, labels=''):
            return testlib.metric(after, name, labels) - testlib.metric(before, name, labels)

        hits = delta('colibri_compute_expert_cache_lookups_total', 'result="hit"')
        misses = delta('colibri_compute_expert_cache_lookups_total', 'result="miss"') + \
            delta('colibri_compute_expert_cache_lookups_total', 'result="in_flight"')
        fetched = delta('colibri_compute_expert_fetched_bytes_total')
        reused = delta('colibri_compute_kv_restored_tokens_total')
        return {
            'cap': cap,
            'budget': testlib.metric(after, 'colibri_compute_memory_budget_bytes'),
            'cache': testlib.metric(after, 'colibri_compute_expert_cache_capacity_bytes'),
            'prefill_tok_s': a.prompt / prefill_s,
            'decode_tok_s': rate,
            'hit_rate': hits / max(hits + misses, 1),
            'read_per_token': fetched / max(n, 1),
            'hits': hits, 'misses': misses, 'reused': reused,
            'peak_rss': testlib.peak_rss(server.proc.pid),
            'oom_kills': cg.oom_kills(),
        }
    finally:
        if server:
            server.stop()
        cg.remove()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--dir', default='/var/tmp/colibri-memory-bench')
    ap.add_argument('--fractions', default='0.25,0.5,0.75')
    ap.add_argument('--slack', default='512M', help='cap = dense + fraction x experts + slack')
    ap.add_argument('--layers', type=int, default=24)
    ap.add_argument('--hidden', type=int, default=2048)
    ap.add_argument('--ffn', type=int, default=8192)
    ap.add_argument('--experts', type=int, default=8)
    ap.add_argument('--top-k', type=int, default=2)
    ap.add_argument('--quant', default='q4_k')
    ap.add_argument('--tokens', type=int, default=32)
    ap.add_argument('--prompt', type=int, default=256)
    ap.add_argument('--threads', type=int, default=2)
    a = ap.parse_args()
    reason = testlib.MemoryCgroup.available()
    if reason:
        raise SystemExit(f'memory_budget_bench: {reason}')
    os.makedirs(a.dir, exist_ok=True)
    model = os.path.join(a.dir, 'model')
    if not os.path.exists(os.path.join(model, 'manifest.json')):
        donor = testlib.micro_model(a.dir, 'donor')
        testlib.run([testlib.binary('expert_cache_bench'), 'build', '--dir', model, '--layers', str(a.layers),
                     '--hidden', str(a.hidden), '--ffn', str(a.ffn), '--experts', str(a.experts), '--top-k',
                     str(a.top_k), '--quant', a.quant, '--vocab', '512', '--tokenizer-from', donor])
    with open(os.path.join(model, 'manifest.json')) as f:
        manifest = json.load(f)
    blocks = manifest['experts']['blocks']
    experts = sum(b['padded_size'] for b in blocks)
    dense = manifest['dense']['size']
    # Whole expert blocks in random order, O_DIRECT, through the serving read path, 4 in flight.
    testlib.drop_caches()
    probe = testlib.run([testlib.binary('expert_cache_bench'), 'disk', '--dir', model, '--threads', '4',
                         '--gib', '2'])
    disk = json.loads(probe.stdout.strip().splitlines()[-1])['bandwidth_bytes_per_second']
    rows = []
    for i, frac in enumerate(float(x) for x in a.fractions.split(',')):
        cap = dense + int(frac * experts) + testlib.size_bytes(a.slack)
        r = run_cap(a, model, cap, a.dir, f'cap{i}')
        r['fraction'] = frac
        rows.append(r)
        print(json.dumps(r), file=sys.stderr)
    print(f'CPU: {testlib.cpu_name()}, {a.threads} threads. Model: {len(blocks)} expert blocks of '
          f'{blocks[0]["padded_size"] / MiB:.1f} MiB ({a.quant}) = {experts / MiB:.0f} MiB of experts + '
          f'{dense / MiB:.0f} MiB dense. Disk: {disk / 1e9:.2f} GB/s (O_DIRECT whole blocks, 4 in flight). Page cache '
          f'dropped before each cap; every budget auto, read from the cgroup.\n')
    print('| cgroup cap | budget (auto) | expert cache | prefill tok/s (' + str(a.prompt) +
          ' tokens, cold) | decode tok/s | hit rate | read/token | read rate | disk-bound limit | of limit | '
          'peak resident | peak / budget | OOM kills |')
    print('|---|---|---|---|---|---|---|---|---|---|---|---|---|')
    for r in rows:
        limit = disk / r['read_per_token'] if r['read_per_token'] > 0 else float('inf')
        print(f'| dense + {int(100 * r["fraction"])}% of experts + {a.slack} = {r["cap"] / MiB:.0f} MiB | '
              f'{r["budget"] / MiB:.0f} MiB | {r["cache"] / MiB:.0f} MiB | {r["prefill_tok_s"]:.2f} | '
              f'{r["decode_tok_s"]:.2f} | {100 * r["hit_rate"]:.0f}% | {r["read_per_token"] / MiB:.0f} MiB | '
              f'{r["read_per_token"] * r["decode_tok_s"] / 1e9:.2f} GB/s | '
              f'{limit:.2f} tok/s | {100 * r["decode_tok_s"] / limit:.0f}% | {r["peak_rss"] / MiB:.0f} MiB | '
              f'{r["peak_rss"] / max(r["budget"], 1):.2f} | {r["oom_kills"]} |')


if __name__ == '__main__':
    main()
