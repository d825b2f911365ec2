"""The official `openai` npm client (6.x, on Node 20) against colibri-server: chat and completions,
streaming and not, usage, logprobs, OpenAI-shaped errors, and the Responses API (whole, streamed,
a function-tool loop over previous_response_id, stored responses read and deleted). The package is installed at test time
into a cache directory outside the repository; the test skips when npm cannot reach its registry.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class OpenAiClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.modules = testlib.npm_modules('openai6', 'openai@6')
        if cls.modules is None:
            raise unittest.SkipTest('npm could not install openai@6 (offline?)')
        cls.dir = testlib.tempdir('colibri-openai-')
        hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), 'mixtral', 'micro', 'f32')
        cls.model = testlib.convert(hf, os.path.join(cls.dir, 'demo'), 'q8_0')
        cls.server = testlib.Service('colibri-server', ['--model', cls.model, '--port', '0', '--host', '127.0.0.1',
                                                        '--api-key', 'sekret', '--threads', '2'], cls.dir)
        cls.url = f'http://127.0.0.1:{cls.server.port()}/v1'

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        testlib.rmtree(cls.dir)

    def test_official_client(self):
        p = testlib.run_node(self.modules, os.path.join(HERE, 'openai', 'client_test.mjs'), self.url, 'sekret')
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual(out['models'], ['demo'])
        self.assertIn(out['chat']['finish'], ('stop', 'length'))
        self.assertEqual(out['chat']['usage']['total_tokens'],
                         out['chat']['usage']['prompt_tokens'] + out['chat']['usage']['completion_tokens'])
        # Streaming yields the same text as the blocking call (greedy), and usage at the end.
        self.assertEqual(out['stream']['text'], out['chat']['text'])
        self.assertEqual(out['stream']['finish'], out['chat']['finish'])
        self.assertEqual(out['stream']['usage']['completion_tokens'], out['chat']['usage']['completion_tokens'])
        self.assertGreater(out['stream']['chunks'], 2)
        self.assertEqual(len(out['logprobs']), 3)
        for t in out['logprobs']:
            self.assertLessEqual(t['lp'], 0.0)
            self.assertEqual(t['top'], 2)
        self.assertLessEqual(out['completion']['usage']['completion_tokens'], 5)
        self.assertEqual(out['unknown_model']['status'], 404)
        self.assertEqual(out['bad_temperature']['status'], 400)
        self.assertIn('temperature', out['bad_temperature']['message'])
        self.assertEqual(out['bad_key']['status'], 401)

    def test_responses_api(self):
        # A template that renders tool calls and results, as agents' models have.
        model = testlib.tool_model(self.dir, 'tools')
        server = testlib.Service('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1',
                                                    '--api-key', 'sekret', '--threads', '2',
                                                    '--served-model-name', 'demo'], self.dir, tag='tools')
        self.addCleanup(server.stop)
        url = f'http://127.0.0.1:{server.port()}/v1'
        p = testlib.run_node(self.modules, os.path.join(HERE, 'openai', 'responses_test.mjs'), url, 'sekret')
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = json.loads(p.stdout.strip().splitlines()[-1])
        w = out['whole']
        self.assertTrue(w['id'].startswith('resp_'), w)
        self.assertEqual(w['object'], 'response')
        self.assertIn(w['status'], ('completed', 'incomplete'))
        self.assertEqual(w['items'], ['message'])
        self.assertEqual(w['usage']['total_tokens'], w['usage']['input_tokens'] + w['usage']['output_tokens'])
        self.assertLessEqual(w['usage']['output_tokens'], 6)
        if w['status'] == 'incomplete':
            self.assertEqual(w['incomplete']['reason'], 'max_output_tokens')
        # Streamed through the SDK: the same text (greedy), the events in the API's order.
        s = out['stream']
        self.assertEqual(s['text'], w['text'])
        self.assertEqual(s['final_text'], w['text'])
        self.assertEqual(s['events'][:2], ['response.created', 'response.in_progress'])
        self.assertIn(s['events'][-1], ('response.completed', 'response.incomplete'))
        for e in ('response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
                  'response.output_text.done', 'response.output_item.done'):
            self.assertIn(e, s['events'])
        # The loop continued the stored conversation: more input than the first turn had.
        self.assertEqual(out['loop']['previous'], w['id'])
        self.assertGreater(out['loop']['input_tokens'], w['usage']['input_tokens'])
        self.assertEqual(out['retrieved'], {'id': w['id'], 'text': w['text']})
        self.assertEqual(out['deleted'], {'ok': True, 'deleted': True})
        self.assertEqual(out['after_delete']['status'], 404)
        self.assertEqual(out['unstored']['status'], 404)
        # Outside what is done: refused by name rather than ignored.
        for name, field in (('bad_schema', "'pattern'"), ('image', 'input_image')):
            self.assertEqual(out[name]['status'], 400, out[name])
            self.assertIn(field, out[name]['message'])
        # Forced calls: exactly one, of the tool, with arguments per its schema.
        for name in ('forced', 'named'):
            self.assertEqual(out[name]['items'], ['function_call'], out[name])
            self.assertEqual(len(out[name]['calls']), 1)
            self.assertEqual(out[name]['calls'][0]['name'], 'get_weather')
            args = json.loads(out[name]['calls'][0]['args'])
            self.assertIsInstance(args['city'], str)


if __name__ == '__main__':
    unittest.main()
