"""The official `@anthropic-ai/sdk` npm client (1.x, on Node 20) against colibri-server's Messages
API (POST /v1/messages): blocking and streamed messages, stop sequences, usage, the ignore_eos /
min_tokens extensions, a tool loop (tools, tool_use answered by tool_result, the next turn) and
Anthropic-shaped errors, with the key in x-api-key. The server runs with
two --served-model-name aliases, which /v1/models lists and both APIs accept. The package is
installed at test time outside the repository; the test skips when npm cannot reach its registry.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = 'sekret'


class AnthropicClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.modules = testlib.npm_modules('anthropic', '@anthropic-ai/sdk@1')
        if cls.modules is None:
            raise unittest.SkipTest('npm could not install @anthropic-ai/sdk (offline?)')
        cls.dir = testlib.tempdir('colibri-anthropic-')
        hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), 'mixtral', 'micro', 'f32')
        cls.model = testlib.convert(hf, os.path.join(cls.dir, 'demo'), 'q8_0')
        cls.server = testlib.Service('colibri-server', [
            '--model', cls.model, '--port', '0', '--host', '127.0.0.1', '--api-key', KEY, '--threads', '2',
            '--served-model-name', 'claude-test,demo-alias'], cls.dir)
        cls.url = f'http://127.0.0.1:{cls.server.port()}'

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        testlib.rmtree(cls.dir)

    def post(self, path, body, headers=None):
        status, text = testlib.http('POST', self.url + path, body,
                                    dict({'Authorization': f'Bearer {KEY}'}, **(headers or {})))
        return status, json.loads(text)

    def test_official_client(self):
        p = testlib.run_node(self.modules, os.path.join(HERE, 'anthropic', 'client_test.mjs'), self.url, KEY,
                             'demo-alias')
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = json.loads(p.stdout.strip().splitlines()[-1])
        m = out['message']
        self.assertTrue(m['id'].startswith('msg_'), m)
        self.assertEqual((m['type'], m['role'], m['blocks']), ('message', 'assistant', ['text']))
        self.assertEqual(m['model'], 'claude-test')  # the first served name, whichever alias was asked for
        self.assertIn(m['stop_reason'], ('end_turn', 'max_tokens'))
        self.assertIsNone(m['stop_sequence'])
        self.assertGreater(m['usage']['input_tokens'], 5)
        self.assertLessEqual(m['usage']['output_tokens'], 8)
        # Streaming (the SDK's own event parser) gives the blocking call's text (greedy), in order.
        s = out['stream']
        self.assertEqual(s['text'], m['text'])
        self.assertEqual(s['final_text'], m['text'])
        self.assertEqual(s['stop_reason'], m['stop_reason'])
        self.assertEqual(s['usage']['output_tokens'], m['usage']['output_tokens'])
        self.assertEqual(s['events'][:2], ['message_start', 'content_block_start'])
        self.assertEqual(s['events'][-3:], ['content_block_stop', 'message_delta', 'message_stop'])
        self.assertIn('content_block_delta', s['events'])
        self.assertLessEqual(out['blocks']['output_tokens'], 4)
        # ignore_eos + min_tokens: exactly max_tokens tokens.
        self.assertEqual(out['ignore_eos']['output_tokens'], 12)
        self.assertEqual(out['ignore_eos']['stop_reason'], 'max_tokens')
        # The stop sequence cut the same text at its first occurrence, and is named.
        st = out['stop']
        self.assertEqual(st['stop_reason'], 'stop_sequence')
        self.assertEqual(st['stop_sequence'], st['stop'])
        full = out['ignore_eos']['text']
        self.assertEqual(st['text'], full[:full.index(st['stop'])])
        # Errors in Anthropic's shape, with its types.
        self.assertEqual(out['unknown_model']['status'], 404)
        self.assertEqual(out['unknown_model']['type'], 'not_found_error')
        self.assertIn('claude-test', out['unknown_model']['message'])
        for name, field in (('bad_temperature', 'temperature'), ('no_max_tokens', 'max_tokens'),
                            ('bad_min_tokens', 'min_tokens'), ('image', 'content')):
            self.assertEqual(out[name]['status'], 400, out[name])
            self.assertEqual(out[name]['type'], 'invalid_request_error', out[name])
            self.assertIn(field, out[name]['message'])
        # The tool loop's next turn runs, whole and streamed alike (greedy).
        loop = out['tool_loop']
        self.assertIn(loop['stop_reason'], ('end_turn', 'max_tokens', 'tool_use'))
        self.assertEqual(loop['streamed_text'], loop['text'])
        self.assertGreater(loop['input_tokens'], 5)
        # A forced tool call on a model whose template writes no tool calls is refused by name
        # (test_structured_output forces calls on a model that has a call format).
        self.assertEqual(out['forced_tool']['status'], 400, out['forced_tool'])
        self.assertIn('tool_choice', out['forced_tool']['message'])
        self.assertIn('no tool-call format', out['forced_tool']['message'])
        self.assertEqual(out['bad_key']['status'], 401)
        self.assertEqual(out['bad_key']['type'], 'authentication_error')

    def test_served_names_on_the_openai_routes(self):
        status, text = testlib.http('GET', self.url + '/v1/models', headers={'x-api-key': KEY})
        self.assertEqual(status, 200, text)
        self.assertEqual([m['id'] for m in json.loads(text)['data']], ['claude-test', 'demo-alias'])
        for name in ('claude-test', 'demo-alias'):
            status, body = self.post('/v1/chat/completions', {
                'model': name, 'max_tokens': 5, 'temperature': 0, 'ignore_eos': True,
                'messages': [{'role': 'user', 'content': 'Hi'}]})
            self.assertEqual(status, 200, body)
            self.assertEqual(body['model'], 'claude-test')
            self.assertEqual(body['usage']['completion_tokens'], 5)  # ignore_eos: never an early stop
            self.assertEqual(body['choices'][0]['finish_reason'], 'length')
        status, body = self.post('/v1/chat/completions', {'model': 'demo', 'messages': [{'role': 'user', 'content': 'x'}]})
        self.assertEqual(status, 404, body)  # the model's own name is replaced by the served ones
        status, body = self.post('/v1/completions', {'prompt': 'The sea', 'max_tokens': 3, 'min_tokens': 4})
        self.assertEqual(status, 400, body)
        self.assertIn("'min_tokens'", body['error']['message'])

    def test_count_tokens_tokenize_and_model_routes(self):
        # (Not the SDK test's prompt: its KV would be reused there, and its input counted as cached.)
        body = {'model': 'claude-test', 'max_tokens': 3, 'temperature': 0, 'system': 'Be short.',
                'messages': [{'role': 'user', 'content': 'Describe the river.'}]}
        status, message = self.post('/v1/messages', body)
        self.assertEqual(status, 200, message)
        del body['max_tokens']
        status, counted = self.post('/v1/messages/count_tokens', body)
        self.assertEqual(status, 200, counted)
        self.assertEqual(counted, {'input_tokens': message['usage']['input_tokens'] +
                                   message['usage']['cache_read_input_tokens']})
        status, counted = self.post('/v1/messages/count_tokens', {'messages': 'x'})
        self.assertEqual(status, 400, counted)
        self.assertEqual(counted['type'], 'error')  # Anthropic's error shape on its route
        # llama-server's /tokenize and /detokenize: a round trip.
        status, t = self.post('/tokenize', {'content': 'The sea is calm.', 'with_pieces': True})
        self.assertEqual(status, 200, t)
        ids = [p['id'] for p in t['tokens']]
        self.assertEqual(''.join(p['piece'] for p in t['tokens']).strip(), 'The sea is calm.')
        status, plain = self.post('/tokenize', {'content': 'The sea is calm.'})
        self.assertEqual(plain['tokens'], ids)
        status, d = self.post('/detokenize', {'tokens': ids})
        self.assertEqual((status, d['content'].strip()), (200, 'The sea is calm.'))
        status, bad = self.post('/detokenize', {'tokens': [10 ** 9]})
        self.assertEqual(status, 400, bad)
        # One model by name.
        status, text = testlib.http('GET', self.url + '/v1/models/demo-alias', headers={'x-api-key': KEY})
        self.assertEqual((status, json.loads(text)['id']), (200, 'demo-alias'))
        status, text = testlib.http('GET', self.url + '/v1/models/nope', headers={'x-api-key': KEY})
        self.assertEqual(status, 404, text)

    def test_messages_route_is_guarded_like_the_others(self):
        body = {'model': 'claude-test', 'max_tokens': 2, 'messages': [{'role': 'user', 'content': 'x'}]}
        status, text = testlib.http('POST', self.url + '/v1/messages', body)  # no key
        self.assertEqual(status, 401)
        self.assertEqual(json.loads(text)['error']['type'], 'authentication_error')
        status, text = testlib.http('POST', self.url + '/v1/messages', json.dumps(body),
                                    {'x-api-key': KEY, 'Content-Type': 'text/plain'})
        self.assertEqual(status, 415)
        self.assertEqual(json.loads(text)['type'], 'error')
        status, text = testlib.http('POST', self.url + '/v1/messages', body, {'x-api-key': KEY, 'Host': 'evil.example'})
        self.assertEqual(status, 403)
        self.assertEqual(json.loads(text)['error']['type'], 'permission_error')
        status, text = testlib.http('POST', self.url + '/v1/messages', '{"model": ', {'x-api-key': KEY})
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(text)['error']['type'], 'invalid_request_error')


if __name__ == '__main__':
    unittest.main()
