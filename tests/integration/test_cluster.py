"""Integration: the three services as separate processes on loopback ephemeral ports, against the
embedded colibri-server and the numpy reference, with an expert cache smaller than the model so
experts really stream from the store. Plus the clear-error paths users hit first.
"""
import json
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

PROMPT = [1, 275, 290, 300, 13, 350, 400, 268, 281, 450, 511, 32, 100, 269, 300, 301]
CACHE = '300K'  # three expert blocks of the micro model (each ~100 KiB); the model has 16


metric = testlib.metric


def start_cluster(cls, model, cache):
    """Starts (expert store, compute with an expert cache of `cache`, router, and an embedded
    colibri-server with the same cache) on `model` as the ServicesTestCase `cls`'s services."""
    store = cls.start('colibri-expert-store', ['--model', model, '--listen', '127.0.0.1:0', '--metrics-port', '0'],
                      ('--port-file', '--metrics-port-file'))
    compute = cls.start('colibri-compute', ['--model', model, '--store', f'127.0.0.1:{store.port()}',
                                            '--listen', '127.0.0.1:0', '--expert-cache-size', cache,
                                            '--metrics-port', '0', '--threads', '2'],
                        ('--port-file', '--metrics-port-file'))
    router = cls.start('colibri-router', ['--model', model, '--compute', f'127.0.0.1:{compute.port()}',
                                          '--port', '0', '--host', '127.0.0.1', '--grpc-listen', '127.0.0.1:0'],
                       ('--port-file', '--grpc-port-file'))
    server = cls.start('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1',
                                          '--expert-cache-size', cache, '--threads', '2'])
    return store, compute, router, server


class ClusterTest(testlib.ServicesTestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-cluster-')
        cls.hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), 'mixtral', 'micro', 'f32')
        cls.model = testlib.convert(cls.hf, os.path.join(cls.dir, 'demo'), 'f32')
        store, compute, router, server = start_cluster(cls, cls.model, CACHE)
        cls.store, cls.compute, cls.router, cls.server = store, compute, router, server
        cls.router_url = f'http://127.0.0.1:{router.port()}'
        cls.server_url = f'http://127.0.0.1:{server.port()}'

    def chat_on_fresh_server(self, body, extra=(), tag=None):
        """A chat completion from a colibri-server started for it alone (no KV from earlier requests)."""
        server = testlib.Service('colibri-server', ['--model', self.model, '--port', '0', '--host', '127.0.0.1',
                                                    '--threads', '2', *extra], self.dir, tag=tag)
        try:
            status, text = testlib.http('POST', f'http://127.0.0.1:{server.port()}/v1/chat/completions', body)
        finally:
            server.stop()
        self.assertEqual(status, 200, text)
        return json.loads(text)

    def stream_ids(self, base, path, body):
        events = testlib.sse_events(base + path, dict(body, stream=True, return_token_ids=True))
        self.assertEqual(events[-1], '[DONE]')
        ids, text, finish = [], '', None
        for e in events[:-1]:
            self.assertNotIn('error', e, e)
            for c in e['choices']:
                ids += c.get('token_ids', [])
                text += c['delta'].get('content', '') if 'delta' in c else c.get('text', '')
                finish = c.get('finish_reason') or finish
        return ids, text, finish

    def test_completion_token_ids_match_embedded_and_reference(self):
        body = {'model': 'demo', 'prompt': PROMPT, 'max_tokens': 24, 'temperature': 0}
        cluster_ids, cluster_text, _ = self.stream_ids(self.router_url, '/v1/completions', body)
        embedded_ids, embedded_text, _ = self.stream_ids(self.server_url, '/v1/completions', body)
        self.assertEqual(cluster_ids, embedded_ids)
        self.assertEqual(cluster_text, embedded_text)
        _, ref_ids, _ = testlib.reference(self.hf, PROMPT, 24, None)
        # The API stops at EOS (id 2); the reference runs on, so compare up to and including it.
        n = ref_ids.index(2) + 1 if 2 in ref_ids else len(ref_ids)
        self.assertEqual(cluster_ids, ref_ids[:n])
        # Experts really streamed through the store into a cache smaller than the model.
        status, text = testlib.http('GET', f'http://127.0.0.1:{self.compute.port("--metrics-port-file")}/metrics')
        self.assertEqual(status, 200)
        self.assertGreater(metric(text, 'colibri_compute_expert_cache_lookups_total', 'miss'), 16)
        self.assertGreater(metric(text, 'colibri_compute_expert_cache_evictions_total'), 0)
        status, text = testlib.http('GET', f'http://127.0.0.1:{self.store.port("--metrics-port-file")}/metrics')
        self.assertGreater(metric(text, 'colibri_store_bytes_served_total'), 16 * 98304)

    def test_streamed_chat_completion_same_on_cluster_and_embedded(self):
        body = {'model': 'demo', 'messages': [{'role': 'system', 'content': 'Be brief.'},
                                              {'role': 'user', 'content': 'Hello, world!'}],
                'max_tokens': 16, 'temperature': 0}
        c = self.stream_ids(self.router_url, '/v1/chat/completions', body)
        e = self.stream_ids(self.server_url, '/v1/chat/completions', body)
        self.assertEqual(c, e)
        self.assertGreater(len(c[0]), 0)
        self.assertIn(c[2], ('stop', 'length'))

    def test_non_streaming_chat_and_usage(self):
        body = {'model': 'demo', 'messages': [{'role': 'user', 'content': 'the world is big'}],
                'max_tokens': 5, 'temperature': 0, 'return_token_ids': True}
        status, text = testlib.http('POST', self.router_url + '/v1/chat/completions', body)
        self.assertEqual(status, 200, text)
        j = json.loads(text)
        self.assertEqual(j['object'], 'chat.completion')
        self.assertEqual(j['choices'][0]['message']['role'], 'assistant')
        self.assertEqual(j['usage']['completion_tokens'], len(j['choices'][0]['token_ids']))
        self.assertGreater(j['usage']['prompt_tokens'], 5)
        status, text = testlib.http('GET', self.router_url + '/v1/models')
        self.assertEqual(json.loads(text)['data'][0]['id'], 'demo')
        self.assertEqual(testlib.http('GET', self.router_url + '/health')[0], 200)

    def test_router_grpc_generate_from_python(self):
        """The example Python client (tools/router_client.py) streams the same tokens as HTTP."""
        port = self.router.port('--grpc-port-file')
        p = testlib.run([testlib.PY, os.path.join(testlib.REPO, 'tools', 'router_client.py'), '--target',
                         f'127.0.0.1:{port}', '--tokens', ','.join(map(str, PROMPT)), '--max-tokens', '12',
                         '--json'])
        got = json.loads(p.stdout)
        http_ids, http_text, _ = self.stream_ids(self.router_url, '/v1/completions',
                                                 {'prompt': PROMPT, 'max_tokens': 12, 'temperature': 0})
        self.assertEqual(got['token_ids'], http_ids)
        self.assertEqual(got['text'], http_text)
        self.assertEqual(got['usage']['completion_tokens'], len(http_ids))

    def test_router_grpc_session_from_python(self):
        """The session API through the example client: the router keeps the conversation, the second
        message reuses the first turn's KV, and the answers equal the HTTP chat of the same
        conversation."""
        port = self.router.port('--grpc-port-file')
        p = testlib.run([testlib.PY, os.path.join(testlib.REPO, 'tools', 'router_client.py'), '--target',
                         f'127.0.0.1:{port}', '--session', 'Hello there', '--session', 'What next?',
                         '--max-tokens', '6', '--json'])
        got = json.loads(p.stdout)
        self.assertTrue(got['session_id'].startswith('sess-'))
        self.assertEqual(got['messages'], 4)
        first, second = got['turns']
        self.assertGreaterEqual(second['usage']['cached_prompt_tokens'], first['usage']['prompt_tokens'] - 1)
        # The router's prefetch hints (on by default) warmed the session's experts before turn 2.
        compute_metrics = testlib.http('GET', f'http://127.0.0.1:{self.compute.port("--metrics-port-file")}/metrics')[1]
        self.assertGreater(metric(compute_metrics, 'colibri_compute_prefetch_hints_total'), 0)
        conversation = [{'role': 'user', 'content': 'Hello there'}]
        for turn, next_message in ((first, 'What next?'), (second, None)):
            status, text = testlib.http('POST', self.router_url + '/v1/chat/completions',
                                        {'messages': conversation, 'max_tokens': 6, 'temperature': 0,
                                         'return_token_ids': True})
            self.assertEqual(status, 200, text)
            self.assertEqual(json.loads(text)['choices'][0]['token_ids'], turn['token_ids'])
            conversation += [{'role': 'assistant', 'content': turn['text']}]
            if next_message:
                conversation.append({'role': 'user', 'content': next_message})

    def test_router_over_two_compute_nodes_keeps_conversations_and_fails_over(self):
        """colibri-router --compute A,B: each conversation's turns go to one node (its KV is there:
        turn 2 prefills only the new tokens), the conversations use both nodes, and when a node dies
        its conversations continue on the other one."""
        nodes, router = [], None
        try:
            for k in range(2):
                nodes.append(testlib.Service('colibri-compute', ['--model', self.model, '--listen', '127.0.0.1:0',
                                                                 '--metrics-port', '0', '--threads', '1'],
                                             self.dir, ('--port-file', '--metrics-port-file'), tag=f'pool-compute-{k}'))
            targets = ','.join(f'127.0.0.1:{n.port()}' for n in nodes)
            router = testlib.Service('colibri-router', ['--model', self.model, '--compute', targets, '--port', '0',
                                                        '--host', '127.0.0.1', '--grpc-listen', '127.0.0.1:0'],
                                     self.dir, ('--port-file', '--grpc-port-file'), tag='pool-router')
            url = f'http://127.0.0.1:{router.port()}/v1/chat/completions'
            conversations = {}
            for i in range(6):
                messages = [{'role': 'user', 'content': f'Question number {i}: why?'}]
                status, text = testlib.http('POST', url, {'messages': messages, 'max_tokens': 4, 'temperature': 0,
                                                          'user': f'user-{i}'})
                self.assertEqual(status, 200, text)
                first = json.loads(text)
                messages += [{'role': 'assistant', 'content': first['choices'][0]['message']['content']},
                             {'role': 'user', 'content': 'Go on.'}]
                status, text = testlib.http('POST', url, {'messages': messages, 'max_tokens': 4, 'temperature': 0,
                                                          'user': f'user-{i}'})
                self.assertEqual(status, 200, text)
                second = json.loads(text)
                self.assertGreaterEqual(second['usage']['prompt_tokens_details']['cached_tokens'],
                                        first['usage']['prompt_tokens'] - 1, i)
                conversations[i] = messages
            served = [metric(testlib.http('GET', f'http://127.0.0.1:{n.port("--metrics-port-file")}/metrics')[1],
                             'colibri_compute_requests_total') for n in nodes]
            self.assertEqual(sum(served), 12, served)
            self.assertTrue(all(v > 0 for v in served), served)
            nodes[0].kill()
            for i, messages in conversations.items():
                status, text = testlib.http('POST', url, {'messages': messages, 'max_tokens': 4, 'temperature': 0,
                                                          'user': f'user-{i}'})
                self.assertEqual(status, 200, f'conversation {i}: {text}')
        finally:
            for s in ([router] if router else []) + nodes:
                s.stop()

    def test_second_turn_prefills_only_new_tokens(self):
        """Turn 2 resends the whole history (as OpenAI clients do): compute reuses the KV of turn 1
        and the answer equals a cold run of the same conversation on a fresh server."""
        turn1 = [{'role': 'user', 'content': 'Where do rivers go?'}]
        first = None
        for url in (self.router_url, self.server_url):
            status, text = testlib.http('POST', url + '/v1/chat/completions',
                                        {'messages': turn1, 'max_tokens': 6, 'temperature': 0})
            self.assertEqual(status, 200, text)
            first = json.loads(text)
            # Only a shared start (BOS, the template's prefix) can come from other conversations:
            # the message itself is computed.
            self.assertLess(first['usage']['prompt_tokens_details']['cached_tokens'],
                            first['usage']['prompt_tokens'] - 5)
        turn2 = turn1 + [{'role': 'assistant', 'content': first['choices'][0]['message']['content']},
                         {'role': 'user', 'content': 'And then?'}]
        body = {'messages': turn2, 'max_tokens': 8, 'temperature': 0, 'return_token_ids': True}
        warm = {}
        for url in (self.router_url, self.server_url):
            status, text = testlib.http('POST', url + '/v1/chat/completions', body)
            self.assertEqual(status, 200, text)
            warm[url] = json.loads(text)
            cached = warm[url]['usage']['prompt_tokens_details']['cached_tokens']
            # At least the whole first prompt came from the KV pool.
            self.assertGreaterEqual(cached, first['usage']['prompt_tokens'] - 1)
            self.assertLess(cached, warm[url]['usage']['prompt_tokens'])
        cold = self.chat_on_fresh_server(body)
        self.assertEqual(cold['usage']['prompt_tokens_details']['cached_tokens'], 0)
        for w in warm.values():
            self.assertEqual(w['choices'][0]['token_ids'], cold['choices'][0]['token_ids'])

    def test_conversation_reopens_warm_after_a_restart(self):
        """--kv-persist-dir: a server stopped after turn 1 writes its KV caches; restarted, it answers
        turn 2 prefilling only the new tokens, with the tokens of a cold run. With --kv-offload-8bit
        the cache file is ~3.8x smaller and still reused (its tokens may differ, so not compared)."""
        turn1 = [{'role': 'user', 'content': 'Tell me about the sea.'}]
        sizes = {}
        answers = {}
        for mode, extra in (('f32', []), ('q8', ['--kv-offload-8bit'])):
            kv_dir = os.path.join(self.dir, f'kv-{mode}')
            args = ['--model', self.model, '--port', '0', '--host', '127.0.0.1', '--threads', '2',
                    '--kv-persist-dir', kv_dir, *extra]
            first_server = testlib.Service('colibri-server', args, self.dir, tag=f'persist-{mode}-1')
            try:
                status, text = testlib.http('POST', f'http://127.0.0.1:{first_server.port()}/v1/chat/completions',
                                            {'messages': turn1, 'max_tokens': 6, 'temperature': 0})
            finally:
                first_server.stop()
            self.assertEqual(status, 200, text)
            first = json.loads(text)
            files = [f for f in os.listdir(kv_dir) if f.endswith('.kv')]
            self.assertEqual(len(files), 1, os.listdir(kv_dir))
            sizes[mode] = os.path.getsize(os.path.join(kv_dir, files[0]))
            turn2 = turn1 + [{'role': 'assistant', 'content': first['choices'][0]['message']['content']},
                             {'role': 'user', 'content': 'And the mountains?'}]
            body = {'messages': turn2, 'max_tokens': 8, 'temperature': 0, 'return_token_ids': True}
            second_server = testlib.Service('colibri-server', args, self.dir, tag=f'persist-{mode}-2')
            try:
                base = f'http://127.0.0.1:{second_server.port()}'
                self.assertEqual(metric(testlib.http('GET', base + '/metrics')[1],
                                        'colibri_compute_kv_offload_entries', 'where="disk"'), 1)
                status, text = testlib.http('POST', base + '/v1/chat/completions', body)
                metrics_text = testlib.http('GET', base + '/metrics')[1]
            finally:
                second_server.stop()
            self.assertEqual(status, 200, text)
            answers[mode] = json.loads(text)
            cached = answers[mode]['usage']['prompt_tokens_details']['cached_tokens']
            self.assertGreaterEqual(cached, first['usage']['prompt_tokens'] - 1, mode)
            self.assertEqual(metric(metrics_text, 'colibri_compute_kv_restored_tokens_total'), cached, mode)
        cold = self.chat_on_fresh_server(body, tag='persist-cold')
        self.assertEqual(cold['usage']['prompt_tokens_details']['cached_tokens'], 0)
        self.assertEqual(answers['f32']['choices'][0]['token_ids'], cold['choices'][0]['token_ids'])
        self.assertGreater(sizes['f32'] / sizes['q8'], 3.0, sizes)

    def test_bad_requests_get_openai_errors(self):
        for url in (self.router_url, self.server_url):
            status, text = testlib.http('POST', url + '/v1/chat/completions', '{"messages": [')
            self.assertEqual(status, 400)
            self.assertIn('not valid JSON', json.loads(text)['error']['message'])
            status, text = testlib.http('POST', url + '/v1/chat/completions',
                                        {'model': 'nope', 'messages': [{'role': 'user', 'content': 'x'}]})
            self.assertEqual(status, 404)
            self.assertEqual(json.loads(text)['error']['type'], 'invalid_request_error')
            status, text = testlib.http('POST', url + '/v1/chat/completions', {'messages': 'x'})
            self.assertEqual(status, 400)
            self.assertIn("'messages'", json.loads(text)['error']['message'])
            status, text = testlib.http('POST', url + '/v1/completions', {'prompt': [1] * 5000})
            self.assertEqual(status, 400)
            self.assertIn('maximum context length', json.loads(text)['error']['message'])


DEEPSEEK = os.path.join(testlib.ORACLE, 'deepseek2', 'deepseek-grouped-micro-f32')


@unittest.skipUnless(os.path.isdir(DEEPSEEK), f'DeepSeek oracle not found at {DEEPSEEK}')
class DeepseekClusterTest(testlib.ServicesTestCase):
    """The grouped DeepSeek-V3 oracle model (latent attention, sigmoid routing with groups) with
    its experts streamed from the expert store into a compute cache of about 4 of its 64 blocks:
    the router's greedy tokens are the oracle's, and the embedded server's with the same cache."""

    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-cluster-deepseek-')
        cls.model = testlib.convert(DEEPSEEK, os.path.join(cls.dir, 'deepseek'), 'f32')
        store, compute, router, server = start_cluster(cls, cls.model, '100K')
        cls.store, cls.compute = store, compute
        cls.urls = {'cluster': f'http://127.0.0.1:{router.port()}', 'embedded': f'http://127.0.0.1:{server.port()}'}

    def test_greedy_tokens_are_the_oracles(self):
        with open(os.path.join(testlib.ORACLE, 'deepseek2', 'deepseek-grouped-micro-f32.p16.json')) as f:
            j = json.load(f)
        body = {'prompt': j['prompt_ids'], 'max_tokens': len(j['greedy_ids']), 'temperature': 0,
                'ignore_eos': True, 'return_token_ids': True}
        for label, url in self.urls.items():
            status, text = testlib.http('POST', url + '/v1/completions', body)
            self.assertEqual(status, 200, text)
            self.assertEqual(json.loads(text)['choices'][0]['token_ids'], j['greedy_ids'], label)
        status, text = testlib.http('GET', f'http://127.0.0.1:{self.compute.port("--metrics-port-file")}/metrics')
        self.assertGreater(metric(text, 'colibri_compute_expert_cache_lookups_total', 'miss'), 64)
        status, text = testlib.http('GET', f'http://127.0.0.1:{self.store.port("--metrics-port-file")}/metrics')
        self.assertGreater(metric(text, 'colibri_store_bytes_served_total'), 64 * 24576)


@unittest.skipUnless(os.path.isdir(testlib.ORACLE), f'peer oracle not found at {testlib.ORACLE}')
class GgufClusterTest(testlib.ServicesTestCase):
    """A downloaded GGUF in the cluster without a conversion: the expert store imports the file
    where it lies onto its two disks, compute and router read the same file (dense weights,
    tokenizer, the manifest derived from its header); compute's cache holds about three of its
    blocks. The router's greedy tokens are the embedded server's on the same file."""

    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-cluster-gguf-')
        os.makedirs(os.path.join(cls.dir, 'models'))
        gguf = os.path.join(cls.dir, 'models', 'tiny.gguf')
        os.symlink(os.path.join(testlib.ORACLE, 'mixtral-tiny-q4_k_m.gguf'), gguf)
        disks = []
        for i in range(2):
            disks += ['--disk', os.path.join(cls.dir, f'disk{i}')]
        testlib.run([testlib.binary('colibri-expert-store'), 'import', '--model', gguf, *disks])
        store = cls.start('colibri-expert-store', [*disks, '--listen', '127.0.0.1:0', '--metrics-port', '0'],
                          ('--port-file', '--metrics-port-file'))
        compute = cls.start('colibri-compute', ['--model', gguf, '--store', f'127.0.0.1:{store.port()}',
                                                '--listen', '127.0.0.1:0', '--expert-cache-size', '800K',
                                                '--metrics-port', '0', '--threads', '2'],
                            ('--port-file', '--metrics-port-file'))
        router = cls.start('colibri-router', ['--model', gguf, '--compute', f'127.0.0.1:{compute.port()}',
                                              '--port', '0', '--host', '127.0.0.1'])
        server = cls.start('colibri-server', ['--model', gguf, '--port', '0', '--host', '127.0.0.1',
                                              '--expert-cache-size', '800K', '--threads', '2'])
        cls.store = store
        cls.urls = {'cluster': f'http://127.0.0.1:{router.port()}', 'embedded': f'http://127.0.0.1:{server.port()}'}

    def test_greedy_tokens_are_the_embedded_servers(self):
        with open(os.path.join(testlib.ORACLE, 'mixtral-tiny-q4_k_m.p64.json')) as f:
            j = json.load(f)
        body = {'prompt': j['prompt_ids'], 'max_tokens': 24, 'temperature': 0, 'ignore_eos': True,
                'return_token_ids': True}
        got = {}
        for label, url in self.urls.items():
            status, text = testlib.http('POST', url + '/v1/completions', body)
            self.assertEqual(status, 200, text)
            got[label] = json.loads(text)['choices'][0]['token_ids']
        self.assertEqual(len(got['embedded']), 24)
        self.assertEqual(got['cluster'], got['embedded'])
        status, text = testlib.http('GET', f'http://127.0.0.1:{self.store.port("--metrics-port-file")}/metrics')
        self.assertGreater(metric(text, 'colibri_store_bytes_served_total'), 0)


class OverloadAndOutageTest(unittest.TestCase):
    """A full queue is 429 and a compute node that went away is 503, in OpenAI's error shape."""

    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-overload-')
        hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), 'mixtral', 'micro', 'f32')
        cls.model = testlib.convert(hf, os.path.join(cls.dir, 'm'), 'f32')

    @classmethod
    def tearDownClass(cls):
        testlib.rmtree(cls.dir)

    def test_queue_full_is_429(self):
        server = testlib.Service('colibri-server', ['--model', self.model, '--port', '0', '--host', '127.0.0.1',
                                                    '--max-queued', '0'], self.dir)
        try:
            status, text = testlib.http('POST', f'http://127.0.0.1:{server.port()}/v1/completions',
                                        {'prompt': [1, 2, 3], 'max_tokens': 2})
        finally:
            server.stop()
        self.assertEqual(status, 429, text)
        self.assertEqual(json.loads(text)['error']['type'], 'rate_limit_error')

    def test_compute_gone_is_503(self):
        compute = testlib.Service('colibri-compute', ['--model', self.model, '--listen', '127.0.0.1:0',
                                                      '--metrics-port', '-1'], self.dir)
        router = testlib.Service('colibri-router', ['--model', self.model, '--compute', f'127.0.0.1:{compute.port()}',
                                                    '--port', '0', '--host', '127.0.0.1',
                                                    '--grpc-listen', '127.0.0.1:0'], self.dir)
        try:
            url = f'http://127.0.0.1:{router.port()}/v1/completions'
            self.assertEqual(testlib.http('POST', url, {'prompt': [1, 2, 3], 'max_tokens': 2})[0], 200)
            compute.kill()
            status, text = testlib.http('POST', url, {'prompt': [1, 2, 3], 'max_tokens': 2})
        finally:
            router.stop()
            compute.stop()
        self.assertEqual(status, 503, text)
        self.assertEqual(json.loads(text)['error']['type'], 'server_error')


class KeepAliveTest(unittest.TestCase):
    """SSE comments flow while a long prompt prefills, and the answer still arrives whole."""

    def test_keepalive_comments_during_prefill(self):
        d = testlib.tempdir('colibri-keepalive-')
        server = None
        try:
            hf = testlib.gen_model(os.path.join(d, 'hf'), 'mixtral', 'micro', 'f32')
            model = testlib.convert(hf, os.path.join(d, 'm'), 'f32')
            server = testlib.Service('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1',
                                                        '--sse-keepalive-ms', '1', '--threads', '1'], d)
            import urllib.request
            body = {'prompt': [1] + [300 + i % 200 for i in range(3000)], 'max_tokens': 4, 'temperature': 0,
                    'stream': True}
            req = urllib.request.Request(f'http://127.0.0.1:{server.port()}/v1/completions',
                                         data=json.dumps(body).encode(), headers={'Content-Type': 'application/json'})
            comments, data = 0, []
            with urllib.request.urlopen(req, timeout=300) as r:
                for raw in r:
                    line = raw.decode().rstrip('\n')
                    comments += line.startswith(':')
                    if line.startswith('data: '):
                        data.append(line[6:])
            self.assertGreater(comments, 0)
            self.assertEqual(data[-1], '[DONE]')
            self.assertEqual(json.loads(data[-2])['choices'][0]['finish_reason'], 'length')
        finally:
            if server:
                server.stop()
            testlib.rmtree(d)


class BadModelTest(unittest.TestCase):
    """Missing and corrupt model directories fail with messages that name the problem."""

    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-badmodel-')
        cls.hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), 'mixtral', 'micro', 'f32')
        cls.model = testlib.convert(cls.hf, os.path.join(cls.dir, 'good'), 'f32')

    @classmethod
    def tearDownClass(cls):
        testlib.rmtree(cls.dir)

    def test_missing_model_directory(self):
        p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', os.path.join(self.dir, 'nope'),
                         '--prompt-tokens', '1'], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('does not exist', p.stderr)

    def test_not_a_model_directory(self):
        p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', self.hf, '--prompt-tokens', '1'],
                        check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('manifest.json is missing', p.stderr)

    def test_corrupt_expert_block_is_named_and_never_used(self):
        bad = os.path.join(self.dir, 'corrupt')
        shutil.copytree(self.model, bad)
        manifest = json.load(open(os.path.join(bad, 'manifest.json')))
        block = next(b for b in manifest['experts']['blocks'] if b['layer'] == 1 and b['expert'] == 3)
        with open(os.path.join(bad, 'experts.bin'), 'r+b') as f:
            f.seek(block['offset'] + 100)
            byte = f.read(1)
            f.seek(block['offset'] + 100)
            f.write(bytes([byte[0] ^ 0xFF]))
        p = testlib.run([testlib.binary('colibri-cli'), 'verify', '--model', bad], check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn('expert (layer 1, id 3)', p.stdout)
        self.assertIn('checksum mismatch', p.stdout)
        self.assertEqual(p.stdout.count('BAD '), 1)
        self.assertEqual(testlib.run([testlib.binary('colibri-cli'), 'verify', '--model', self.model]).returncode, 0)
        # Running the corrupt model: either routing never touches the block, or it fails with DataLoss.
        p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', bad, '--prompt-tokens',
                         ','.join(str(t) for t in range(1, 200)), '--max-tokens', '4'], check=False)
        if p.returncode != 0:
            self.assertIn('checksum mismatch', p.stderr)
            self.assertIn('expert (layer 1, id 3)', p.stderr)

    def test_truncated_expert_file(self):
        bad = os.path.join(self.dir, 'truncated')
        shutil.copytree(self.model, bad)
        path = os.path.join(bad, 'experts.bin')
        os.truncate(path, os.path.getsize(path) - 8192)
        p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', bad, '--prompt-tokens', '1'], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('truncated', p.stderr)


if __name__ == '__main__':
    unittest.main()
