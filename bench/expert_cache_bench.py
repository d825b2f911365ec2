#!/usr/bin/python3
"""Expert cache end to end: decode tokens/s of a synthetic Mixtral-shaped model of several GB
whose expert cache holds a fraction of it, prefetch off and on, against an mmap-everything
baseline under the same memory budget and against the disk-bound limit.

Every run is a child process in a memory cgroup (v1: memory.limit_in_bytes, which also bounds the
page cache, so the mmap baseline cannot keep the whole file cached); the page cache is dropped
before each run. colibri reads experts with O_DIRECT, so its only copy is its own cache.

Usage (root, for the cgroup and drop_caches):
  bench/expert_cache_bench.py [--dir /var/tmp/colibri-expert-cache-bench] [--cache-size 1.25G]
      [--tokens 40] [--warmup 8] [--repeat 2] [--layers 32 --hidden 2048 --ffn 5632]
      [--experts 8 --top-k 2 --quant q4_k]
Prints markdown tables for bench/RESULTS.md.
"""
import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get('COLIBRI_BIN_DIR', os.path.join(REPO, 'build', 'bin'))
sys.path.insert(0, os.path.join(REPO, 'tests'))
import testlib  # noqa: E402


def bench(*args, cgroup=None):
    cmd = [os.path.join(BIN, 'expert_cache_bench'), *map(str, args)]
    if cgroup:
        # Join the cgroup first, then become the benchmark: everything it maps or caches counts.
        cmd = [*cgroup.wrap(), *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f'{" ".join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}')
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--dir', default='/var/tmp/colibri-expert-cache-bench')
    ap.add_argument('--cache-size', default='1.25G')
    ap.add_argument('--slack', default='320M', help='memory budget beyond dense + expert cache')
    ap.add_argument('--tokens', type=int, default=40)
    ap.add_argument('--warmup', type=int, default=8)
    ap.add_argument('--repeat', type=int, default=2)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--io-threads', type=int, default=4)
    ap.add_argument('--layers', type=int, default=32)
    ap.add_argument('--hidden', type=int, default=2048)
    ap.add_argument('--ffn', type=int, default=5632)
    ap.add_argument('--experts', type=int, default=8)
    ap.add_argument('--top-k', type=int, default=2)
    ap.add_argument('--quant', default='q4_k')
    a = ap.parse_args()

    if not os.path.exists(os.path.join(a.dir, 'manifest.json')):
        info = bench('build', '--dir', a.dir, '--layers', a.layers, '--hidden', a.hidden, '--ffn', a.ffn,
                     '--experts', a.experts, '--top-k', a.top_k, '--quant', a.quant)
        print(f'built {a.dir} in {info["seconds"]:.0f} s', file=sys.stderr)
    with open(os.path.join(a.dir, 'manifest.json')) as f:
        manifest = json.load(f)
    experts = manifest['experts']['blocks']
    expert_bytes = sum(e['padded_size'] for e in experts)
    block = experts[0]['padded_size']
    dense = manifest['dense']['size']
    cache = testlib.size_bytes(a.cache_size)
    budget = dense + cache + testlib.size_bytes(a.slack)

    dropped = testlib.drop_caches()
    disk = bench('disk', '--dir', a.dir, '--threads', a.io_threads, '--gib', 3)
    bw = disk['bandwidth_bytes_per_second']
    reason = testlib.MemoryCgroup.available()
    cg = None if reason else testlib.MemoryCgroup(budget, 'bench')
    if reason:
        print(f'note: {reason}; runs are not memory-capped', file=sys.stderr)

    # (mode, policy, prefetch layers, minimum predicted weight to prefetch)
    configs = [('colibri', 'routing', 0, 0), ('colibri', 'routing', 1, 0), ('colibri', 'routing', 1, 0.35),
               ('colibri', 'routing', 2, 0), ('colibri', 'lru', 1, 0), ('mmap', '-', 0, 0)]
    results = []
    try:
        for mode, policy, prefetch, min_weight in configs:
            best = None
            for _ in range(a.repeat):
                testlib.drop_caches()
                if cg:
                    cg.reset_peak()
                args = ['run', '--dir', a.dir, '--mode', mode, '--tokens', a.tokens, '--warmup', a.warmup,
                        '--threads', a.threads]
                if mode == 'colibri':
                    args += ['--cache-size', a.cache_size, '--policy', policy, '--prefetch-layers', prefetch,
                             '--io-threads', a.io_threads, '--prefetch-min-weight', min_weight]
                r = bench(*args, cgroup=cg)
                r['cgroup_peak_bytes'] = cg.usage_peak() if cg else 0
                if best is None or r['tok_s'] > best['tok_s']:
                    best = r
            best['label'] = (f'colibri, {policy}, prefetch {prefetch}' + (f' (weight >= {min_weight})' if min_weight else '')
                             if mode == 'colibri' else 'mmap everything (page cache)')
            results.append(best)
            print(json.dumps(best), file=sys.stderr)
    finally:
        if cg:
            cg.remove()

    gib = 1 << 30
    print(f'model: {len(experts)} expert blocks of {block / (1 << 20):.1f} MiB = {expert_bytes / gib:.2f} GiB '
          f'of experts + {dense / (1 << 20):.0f} MiB dense; expert cache {a.cache_size} '
          f'({100 * cache / expert_bytes:.0f}% of the experts); memory budget (cgroup) '
          f'{budget / gib:.2f} GiB{"" if cg else " (NOT enforced: no cgroup)"}; page cache dropped before '
          f'each run: {"yes" if dropped else "no"}')
    print(f'disk: {bw / 1e9:.2f} GB/s reading whole expert blocks in random order, O_DIRECT, '
          f'{a.io_threads} at a time')
    print(f'{a.tokens - a.warmup} decode steps measured after {a.warmup} warm-up steps, {a.threads} compute threads, '
          f'best of {a.repeat}\n')
    print('| run | tok/s | ms/token | stall ms/token | read/token | hit rate | coverage | prefetch precision |'
          ' disk-bound limit | of limit | peak memory |')
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    for r in results:
        read = r['storage_bytes_per_token']
        needed = r.get('needed_bytes_per_token', read)
        limit = bw / needed if needed > 0 else float('inf')
        stall = f'{r["stall_ms_per_token"]:.0f}' if r['mode'] == 'colibri' else '-'
        print(f'| {r["label"]} | {r["tok_s"]:.2f} | {r["ms_per_token"]:.0f} | {stall} | '
              f'{read / (1 << 20):.0f} MiB | '
              + (f'{100 * r["hit_rate"]:.0f}% | {100 * r["coverage"]:.0f}% | '
                 f'{100 * r["prefetch_precision"]:.0f}% | ' if 'hit_rate' in r else '- | - | - | ')
              + f'{limit:.2f} tok/s | {100 * r["tok_s"] / limit:.0f}% | '
              f'{r["cgroup_peak_bytes"] / gib:.2f} GiB |')
    mmap = next(r for r in results if r['mode'] == 'mmap')
    best = max((r for r in results if r['mode'] == 'colibri'), key=lambda r: r['tok_s'])
    print(f'\nbest colibri run / mmap baseline: {best["tok_s"] / mmap["tok_s"]:.1f}x')
    print('read/token: bytes read from storage per token (/proc/self/io). disk-bound limit = disk bandwidth / '
          'bytes the run had to read per token (blocks demanded while not resident; for mmap, all storage '
          'reads). stall: time the model waited for expert blocks (for mmap the waits are page faults inside '
          'the kernels, not measured).')


if __name__ == '__main__':
    main()
