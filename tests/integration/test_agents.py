"""Coding agents against colibri-server, with the real clients from npm: Claude Code (`claude -p ...
--output-format json`, the Messages API) and the Codex CLI (`codex exec --json`, the Responses
API) each complete a turn with no protocol error. Its first request is the one a
real session sends (~76 KB: the system prompt, two dozen tools with their JSON schemas, a system
turn inside messages, adaptive thinking, context management), rendered whole by the model's chat
template (GLM-4.5's, which renders tools), so the test model has a context long enough to hold it,
as real models do. Random weights: the text is noise, the protocol is not.

The CLIs are installed at test time outside the repository (~/.cache/colibri-npm); a test skips
when npm cannot reach its registry. Non-essential traffic (telemetry, updates) is switched off.
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

def claude_binary():
    """The `claude` executable from npm, its native binary put in place (npm may skip the
    package's postinstall); None when it cannot be installed here."""
    modules = testlib.npm_modules('claude-code', '@anthropic-ai/claude-code@2')
    if modules is None:
        return None
    package = os.path.join(modules, '@anthropic-ai', 'claude-code')
    exe = os.path.join(modules, '.bin', 'claude')

    def works():
        try:
            return subprocess.run([exe, '--version'], capture_output=True, timeout=60).returncode == 0
        except OSError:
            return False
    if not works():
        subprocess.run(['node', 'install.cjs'], cwd=package, capture_output=True, timeout=300)
    return exe if works() else None


def codex_binary():
    """The `codex` executable from npm (its native binary comes as an optional dependency)."""
    modules = testlib.npm_modules('codex', '@openai/codex@0')
    if modules is None:
        return None
    exe = os.path.join(modules, '.bin', 'codex')
    try:
        ok = subprocess.run([exe, '--version'], capture_output=True, timeout=60).returncode == 0
    except OSError:
        ok = False
    return exe if ok else None


class AgentsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.claude = claude_binary()
        if cls.claude is None:
            raise unittest.SkipTest('npm could not install @anthropic-ai/claude-code (offline?)')
        cls.dir = testlib.tempdir('colibri-agents-')
        cls.model = testlib.tool_model(cls.dir, 'agent', context=131072)
        cls.server = testlib.Service('colibri-server', ['--model', cls.model, '--port', '0', '--host', '127.0.0.1',
                                                        '--threads', '2', '--api-key', 'k'], cls.dir)
        cls.url = f'http://127.0.0.1:{cls.server.port()}'

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        testlib.rmtree(cls.dir)

    def test_claude_code_completes_a_turn(self):
        home = os.path.join(self.dir, 'home')
        work = os.path.join(self.dir, 'work')
        os.makedirs(home, exist_ok=True)
        os.makedirs(work, exist_ok=True)
        env = {'PATH': os.environ.get('PATH', ''), 'HOME': home, 'ANTHROPIC_BASE_URL': self.url,
               'ANTHROPIC_API_KEY': 'k', 'ANTHROPIC_MODEL': 'agent', 'ANTHROPIC_SMALL_FAST_MODEL': 'agent',
               'CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC': '1', 'DISABLE_AUTOUPDATER': '1',
               'DISABLE_TELEMETRY': '1', 'DISABLE_ERROR_REPORTING': '1'}
        def turn(prompt, *flags):
            p = subprocess.run([self.claude, '-p', prompt, *flags, '--output-format', 'json'],
                               cwd=work, env=env, capture_output=True, text=True, timeout=1200)
            lines = [line for line in p.stdout.splitlines() if line.startswith('{')]
            self.assertTrue(lines, f'no JSON result ({p.returncode}):\n{p.stdout}\n{p.stderr}\n'
                                   f'{self.server.read_log()[-2000:]}')
            result = json.loads(lines[-1])
            self.assertEqual(result['type'], 'result')
            self.assertFalse(result['is_error'], result.get('result'))
            self.assertEqual(result['subtype'], 'success')
            self.assertGreaterEqual(result['num_turns'], 1)
            self.assertGreater(result['usage']['output_tokens'], 0)
            return result['usage']

        first = turn('List the files here.')
        # The whole request reached the model: system prompt and tools, through the template.
        prompt = first['input_tokens'] + first['cache_read_input_tokens']
        self.assertGreater(prompt, 20000)
        # The session's second turn resends the whole conversation: the KV of the first turn's
        # prompt is reused and only what is new (the answer, re-rendered, and the new message) is
        # prefilled; usage says so (message_delta's figures, as the SDK reads them).
        second = turn('Say hi.', '--continue')
        self.assertGreaterEqual(second['cache_read_input_tokens'], prompt * 0.9, second)
        self.assertLess(second['input_tokens'], prompt * 0.5, second)

    def test_codex_cli_completes_a_turn(self):
        codex = codex_binary()
        if codex is None:
            self.skipTest('npm could not install @openai/codex (offline?)')
        home = os.path.join(self.dir, 'codex-home')
        work = os.path.join(self.dir, 'codex-work')
        os.makedirs(os.path.join(home, '.codex'), exist_ok=True)
        os.makedirs(work, exist_ok=True)
        with open(os.path.join(home, '.codex', 'config.toml'), 'w') as f:
            f.write('model = "agent"\nmodel_provider = "colibri"\n\n[model_providers.colibri]\n'
                    f'name = "colibri"\nbase_url = "{self.url}/v1"\nwire_api = "responses"\n'
                    'env_key = "COLIBRI_KEY"\n')
        env = {'PATH': os.environ.get('PATH', ''), 'HOME': home, 'COLIBRI_KEY': 'k'}
        p = subprocess.run([codex, 'exec', '--skip-git-repo-check', '--json', 'Say hello.'], cwd=work, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1200)
        self.assertEqual(p.returncode, 0, f'{p.stdout}\n{p.stderr}\n{self.server.read_log()[-2000:]}')
        events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith('{')]
        types = [e['type'] for e in events]
        self.assertIn('turn.completed', types, p.stdout)
        self.assertNotIn('turn.failed', types, p.stdout)
        messages = [e['item'] for e in events if e['type'] == 'item.completed'
                    and e['item'].get('type') == 'agent_message']
        self.assertEqual(len(messages), 1, p.stdout)
        usage = next(e for e in events if e['type'] == 'turn.completed')['usage']
        # Its instructions and tools went through the chat template.
        self.assertGreater(usage['input_tokens'], 5000)


if __name__ == '__main__':
    unittest.main()
