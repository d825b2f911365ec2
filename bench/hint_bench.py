#!/usr/bin/python3
"""Do the router's prefetch hints pay? Several conversations take turns on one colibri-server
whose expert cache holds a quarter of the experts, so each conversation's experts have been
evicted by the others by the time it resumes. Each turn resends the history plus a few new
tokens (session `user` set, as OpenAI clients do); compute reuses the KV, so the new turn's
prefill touches only the new tokens' experts. The same workload runs with --prefetch-hints 0
and N in one invocation.

    bench/hint_bench.py [--sessions 4] [--rounds 5] [--hints 64] [--experts 32]

Reports TTFT (p50, mean) of resumed turns, expert stall seconds per resumed turn (compute's
colibri_compute_expert_stall_seconds_total), hit rate and bytes read from disk.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests'))
import testlib  # noqa: E402


def run(model, cache, hints, sessions, rounds, workdir):
    server = testlib.Service('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1',
                                                '--expert-cache-size', str(cache), '--threads', '2',
                                                '--prefetch-hints', str(hints)], workdir, tag=f'hints-{hints}')
    try:
        url = f'http://127.0.0.1:{server.port()}'
        history = {s: [1] for s in range(sessions)}
        ttfts, outputs = [], {}
        stall = 0.0
        for r in range(rounds):
            for s in range(sessions):
                # Each conversation draws its tokens from its own range: its own routing.
                history[s] += [3 + (100 * s + (r * 17 + k * 7) % 100) % 500 for k in range(12)]
                before = testlib.http('GET', url + '/metrics')[1]
                res = testlib.stream_completion(url, {'prompt': history[s], 'max_tokens': 8, 'temperature': 0,
                                                      'user': f'conversation-{s}'})
                ttft, ids = res['ttft'], res['token_ids']
                after = testlib.http('GET', url + '/metrics')[1]
                history[s] += ids
                outputs[(s, r)] = ids
                if r > 0:  # resumed turns: the ones hints can help
                    ttfts.append(ttft)
                    stall += (testlib.metric(after, 'colibri_compute_expert_stall_seconds_total') -
                              testlib.metric(before, 'colibri_compute_expert_stall_seconds_total'))
        m = testlib.http('GET', url + '/metrics')[1]
    finally:
        server.stop()
    resumed = sessions * (rounds - 1)
    return {
        'ttft_p50': statistics.median(ttfts), 'ttft_mean': statistics.fmean(ttfts), 'stall': stall / resumed,
        'hit_rate': testlib.metric(m, 'colibri_compute_expert_cache_hit_ratio', 'tier="ram"'),
        'read_mb': testlib.metric(m, 'colibri_compute_expert_fetched_bytes_total') / 2**20,
        'outputs': outputs,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--sessions', type=int, default=4)
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--hints', type=int, default=64)
    ap.add_argument('--experts', type=int, default=32)
    ap.add_argument('--quantize', default='q8_0')
    a = ap.parse_args()
    d = testlib.tempdir('colibri-hints-')
    try:
        hf = testlib.gen_model(os.path.join(d, 'hf'), 'mixtral', 'demo', 'f32',
                               extra=['--experts', str(a.experts), '--top-k', '2'])
        model = testlib.convert(hf, os.path.join(d, 'm'), a.quantize)
        manifest = json.load(open(os.path.join(model, 'manifest.json')))
        blocks = manifest['experts']['blocks']
        expert_bytes = sum(b['padded_size'] for b in blocks)
        cache = expert_bytes // 4
        rows = [(n, run(model, cache, n, a.sessions, a.rounds, d)) for n in (0, a.hints)]
        same = rows[0][1]['outputs'] == rows[1][1]['outputs']
        print(f'{a.sessions} conversations x {a.rounds} rounds, 12 new tokens + 8 generated per turn; demo preset '
              f'with {a.experts} experts/layer top-2, {a.quantize}; expert cache = 1/4 of '
              f'{expert_bytes / 2**20:.1f} MiB; O_DIRECT reads. Tokens identical with and without hints: {same}\n')
        print('| prefetch hints | TTFT p50 (s) | TTFT mean (s) | expert stall / resumed turn (s) | hit rate | '
              'MiB read |')
        print('|---|---|---|---|---|---|')
        for n, r in rows:
            print(f'| {n or "off"} | {r["ttft_p50"]:.4f} | {r["ttft_mean"]:.4f} | {r["stall"]:.4f} | '
                  f'{r["hit_rate"]:.3f} | {r["read_mb"]:.1f} |')
    finally:
        testlib.rmtree(d)


if __name__ == '__main__':
    main()
