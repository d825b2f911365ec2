#!/usr/bin/python3
"""Speculative decoding per drafter, disk-bound and fully cached, measured in one run.

    bench/speculative_bench.py [--preset demo] [--layers 8] [--quantize q8_0] [--tokens 96]

A Mixtral-shaped generated model (gen_tiny_model.py), colibri-cli run per configuration: the expert
cache holding 1/4 of the experts (O_DIRECT reads: disk-bound) and holding all of them; per drafter
(--speculative off, ngram, self with --draft-experts q2_k and q8_0, auto with and without the
self drafter), each run --repeats times in turn, the median tok/s reported:
decode tok/s, speed-up over off, acceptance, tokens per verify pass, expert bytes read per
generated token. The disk-bound limit of plain decoding is the disk's random O_DIRECT block read
rate (testlib.disk_read_rate: colibri-cli plan's probe) over off's bytes per token. Prints a markdown table and the load average.

A second table runs colibri-server with off and auto (each drafter) and measures requests 3 onwards of
each server process (--server-requests): there auto starts from the costs the engine measured on
earlier requests, where a one-request colibri-cli run pays its exploration inside the request.

The MTP drafter needs a model with an MTP/NextN layer, which gen_tiny_model.py does not write: a third
table runs the GLM-4.5 micro model of the oracle directory (testlib.ORACLE; random weights, all experts
cached) with --speculative off, mtp and auto (which picks the MTP layer there).
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests'))
import testlib  # noqa: E402

RATE = re.compile(r'tokens in [\d.]+ s \(([\d.]+) tok/s\).*?(\d+) expert bytes read')
SPEC = re.compile(r'speculative: (\d+) verify passes, (\d+) of (\d+) drafted tokens accepted')

DRAFTERS = (
    ('off', ('--speculative', 'off')),
    ('ngram', ('--speculative', 'ngram')),
    ('self (q2_k experts)', ('--speculative', 'self', '--draft-experts', 'q2_k')),
    ('self (q8_0 experts)', ('--speculative', 'self', '--draft-experts', 'q8_0')),
    ('auto (n-gram)', ('--speculative', 'auto')),
    ('auto (self, q2_k)', ('--speculative', 'auto', '--draft-experts', 'q2_k')),
    ('auto (self, q8_0)', ('--speculative', 'auto', '--draft-experts', 'q8_0')),
)


def run(model, prompt, tokens, cache, draft_max, extra):
    p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', model, '--prompt-tokens',
                     ','.join(map(str, prompt)), '--max-tokens', str(tokens), '--temperature', '0', '--ignore-eos',
                     '--expert-cache-size', str(cache), '--warm-start', 'off', '--threads', '2',
                     '--draft-max', str(draft_max), *extra])
    out = p.stdout + p.stderr
    rate, read = RATE.search(out).groups()
    spec = SPEC.search(out)
    passes, accepted, drafted = (int(x) for x in spec.groups()) if spec else (0, 0, 0)
    return {'tok_s': float(rate), 'read': int(read) / tokens, 'passes': passes, 'accepted': accepted,
            'drafted': drafted, 'ids': json.loads(p.stdout.strip().splitlines()[-1])}


MTP_DRAFTERS = (
    ('off', ('--speculative', 'off')),
    ('mtp', ('--speculative', 'mtp')),
    ('auto (mtp)', ('--speculative', 'auto')),
)


def table_rows(model, prompt, a, label, cache, drafters):
    """Runs every drafter a.repeats times in turn (so that load changes hit every drafter alike) and
    prints one row each of their medians; returns off's."""
    runs = {name: [] for name, _ in drafters}
    for _ in range(a.repeats):
        for name, extra in drafters:
            runs[name].append(run(model, prompt, a.tokens, cache, a.draft_max, extra))
    base = None
    for name, _ in drafters:
        rs = sorted(runs[name], key=lambda r: r['tok_s'])
        r = rs[len(rs) // 2]
        base = base or r
        acc = f'{100 * r["accepted"] / r["drafted"]:.0f}%' if r['drafted'] else '-'
        tpp = f'{(r["accepted"] + r["passes"]) / r["passes"]:.2f}' if r['passes'] else '-'
        print(f'| {label} | {name} | {r["tok_s"]:.1f} | {r["tok_s"] / base["tok_s"]:.2f}x | {acc} | {tpp} | '
              f'{r["read"] / 1024:.0f} KiB | {"yes" if r["ids"] == base["ids"] else "NO"} |')
    return base


HEADER = ('| expert cache | drafter | tok/s | vs off | acceptance | tokens/pass | expert bytes read/token |'
          ' same tokens |\n|---|---|---|---|---|---|---|---|')


SERVER_DRAFTERS = (
    ('off', ('--speculative', 'off')),
    ('auto (n-gram)', ('--speculative', 'auto')),
    ('auto (self, q2_k)', ('--speculative', 'auto', '--draft-experts', 'q2_k')),
    ('auto (self, q8_0)', ('--speculative', 'auto', '--draft-experts', 'q8_0')),
)


def server_rows(d, model, prompt, a, label, cache):
    """A colibri-server per drafter and repeat, each sent --server-requests requests of a.tokens greedy
    tokens (the same prompt but its first token): the median decode rate of every request after the
    first two, i.e. what auto does once the engine has measured its pass, drafting and catch-up costs on
    earlier requests (a fresh `colibri-cli run` pays that exploration inside its one request)."""
    base = None
    for name, extra in SERVER_DRAFTERS:
        rates, ids = [], None
        for _ in range(a.repeats):
            s = testlib.Service('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1',
                                                   '--expert-cache-size', str(cache), '--warm-start', 'off',
                                                   '--threads', '2', '--draft-max', str(a.draft_max), *extra],
                                d, tag='server')
            try:
                url = f'http://127.0.0.1:{s.port()}'
                for i in range(a.server_requests):
                    rate, _, _, got = testlib.stream_decode_rate(url, [2 + i] + prompt[1:], a.tokens)
                    if i >= 2:
                        rates.append(rate)
                ids = got
            finally:
                s.stop()
        rate = sorted(rates)[len(rates) // 2]
        base = base or (rate, ids)
        print(f'| {label} | {name} | {rate:.1f} | {rate / base[0]:.2f}x | {"yes" if ids == base[1] else "NO"} |')


def mtp_table(d, a):
    src = os.path.join(testlib.ORACLE, 'glm4moe', 'glm4moe-micro-f32')
    if not os.path.isdir(src):
        print(f'\n(no MTP table: no GLM-4.5 oracle model at {src})')
        return
    model = testlib.convert(src, os.path.join(d, 'glm'), 'f32')
    prompt = [1] + list(range(300, 315)) + list(range(300, 308))
    print(f'\nmodel: glm4moe micro (oracle, random weights, with its NextN layer), f32; '
          f'{a.tokens} greedy tokens, draft max {a.draft_max}, 2 threads\n')
    print(HEADER)
    table_rows(model, prompt, a, 'all experts', 1 << 30, MTP_DRAFTERS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--preset', default='demo')
    ap.add_argument('--layers', type=int, default=8)
    ap.add_argument('--quantize', default='q8_0')
    ap.add_argument('--tokens', type=int, default=96)
    ap.add_argument('--draft-max', type=int, default=4)
    ap.add_argument('--repeats', type=int, default=2)
    ap.add_argument('--server-requests', type=int, default=8,
                    help='server table: requests per server process (the first two not measured)')
    a = ap.parse_args()
    d = testlib.tempdir('colibri-speculative-bench-')
    try:
        hf = testlib.gen_model(os.path.join(d, 'hf'), 'mixtral', a.preset, 'f32', extra=('--layers', str(a.layers)))
        model = testlib.convert(hf, os.path.join(d, 'bench'), a.quantize)
        manifest = json.load(open(os.path.join(model, 'manifest.json')))
        blocks = manifest['experts']['blocks']
        expert_bytes = sum(b['padded_size'] for b in blocks)
        disk = testlib.disk_read_rate(model)
        prompt = [1] + list(range(300, 315)) + list(range(300, 308))
        print(f'model: mixtral {a.preset}, {a.layers} layers, {a.quantize}, {len(blocks)} expert blocks, '
              f'{expert_bytes / 2**20:.1f} MiB of experts; {a.tokens} greedy tokens, draft max {a.draft_max}, '
              f'2 threads; O_DIRECT random block reads {disk / 1e9:.2f} GB/s; load average {os.getloadavg()[0]:.1f}\n')
        print(HEADER)
        for label, cache in (('1/4 of experts (disk-bound)', expert_bytes // 4), ('all experts', expert_bytes * 2)):
            base = table_rows(model, prompt, a, label, cache, DRAFTERS)
            if label.startswith('1/4') and base['read'] > 0 and disk > 0:
                print(f'| {label} | disk-bound limit of off (disk read rate / bytes per token) | {disk / base["read"]:.1f} |'
                      ' | | | | |')
        print(f'\ncolibri-server: requests 3-{a.server_requests} of each server (decode rate between a request\'s'
              f' first and last streamed token; the median over {a.repeats} servers per drafter):\n')
        print('| expert cache | drafter | tok/s | vs off | same tokens |\n|---|---|---|---|---|')
        for label, cache in (('1/4 of experts (disk-bound)', expert_bytes // 4), ('all experts', expert_bytes * 2)):
            server_rows(d, model, prompt, a, label, cache)
        mtp_table(d, a)
        print(f'\nload average after: {os.getloadavg()[0]:.1f}')
    finally:
        testlib.rmtree(d)


if __name__ == '__main__':
    main()
