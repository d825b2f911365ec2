#!/usr/bin/python3
"""Load test: N concurrent streaming clients on loopback against colibri-server for a bounded
time, with continuous batching and with one request at a time (--max-batch 1), on the same
model in one run.

    bench/load_test.py [--clients 8] [--seconds 20] [--preset demo] [--quantize q8_0]

Reports aggregate tokens/s, TTFT p50/p99, expert bytes fetched per generated token (the cache is
sized to a quarter of the experts, so batch union shows up as fewer bytes), and that every
request got a complete answer or a clear error.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests'))
import testlib  # noqa: E402


metric = testlib.metric


def client(url, stop_at, prompt_base, results, lock):
    i = 0
    while time.time() < stop_at:
        i += 1
        body = {'prompt': [1] + [(prompt_base * 37 + i * 11 + k) % 500 + 3 for k in range(24)], 'max_tokens': 32,
                'temperature': 0.7, 'seed': i}
        ttft, tokens, finish, error = None, 0, None, None
        try:
            res = testlib.stream_completion(url, body)
            ttft, tokens, finish = res['ttft'], res['chunks'], res['finish']
        except Exception as e:  # noqa: BLE001  (counted, reported)
            error = str(e)
        with lock:
            results.append({'ttft': ttft, 'tokens': tokens, 'finish': finish, 'error': error})


def run(model, cache, clients, seconds, max_batch, workdir):
    server = testlib.Service('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1',
                                                '--expert-cache-size', str(cache), '--threads', '2',
                                                '--max-batch', str(max_batch)], workdir)
    try:
        url = f'http://127.0.0.1:{server.port()}'
        before = testlib.http('GET', url + '/metrics')[1]
        results, lock = [], threading.Lock()
        stop_at = time.time() + seconds
        t0 = time.time()
        threads = [threading.Thread(target=client, args=(url, stop_at, n, results, lock)) for n in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        after = testlib.http('GET', url + '/metrics')[1]
    finally:
        server.stop()
    ok = [r for r in results if r['error'] is None and r['finish'] in ('stop', 'length')]
    tokens = sum(r['tokens'] for r in ok)
    ttfts = sorted(r['ttft'] for r in ok if r['ttft'] is not None)
    fetched = metric(after, 'colibri_compute_expert_fetched_bytes_total') - metric(before, 'colibri_compute_expert_fetched_bytes_total')
    generated = metric(after, 'colibri_compute_generated_tokens_total') - metric(before, 'colibri_compute_generated_tokens_total')
    return {
        'requests': len(results), 'complete': len(ok), 'errors': len(results) - len(ok),
        'tok_s': tokens / wall,
        'ttft_p50': statistics.median(ttfts) if ttfts else float('nan'),
        'ttft_p99': ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] if ttfts else float('nan'),
        'bytes_per_token': fetched / max(1, generated),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--clients', type=int, default=8)
    ap.add_argument('--seconds', type=float, default=20)
    ap.add_argument('--preset', default='demo')
    ap.add_argument('--quantize', default='q8_0')
    a = ap.parse_args()
    d = testlib.tempdir('colibri-load-')
    try:
        hf = testlib.gen_model(os.path.join(d, 'hf'), 'mixtral', a.preset, 'f32')
        model = testlib.convert(hf, os.path.join(d, 'load'), a.quantize)
        manifest = json.load(open(os.path.join(model, 'manifest.json')))
        expert_bytes = sum(b['padded_size'] for b in manifest['experts']['blocks'])
        cache = max(expert_bytes // 4, 3 * manifest['experts']['blocks'][0]['padded_size'])
        rows = []
        for label, max_batch in (('continuous batching (16)', 16), ('one at a time', 1)):
            rows.append((label, run(model, cache, a.clients, a.seconds, max_batch, d)))
        print(f'{a.clients} streaming clients for {a.seconds:.0f} s each run; {a.preset} preset {a.quantize}; expert '
              f'cache = 1/4 of {expert_bytes / 2**20:.1f} MiB of experts; 32 tokens per request, temperature 0.7\n')
        print('| scheduling | requests | complete | errors | tok/s | TTFT p50 (s) | TTFT p99 (s) | expert bytes fetched / token |')
        print('|---|---|---|---|---|---|---|---|')
        for label, r in rows:
            print(f'| {label} | {r["requests"]} | {r["complete"]} | {r["errors"]} | {r["tok_s"]:.1f} | '
                  f'{r["ttft_p50"]:.3f} | {r["ttft_p99"]:.3f} | {r["bytes_per_token"] / 1e3:.0f} KB |')
    finally:
        testlib.rmtree(d)


if __name__ == '__main__':
    main()
