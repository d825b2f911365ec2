#!/usr/bin/python3
"""End-to-end decode speed: engine direct (colibri-cli), embedded colibri-server, and the three
services as separate processes, on the same generated model, measured in one run.

    bench/serve_bench.py [--preset demo] [--quantize q8_0] [--tokens 64]

Prints a markdown table: decode tokens/s per mode with the expert cache holding the whole model
and holding a quarter of it (experts stream from disk / the store).
"""
import argparse
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests'))
import testlib  # noqa: E402


def stream_decode_rate(url, prompt, n):
    """Tokens/s between the first and the last streamed token (decode only)."""
    body = {'prompt': prompt, 'max_tokens': n, 'temperature': 0, 'stream': True, 'return_token_ids': True}
    req = urllib.request.Request(url + '/v1/completions', data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    stamps = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith('data: {'):
                for c in json.loads(line[6:])['choices']:
                    stamps += [time.perf_counter()] * len(c.get('token_ids', []))
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), len(stamps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--preset', default='demo')
    ap.add_argument('--quantize', default='q8_0')
    ap.add_argument('--tokens', type=int, default=64)
    a = ap.parse_args()
    d = testlib.tempdir('colibri-serve-bench-')
    try:
        hf = testlib.gen_model(os.path.join(d, 'hf'), 'mixtral', a.preset, 'f32')
        model = testlib.convert(hf, os.path.join(d, 'bench'), a.quantize)
        manifest = json.load(open(os.path.join(model, 'manifest.json')))
        blocks = manifest['experts']['blocks']
        expert_bytes = sum(b['padded_size'] for b in blocks)
        prompt = [1] + list(range(300, 315))
        rows = []
        for label, cache in (('all experts cached', expert_bytes * 2), ('cache = 1/4 of experts', expert_bytes // 4)):
            cache_arg = str(cache)
            p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', model, '--prompt-tokens',
                             ','.join(map(str, prompt)), '--max-tokens', str(a.tokens), '--temperature', '0',
                             '--ignore-eos', '--expert-cache-size', cache_arg, '--threads', '2'])
            cli_rate = float(p.stderr.split('tok/s')[0].rsplit('(', 1)[1])
            services = []
            try:
                server = testlib.Service('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1',
                                                            '--expert-cache-size', cache_arg, '--threads', '2'], d)
                services.append(server)
                emb, n_emb = stream_decode_rate(f'http://127.0.0.1:{server.port()}', prompt, a.tokens)
                server.stop()
                services.clear()
                store = testlib.Service('colibri-expert-store', ['--model', model, '--listen', '127.0.0.1:0',
                                                                 '--metrics-port', '-1'], d)
                services.append(store)
                compute = testlib.Service('colibri-compute', ['--model', model, '--store', f'127.0.0.1:{store.port()}',
                                                              '--listen', '127.0.0.1:0', '--metrics-port', '-1',
                                                              '--expert-cache-size', cache_arg, '--threads', '2'], d)
                services.append(compute)
                router = testlib.Service('colibri-router', ['--model', model, '--compute', f'127.0.0.1:{compute.port()}',
                                                            '--port', '0', '--host', '127.0.0.1',
                                                            '--grpc-listen', '127.0.0.1:0'], d)
                services.append(router)
                clu, n_clu = stream_decode_rate(f'http://127.0.0.1:{router.port()}', prompt, a.tokens)
            finally:
                for s in reversed(services):
                    s.stop()
            rows.append((label, cli_rate, emb, clu, min(n_emb, n_clu)))
        print(f'model: {a.preset} preset, {a.quantize}, {manifest["config"]["n_layers"]} layers, '
              f'{len(blocks)} expert blocks, {expert_bytes / 2**20:.1f} MiB of experts, dense '
              f'{manifest["dense"]["size"] / 2**20:.1f} MiB; 2 threads\n')
        print('| expert cache | engine direct (tok/s) | colibri-server HTTP (tok/s) | 3 processes (tok/s) | cluster / embedded |')
        print('|---|---|---|---|---|')
        for label, cli, emb, clu, n in rows:
            print(f'| {label} | {cli:.1f} | {emb:.1f} | {clu:.1f} | {clu / emb:.2f} |')
    finally:
        testlib.rmtree(d)


if __name__ == '__main__':
    main()
