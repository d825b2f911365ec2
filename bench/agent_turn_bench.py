#!/usr/bin/python3
"""An agent's second turn against its first (issue 35 item 9): a Claude-Code-sized conversation
(--system-tokens of system prompt and 24 tools with JSON schemas) sent to colibri-server's
/v1/messages as Claude Code sends it, then the same conversation plus the model's answer and a
new user message, as the agent's next request. Each request is timed whole with max_tokens 1
(the time is the prefill), with the prompt tokens it reported as read from the cache
(usage.cache_read_input_tokens). The model is the micro test model with GLM-4.5's template (its
context raised to hold the conversation), so the figures are the server's prefill and reuse
mechanics, not a large model's FLOPs.

    bench/agent_turn_bench.py [--system-tokens 20000] [--turns 3]

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

WORDS = ('file read write edit search grep glob bash run test build commit diff patch path line '
         'tool call result error output input agent task plan step check user code repo branch').split()


def tools(rng):
    out = []
    for i in range(24):
        props = {f'arg{j}': {'type': rng.choice(['string', 'integer', 'boolean']),
                             'description': ' '.join(rng.choice(WORDS) for _ in range(12))}
                 for j in range(6)}
        out.append({'name': f'tool_{i}', 'description': ' '.join(rng.choice(WORDS) for _ in range(60)),
                    'input_schema': {'type': 'object', 'properties': props, 'required': ['arg0']}})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--system-tokens', type=int, default=20000)
    ap.add_argument('--turns', type=int, default=3)
    a = ap.parse_args()
    rng = random.Random(5)
    work = testlib.tempdir('colibri-agent-bench-')
    model = testlib.tool_model(work, 'agent', context=4 * a.system_tokens + 8192)
    server = testlib.Service('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1',
                                                '--threads', '2'], work, tag='agent-bench')
    try:
        url = f'http://127.0.0.1:{server.port()}/v1/messages'
        system = [{'type': 'text', 'text': ' '.join(rng.choice(WORDS) for _ in range(a.system_tokens // 2)),
                   'cache_control': {'type': 'ephemeral'}}]
        body = {'model': 'agent', 'max_tokens': 1, 'system': system, 'tools': tools(rng),
                'messages': [{'role': 'user', 'content': 'List the files here.'}]}
        rows = []
        for turn in range(1, a.turns + 1):
            t0 = time.time()
            status, text = testlib.http('POST', url, body, timeout=600)
            seconds = time.time() - t0
            if status != 200:
                raise RuntimeError(text)
            reply = json.loads(text)
            usage = reply['usage']
            total = usage['input_tokens'] + usage.get('cache_read_input_tokens', 0)
            rows.append((turn, total, usage.get('cache_read_input_tokens', 0), usage['input_tokens'], seconds))
            text = ''.join(b.get('text', '') for b in reply['content'] if b['type'] == 'text') or 'ok'
            body['messages'] += [{'role': 'assistant', 'content': text},
                                 {'role': 'user', 'content': f'Now run the tests for step {turn}.'}]
    finally:
        server.stop()
        testlib.rmtree(work)
    print(f'CPU: {testlib.cpu_name()}; micro model, GLM-4.5 template, 2 threads; load '
          f'{os.getloadavg()[0]:.2f}\n')
    print('| CPU | turn | prompt tokens | read from cache | prefilled | request seconds | vs turn 1 |')
    print('|---|---|---|---|---|---|---|')
    for turn, total, cached, new, seconds in rows:
        print(f'| {testlib.cpu_name()} | {turn} | {total} | {cached} | {new} | {seconds:.3f} | '
              f'{seconds / rows[0][4]:.3f} |')


if __name__ == '__main__':
    main()
