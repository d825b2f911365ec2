"""Coding agents against colibri-server, with the real clients from npm: Claude Code (`claude -p ...
--output-format json`) completes a turn with no protocol error. Its first request is the one a
real session sends (~76 KB: the system prompt, two dozen tools with their JSON schemas, a system
turn inside messages, adaptive thinking, context management), rendered whole by the model's chat
template (GLM-4.5's, which renders tools), so the test model has a context long enough to hold it,
as real models do. Random weights: the text is noise, the protocol is not.

The CLI is installed at test time outside the repository (~/.cache/colibri-npm); the test skips
when npm cannot reach its registry. Non-essential traffic (telemetry, updates) is switched off.
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

TEMPLATES = os.path.join(testlib.REPO, 'tests', 'tokenizer', 'templates')


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


class ClaudeCodeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.claude = claude_binary()
        if cls.claude is None:
            raise unittest.SkipTest('npm could not install @anthropic-ai/claude-code (offline?)')
        cls.dir = testlib.tempdir('colibri-agents-')
        hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), 'mixtral', 'micro', 'f32',
                               extra=['--config-set', 'max_position_embeddings=131072'])
        config = os.path.join(hf, 'tokenizer_config.json')
        with open(config) as f:
            tc = json.load(f)
        with open(os.path.join(TEMPLATES, 'glm4_5.jinja')) as f:
            tc['chat_template'] = f.read()
        with open(config, 'w') as f:
            json.dump(tc, f)
        cls.model = testlib.convert(hf, os.path.join(cls.dir, 'agent'), 'f32')
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
        p = subprocess.run([self.claude, '-p', 'List the files here.', '--output-format', 'json'],
                           cwd=work, env=env, capture_output=True, text=True, timeout=1200)
        lines = [line for line in p.stdout.splitlines() if line.startswith('{')]
        self.assertTrue(lines, f'no JSON result ({p.returncode}):\n{p.stdout}\n{p.stderr}\n'
                               f'{self.server.read_log()[-2000:]}')
        result = json.loads(lines[-1])
        self.assertEqual(result['type'], 'result')
        self.assertFalse(result['is_error'], result.get('result'))
        self.assertEqual(result['subtype'], 'success')
        self.assertGreaterEqual(result['num_turns'], 1)
        # The whole request reached the model: system prompt and tools, through the template.
        self.assertGreater(result['usage']['input_tokens'], 20000)
        self.assertGreater(result['usage']['output_tokens'], 0)


if __name__ == '__main__':
    unittest.main()
