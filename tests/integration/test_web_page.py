"""colibri-server's web page in a real browser: headless Chromium (Debian's package) driven by
playwright-core from npm loads the page, sends a message and checks that the streamed answer is
the OpenAI API's greedy answer to the same conversation; regenerate, the live panel (hit rate,
heat map, tiers) and the page's security headers are checked too. Skips without chromium or
when npm cannot install playwright-core. COLIBRI_SCREENSHOT=path keeps a screenshot.
"""
import json
import os
import shutil
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = 'sekret'


class WebPageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.chromium = shutil.which('chromium')
        if cls.chromium is None:
            raise unittest.SkipTest('chromium is not installed (apt-get install chromium)')
        cls.modules = testlib.npm_modules('playwright', 'playwright-core')
        if cls.modules is None:
            raise unittest.SkipTest('npm could not install playwright-core (offline?)')
        cls.dir = testlib.tempdir('colibri-web-')
        cls.model = testlib.micro_model(cls.dir)
        cls.server = testlib.Service('colibri-server', ['--model', cls.model, '--port', '0', '--host', '127.0.0.1',
                                                        '--api-key', KEY, '--threads', '2'], cls.dir)
        cls.url = f'http://127.0.0.1:{cls.server.port()}'

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        testlib.rmtree(cls.dir)

    def test_chat_in_the_browser(self):
        shot = os.environ.get('COLIBRI_SCREENSHOT', os.path.join(self.dir, 'page.png'))
        p = testlib.run_node(self.modules, os.path.join(HERE, 'web', 'page_test.mjs'), self.url + '/', KEY,
                             self.chromium, shot)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual(out['console'], [])
        self.assertIn('demo', out['model'])
        self.assertTrue(out['streaming_seen'])
        # The same conversation through the API, greedy: the page streamed exactly this answer.
        status, text = testlib.http('POST', self.url + '/v1/chat/completions', {
            'messages': [{'role': 'user', 'content': 'Tell me about the sea.'}], 'temperature': 0, 'max_tokens': 12},
            {'Authorization': f'Bearer {KEY}'})
        self.assertEqual(status, 200, text)
        want = json.loads(text)['choices'][0]['message']['content']
        self.assertTrue(want.strip())
        self.assertEqual(out['answer'], want.lstrip())
        self.assertIn('tok/s', out['meta'])
        self.assertEqual(out['regenerated'], out['answer'])
        self.assertEqual(out['assistant_bubbles'], 1)
        self.assertTrue(out['hit'].endswith('%'), out['hit'])
        self.assertRegex(out['status'], r'^[1-9]\d* experts seen$')
        self.assertIn('RAM', out['tiers'])
        self.assertGreater(os.path.getsize(shot), 10000)
        if not out['stop_raced']:  # the reply had not ended on its own before Stop could be pressed
            self.assertTrue(out['stopped_meta'].endswith('· stopped'), out['stopped_meta'])
            self.assertTrue(0 < int(out['stopped_meta'].split()[0]) < 4000, out['stopped_meta'])
        self.assertTrue(out['send_enabled'])
        # The stopped request ended on the server too (the client's leaving cancels it).
        deadline = time.time() + 30
        while time.time() < deadline:
            status, text = testlib.http('GET', self.url + '/metrics', headers={'Authorization': f'Bearer {KEY}'})
            if testlib.metric(text, 'colibri_router_active_requests') == 0:
                break
            time.sleep(0.1)
        self.assertEqual(testlib.metric(text, 'colibri_router_active_requests'), 0)

    def test_page_is_static_and_guarded(self):
        status, text = testlib.http('GET', self.url + '/')  # open without a key: no data in it
        self.assertEqual(status, 200)
        self.assertIn('<script src="/app.js">', text)
        self.assertNotIn('http://', text.replace('http://www.w3.org', ''))  # nothing from elsewhere
        import urllib.request
        with urllib.request.urlopen(self.url + '/app.js') as r:
            self.assertTrue(r.headers['Content-Type'].startswith('text/javascript'))
            self.assertIn("default-src 'self'", r.headers['Content-Security-Policy'])
            self.assertEqual(r.headers['X-Frame-Options'], 'DENY')
        # Its data routes need the key like every other route.
        self.assertEqual(testlib.http('GET', self.url + '/stats')[0], 401)
        status, text = testlib.http('GET', self.url + '/stats', headers={'Authorization': f'Bearer {KEY}'})
        self.assertEqual(status, 200, text)
        stats = json.loads(text)
        self.assertEqual(stats['model'], 'demo')
        self.assertGreater(stats['node']['layers'], 0)
        self.assertGreater(stats['node']['expert_bytes'], 0)
        self.assertIn('ram', stats['node']['tiers'])
        # A rebinding page's name is refused for the page too.
        self.assertEqual(testlib.http('GET', self.url + '/', headers={'Host': 'evil.example'})[0], 403)
        self.assertEqual(testlib.http('GET', self.url + '/nope.js')[0], 401)  # not a page file: guarded


if __name__ == '__main__':
    unittest.main()
