"""The official `openai` npm client (6.x, on Node 20) against colibri-server: chat and completions,
streaming and not, usage, logprobs, and OpenAI-shaped errors. The package is installed at test time
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


if __name__ == '__main__':
    unittest.main()
