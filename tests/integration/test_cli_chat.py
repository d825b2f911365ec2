"""colibri-cli chat driven through tmux as a person would type into it: a turn streams a reply
and prints its line (tokens, tok/s, TTFT, hit rate, RSS); /stats counts the turns; /reset
clears the history; the second turn of a conversation carries the first (the server's prompt
grows); --url talks to a running colibri-server with a key. Skips without tmux.
"""
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

TURN = re.compile(r'\[(\d+) tokens, ([\d.]+) tok/s, TTFT ([\d.]+) s, hit rate ([\d.]+%|-), RSS ([^\]]+)\]')


class Tmux:
    """One detached tmux session running a command; keys in, the screen out."""

    def __init__(self, name, cmd):
        self.name = name
        subprocess.run(['tmux', 'kill-session', '-t', name], capture_output=True)
        subprocess.run(['tmux', 'new-session', '-d', '-s', name, '-x', '200', '-y', '50', cmd], check=True)

    def type(self, text):
        subprocess.run(['tmux', 'send-keys', '-t', self.name, '-l', text], check=True)
        subprocess.run(['tmux', 'send-keys', '-t', self.name, 'Enter'], check=True)

    def screen(self):
        p = subprocess.run(['tmux', 'capture-pane', '-p', '-J', '-S', '-500', '-t', self.name],
                           capture_output=True, text=True)
        return p.stdout

    def wait_for(self, predicate, what, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.screen()
            if predicate(s):
                return s
            time.sleep(0.1)
        raise AssertionError(f'timed out waiting for {what}; screen:\n{self.screen()}')

    def close(self):
        subprocess.run(['tmux', 'kill-session', '-t', self.name], capture_output=True)


class CliChatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which('tmux') is None:
            raise unittest.SkipTest('tmux is not installed')
        cls.dir = testlib.tempdir('colibri-chat-')
        cls.model = testlib.micro_model(cls.dir)

    @classmethod
    def tearDownClass(cls):
        testlib.rmtree(cls.dir)

    def chat(self, name, args):
        # A shell keeps the pane after the chat exits, so its last screen can still be read.
        cmd = ' '.join([testlib.binary('colibri-cli'), 'chat', *args, '--max-tokens', '6', '--temperature', '0',
                        '; echo CHAT-EXITED $?; sleep 600'])
        t = Tmux(name, cmd)
        self.addCleanup(t.close)
        t.wait_for(lambda s: '/reset, /stats, /quit' in s, 'the banner')
        return t

    def turns(self, screen):
        return TURN.findall(screen)

    def test_local_model(self):
        t = self.chat(f'colibri-chat-{os.getpid()}', ['--model', self.model, '--threads', '2'])
        t.type('Tell me about the sea.')
        s = t.wait_for(lambda s: len(self.turns(s)) == 1, 'the first turn line')
        tokens, tps, ttft, hit, rss = self.turns(s)[0]
        self.assertTrue(1 <= int(tokens) <= 6, s)
        self.assertGreater(float(tps), 0)
        self.assertGreater(float(ttft), 0)
        self.assertTrue(hit.endswith('%'), hit)
        self.assertRegex(rss, r'^[\d.]+ ?[KMG]i?B$')
        t.type('And the river?')
        s = t.wait_for(lambda s: len(self.turns(s)) == 2, 'the second turn line')
        t.type('/stats')
        s = t.wait_for(lambda s: '[2 turns' in s, '/stats')
        self.assertIn('4 messages in history', s)  # two user and two assistant turns
        t.type('/reset')
        t.wait_for(lambda s: '(conversation cleared)' in s, '/reset')
        t.type('/stats')
        s = t.wait_for(lambda s: '0 messages in history' in s, '/stats after /reset')
        t.type('/quit')
        t.wait_for(lambda s: 'CHAT-EXITED 0' in s, 'a clean exit')

    def test_server_url(self):
        server = testlib.Service('colibri-server', ['--model', self.model, '--port', '0', '--host', '127.0.0.1',
                                                    '--api-key', 'sekret', '--threads', '2'], self.dir)
        self.addCleanup(server.stop)
        url = f'http://127.0.0.1:{server.port()}'
        t = self.chat(f'colibri-chat-url-{os.getpid()}', ['--url', url, '--api-key', 'sekret'])
        t.type('Tell me about the sea.')
        s = t.wait_for(lambda s: len(self.turns(s)) == 1, 'the first turn line')
        tokens, tps, ttft, hit, rss = self.turns(s)[0]
        self.assertTrue(1 <= int(tokens) <= 6, s)
        self.assertTrue(hit.endswith('%'), s)  # from the server's /metrics
        t.type('And the river?')
        t.wait_for(lambda s: len(self.turns(s)) == 2, 'the second turn line')
        # The second request carried the first turn: the server saw more prompt tokens.
        status, text = testlib.http('GET', url + '/metrics', headers={'Authorization': 'Bearer sekret'})
        self.assertEqual(status, 200)
        self.assertEqual(testlib.metric(text, 'colibri_router_requests_total', 'chat_completions'), 2)
        t.type('/quit')
        t.wait_for(lambda s: 'CHAT-EXITED 0' in s, 'a clean exit')

    def test_bad_arguments(self):
        p = testlib.run([testlib.binary('colibri-cli'), 'chat'], check=False, input='')
        self.assertEqual(p.returncode, 2)
        self.assertIn('--model DIR or --url URL', p.stderr)


if __name__ == '__main__':
    unittest.main()
