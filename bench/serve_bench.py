#!/usr/bin/python3
"""End-to-end decode speed of every deployment, on one generated model, measured in one run.

    bench/serve_bench.py [--layers 10 --hidden 1024 --ffn 4096 --experts 8 --top-k 2]
                         [--quantize q8_0] [--tokens 48] [--rounds 3] [--parts paths,scale]
                         [--store-mib-s 100] [--max-stores 4] [--dir DIR]

`paths`: decode tokens/s of the engine direct (colibri-cli run), the embedded colibri-server, and
the three services as separate processes with the store over a unix socket (blocks through shared
memory) and over TCP (streamed chunks), with the compute node's expert cache holding every expert
and holding a quarter of them (misses stream from disk / the store).

`scale`: one compute over 1..--max-stores stores, every store's disk capped at --store-mib-s (the
store's own fault layer: a token bucket in its I/O engine) and the cache an eighth of the experts:
decode tokens/s and the bandwidth delivered (the stores' served bytes over the decode time), each
against N times the one-store figure (linear).

The default model is Mixtral-shaped (8 experts top-2, FFN 4096, hidden 1024, 10 layers, Q8_0:
1.07 GB of experts, 13.4 MB per expert). Decode rates are measured between the first and last
streamed token of a greedy request after a warm-up request, so start-up and prefill are excluded.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests'))
import testlib  # noqa: E402

PROMPT = [1] + list(range(300, 332))


def served_bytes(port):
    """colibri_store_bytes_served_total of the store whose /metrics is at `port`."""
    return testlib.metric(testlib.http('GET', f'http://127.0.0.1:{port}/metrics')[1],
                          'colibri_store_bytes_served_total')


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


class Bench:
    def __init__(self, a, d, model, expert_bytes):
        self.a, self.d, self.model, self.expert_bytes = a, d, model, expert_bytes
        self.services = []

    def start(self, name, args, tag, flags=('--port-file',)):
        s = testlib.Service(name, args, self.d, flags, tag=tag)
        self.services.append(s)
        return s

    def stop_all(self):
        for s in reversed(self.services):
            s.stop()
        self.services.clear()

    def decode(self, url, tokens):
        """Warm-up request (routing, KV, streams), then the measured one."""
        testlib.stream_decode_rate(url, PROMPT, 8)
        return testlib.stream_decode_rate(url, [2] + PROMPT[1:], tokens)

    def engine_direct(self, cache):
        p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', self.model, '--prompt-tokens',
                         ','.join(map(str, PROMPT)), '--max-tokens', str(self.a.tokens), '--temperature', '0',
                         '--ignore-eos', '--expert-cache-size', str(cache), '--threads', '2'], timeout=3600)
        return float(p.stderr.split('tok/s')[0].rsplit('(', 1)[1])

    def embedded(self, cache):
        try:
            server = self.start('colibri-server', ['--model', self.model, '--port', '0', '--host', '127.0.0.1',
                                                   '--expert-cache-size', str(cache), '--threads', '2'], 'server')
            return self.decode(f'http://127.0.0.1:{server.port()}', self.a.tokens)[0]
        finally:
            self.stop_all()

    def store(self, i, transport, extra=()):
        args = ['--model', self.model, '--metrics-port', '0', *extra]
        if transport == 'unix':
            sock = os.path.join(self.d, f'store{i}.sock')
            args += ['--listen', f'unix:{sock}']
        else:
            args += ['--listen', '127.0.0.1:0']
        s = self.start('colibri-expert-store', args, f'store{i}', ('--port-file', '--metrics-port-file'))
        port = s.port()
        s.target = f'unix:{sock}' if transport == 'unix' else f'127.0.0.1:{port}'
        return s

    def cluster(self, stores, cache):
        args = ['--model', self.model, '--listen', '127.0.0.1:0', '--metrics-port', '-1',
                '--expert-cache-size', str(cache), '--threads', '2']
        for s in stores:
            args += ['--store', s.target]
        compute = self.start('colibri-compute', args, 'compute')
        router = self.start('colibri-router', ['--model', self.model, '--compute', f'127.0.0.1:{compute.port()}',
                                               '--port', '0', '--host', '127.0.0.1'],
                            'router')
        return f'http://127.0.0.1:{router.port()}'

    def three_processes(self, cache, transport):
        """(decode tok/s, the store's and the compute's CPU cores during the measured request)."""
        try:
            store = self.store(0, transport)
            url = self.cluster([store], cache)
            testlib.stream_decode_rate(url, PROMPT, 8)
            compute = self.services[1]
            before = [cpu_seconds(store.proc.pid), cpu_seconds(compute.proc.pid)]
            rate, _, seconds, _ = testlib.stream_decode_rate(url, [2] + PROMPT[1:], self.a.tokens)
            used = [cpu_seconds(store.proc.pid) - before[0], cpu_seconds(compute.proc.pid) - before[1]]
            return rate, used[0] / seconds, used[1] / seconds
        finally:
            self.stop_all()

    def scaled(self, n, cache):
        """(decode tok/s, delivered bytes/s) with n rate-capped stores over TCP: the bytes the
        stores served for the measured request over its whole time (prefill included)."""
        try:
            fault = ['--inject-fault', f'kind=slow,disk=0,rate={self.a.store_mib_s}M']
            stores = [self.store(i, 'tcp', fault) for i in range(n)]
            url = self.cluster(stores, cache)
            testlib.stream_decode_rate(url, PROMPT, 8)
            ports = [s.port('--metrics-port-file') for s in stores]
            before = sum(served_bytes(p) for p in ports)
            rate, _, seconds, _ = testlib.stream_decode_rate(url, [2] + PROMPT[1:], self.a.scale_tokens)
            after = sum(served_bytes(p) for p in ports)
            return rate, (after - before) / seconds
        finally:
            self.stop_all()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--layers', type=int, default=10)
    ap.add_argument('--hidden', type=int, default=1024)
    ap.add_argument('--ffn', type=int, default=4096)
    ap.add_argument('--experts', type=int, default=8)
    ap.add_argument('--top-k', type=int, default=2)
    ap.add_argument('--quantize', default='q8_0')
    ap.add_argument('--tokens', type=int, default=48)
    ap.add_argument('--scale-tokens', type=int, default=24, help='scale: greedy tokens per run')
    ap.add_argument('--rounds', type=int, default=3, help='paths: runs of every mode (medians)')
    ap.add_argument('--parts', default='paths,scale')
    ap.add_argument('--store-mib-s', type=int, default=100, help='scale: each store disk\'s cap (MiB/s)')
    ap.add_argument('--max-stores', type=int, default=4)
    ap.add_argument('--dir', help='work directory (kept, the model reused); default: a temporary one')
    a = ap.parse_args()
    parts = set(a.parts.split(','))
    d = a.dir or testlib.tempdir('colibri-serve-bench-')
    os.makedirs(d, exist_ok=True)
    try:
        model = os.path.join(d, 'bench')
        if not os.path.exists(os.path.join(model, 'manifest.json')):
            hf = testlib.gen_model(os.path.join(d, 'hf'), 'mixtral', 'demo', 'bf16', extra=(
                '--layers', str(a.layers), '--hidden', str(a.hidden), '--ffn', str(a.ffn), '--experts',
                str(a.experts), '--top-k', str(a.top_k), '--heads', '16', '--kv-heads', '4'))
            testlib.convert(hf, model, a.quantize)
            testlib.rmtree(hf)
        manifest = json.load(open(os.path.join(model, 'manifest.json')))
        blocks = manifest['experts']['blocks']
        expert_bytes = sum(b['padded_size'] for b in blocks)
        b = Bench(a, d, model, expert_bytes)
        print(f'model: Mixtral layout, {a.quantize}, {manifest["config"]["n_layers"]} layers, hidden {a.hidden}, '
              f'{a.experts} experts top-{a.top_k}, FFN {a.ffn}: {len(blocks)} expert blocks, '
              f'{expert_bytes / 1e9:.2f} GB of experts ({expert_bytes / len(blocks) / 1e6:.1f} MB each), '
              f'dense {manifest["dense"]["size"] / 1e6:.1f} MB; 2 threads; {a.tokens} greedy tokens, '
              f'medians of {a.rounds} alternating runs; '
              f'load {os.getloadavg()[0]:.1f}\n', flush=True)
        if 'paths' in parts:
            rows = []
            for label, cache in (('all experts cached', expert_bytes * 2), ('cache = 1/4 of experts', expert_bytes // 4)):
                # The modes alternate, --rounds times: the disk's rate drifts from minute to minute.
                runs = [[b.engine_direct(cache), b.embedded(cache), *b.three_processes(cache, 'unix'),
                         *b.three_processes(cache, 'tcp')] for _ in range(a.rounds)]
                rows.append((label, *[statistics.median(r[m] for r in runs) for m in range(8)]))
            print('| expert cache | engine direct (tok/s) | colibri-server (tok/s) | 3 processes, unix + shm '
                  '(tok/s) | 3 processes, TCP (tok/s) | unix / embedded | TCP / embedded |')
            print('|---|---|---|---|---|---|---|')
            for label, cli, emb, unix, _, _, tcp, _, _ in rows:
                print(f'| {label} | {cli:.2f} | {emb:.2f} | {unix:.2f} | {tcp:.2f} | {unix / emb:.2f} | {tcp / emb:.2f} |')
            print('\nCPU of the three processes\' store and compute during the measured request (cores):\n')
            print('| expert cache | unix + shm: store | compute | TCP: store | compute |')
            print('|---|---|---|---|---|')
            for label, _, _, _, us, uc, _, ts, tc in rows:
                print(f'| {label} | {us:.2f} | {uc:.2f} | {ts:.2f} | {tc:.2f} |')
            print(flush=True)
        if 'scale' in parts:
            cache = expert_bytes // 8
            rows = [(n, *b.scaled(n, cache)) for n in range(1, a.max_stores + 1)]
            cap = a.store_mib_s * 2**20
            print(f'Store scale-out: one compute (cache = 1/8 of the experts), N stores over TCP, each '
                  f'disk capped at {a.store_mib_s} MiB/s ({cap / 1e6:.0f} MB/s); {a.scale_tokens} tokens\n')
            print('| stores | decode (tok/s) | of linear | delivered (MB/s) | of linear | of the caps |')
            print('|---|---|---|---|---|---|')
            for n, rate, bw in rows:
                print(f'| {n} | {rate:.2f} | {rate / (n * rows[0][1]):.2f} | {bw / 1e6:.0f} | '
                      f'{bw / (n * rows[0][2]):.2f} | {bw / (n * cap):.2f} |')
    finally:
        if not a.dir:
            testlib.rmtree(d)


if __name__ == '__main__':
    main()
