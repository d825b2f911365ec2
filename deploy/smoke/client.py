"""The HTTP side of deploy/smoke.sh: requests through the router and questions to Prometheus.

Usage: client.py COMMAND ARGS...   (/usr/bin/python3, standard library only)
  health URL                        exit 0 when URL answers 200
  ask ROUTER IDS                    a chat completion and a completion of the token ids IDS
                                    (comma-separated), both greedy; prints their token ids as JSON
  chat ROUTER MESSAGES MAX_TOKENS [RETRY_S]
                                    one greedy chat completion of MESSAGES (a JSON list); prints
                                    the response. RETRY_S: resend while the router answers 503
                                    (compute not reachable yet), for up to RETRY_S seconds
  load ROUTER IDS OUT STOP          two clients sending greedy completions back to back until the
                                    file STOP exists; keeps the number of answers so far in
                                    OUT.count, then writes every request's start, end and outcome
                                    to OUT (JSON)
  load-report OUT T0 T1             checks OUT: no request failed, at least one was in flight
                                    between T0 and T1 (epoch seconds) and some finished after T1
  promql PROM EXPR [TIME]           prints the first value of the instant query EXPR at TIME
                                    (epoch seconds; default now), or nothing
  targets PROM JOB=COUNT...         exit 0 when every active target is up and each JOB has COUNT
  rules PROM RECORD...              exit 0 when every rule evaluates without error and each
                                    recording rule RECORD has a value
Exit 1 with the reason on stderr when a check fails.
"""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


def fail(msg):
    print(f'client.py: {msg}', file=sys.stderr)
    sys.exit(1)


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def post(base, path, body, timeout=120):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def health(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            sys.exit(0 if r.status == 200 else 1)
    except (OSError, urllib.error.URLError) as e:
        fail(f'{url}: {e}')


def ask(base, ids):
    ids = [int(x) for x in ids.split(',')]
    chat = post(base, '/v1/chat/completions', {
        'messages': [{'role': 'user', 'content': 'Why is the sky blue?'}],
        'max_tokens': 12, 'temperature': 0, 'return_token_ids': True})
    c = chat['choices'][0]
    if chat['object'] != 'chat.completion' or c['message']['role'] != 'assistant':
        fail(f'not a chat completion: {chat}')
    if not chat['usage']['completion_tokens'] == len(c['token_ids']) > 0:
        fail(f'usage does not match the tokens: {chat}')
    comp = post(base, '/v1/completions', {'prompt': ids, 'max_tokens': 16, 'temperature': 0,
                                          'return_token_ids': True})
    print(json.dumps({'chat': c['token_ids'], 'completion': comp['choices'][0]['token_ids']}))


def chat(base, messages, max_tokens, retry_s='0'):
    body = {'messages': json.loads(messages), 'max_tokens': int(max_tokens), 'temperature': 0,
            'return_token_ids': True}
    deadline = time.monotonic() + float(retry_s)
    unavailable = 0
    while True:
        try:
            res = post(base, '/v1/chat/completions', body)
            break
        except urllib.error.HTTPError as e:
            if e.code != 503 or time.monotonic() >= deadline:
                fail(f'chat: HTTP {e.code}: {e.read().decode(errors="replace")}')
            unavailable += 1
            time.sleep(0.5)
    res['smoke_unavailable_answers'] = unavailable
    print(json.dumps(res))


def load(base, ids, out, stop):
    ids = [int(x) for x in ids.split(',')]
    records, lock = [], threading.Lock()

    def client(k):
        i = k
        while not os.path.exists(stop):
            prompt = ids[i % len(ids):] + ids[:i % len(ids)]  # rotations: not one cached prompt
            i += 2
            t0 = time.time()
            try:
                res = post(base, '/v1/completions', {'prompt': prompt, 'max_tokens': 8, 'temperature': 0})
                outcome = 'ok' if res['usage']['completion_tokens'] > 0 else f'no tokens: {res}'
            except urllib.error.HTTPError as e:
                outcome = f'HTTP {e.code}: {e.read().decode(errors="replace")[:200]}'
            except (OSError, KeyError, ValueError) as e:
                outcome = f'{type(e).__name__}: {e}'
            with lock:
                records.append({'start': t0, 'end': time.time(), 'outcome': outcome})
                with open(out + '.count.tmp', 'w') as f:
                    f.write(str(len(records)))
                os.replace(out + '.count.tmp', out + '.count')

    threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(out, 'w') as f:
        json.dump(records, f)


def load_report(out, t0, t1):
    t0, t1 = float(t0), float(t1)
    with open(out) as f:
        records = json.load(f)
    failed = [r for r in records if r['outcome'] != 'ok']
    during = [r for r in records if r['start'] < t1 and r['end'] > t0]
    after = [r for r in records if r['start'] >= t1]
    print(f'{len(records)} requests, {len(failed)} failed, {len(during)} in flight during the removal '
          f'({t1 - t0:.1f} s), {len(after)} sent after it')
    if failed:
        fail(f'{len(failed)} requests failed, first: {failed[0]}')
    if not during:
        fail('no request was in flight while the store was removed')
    if len(after) < 4:
        fail(f'only {len(after)} requests after the removal')


def promql(prom, expr, at=None):
    params = {'query': expr} if at is None else {'query': expr, 'time': at}
    res = get_json(prom + '/api/v1/query?' + urllib.parse.urlencode(params))['data']['result']
    print(res[0]['value'][1] if res else '')


def targets(prom, *expected):
    active = get_json(prom + '/api/v1/targets?state=active')['data']['activeTargets']
    down = [f"{t['labels']['job']} {t['labels']['instance']}: {t['health']} {t.get('lastError', '')}"
            for t in active if t['health'] != 'up']
    if down:
        fail(f'targets not up: {down}')
    counts = {}
    for t in active:
        counts[t['labels']['job']] = counts.get(t['labels']['job'], 0) + 1
    want = {e.split('=')[0]: int(e.split('=')[1]) for e in expected}
    if counts != want:
        fail(f'targets by job {counts}, expected {want}')
    print(' '.join(f'{j}={n}' for j, n in sorted(counts.items())))


def rules(prom, *records):
    groups = get_json(prom + '/api/v1/rules')['data']['groups']
    all_rules = [r for g in groups for r in g['rules']]
    bad = [f"{r['name']}: {r.get('health')} {r.get('lastError', '')}" for r in all_rules
           if r.get('health') != 'ok' or r.get('lastError')]
    if not all_rules:
        fail('Prometheus has no rules loaded')
    if bad:
        fail(f'rules failing: {bad}')
    names = {r['name'] for r in all_rules if r['type'] == 'recording'}
    empty = []
    for name in records:
        if name not in names:
            fail(f'no recording rule {name} (loaded: {sorted(names)})')
        res = get_json(prom + '/api/v1/query?' + urllib.parse.urlencode({'query': name}))['data']['result']
        if not res:
            empty.append(name)
    if empty:
        fail(f'recording rules without a value: {empty}')
    kinds = [r['type'] for r in all_rules]
    print(f"{kinds.count('recording')} recording and {kinds.count('alerting')} alerting rules ok; "
          f'{len(records)} recorded series present')


COMMANDS = {'health': health, 'ask': ask, 'chat': chat, 'load': load, 'load-report': load_report,
            'promql': promql, 'targets': targets, 'rules': rules}

if __name__ == '__main__':
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        fail(f'expected a command of {sorted(COMMANDS)} (see the header)')
    try:
        COMMANDS[sys.argv[1]](*sys.argv[2:])
    except TypeError as e:
        fail(f'{sys.argv[1]}: wrong arguments ({e}); see the header')
    except (OSError, urllib.error.URLError, KeyError, ValueError) as e:
        fail(f'{sys.argv[1]}: {type(e).__name__}: {e}')
