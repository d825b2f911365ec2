"""Structured output on every family's random-weight test model: JSON schemas (nested objects,
bounded arrays, enums and const, anyOf and nullable types, formats, recursive $ref) and
json_object, sampled at temperature 1 through /v1/chat/completions and /v1/responses, each
output parsed and validated with ajv (random weights are the hardest case: only the token mask
keeps them valid). Then the openai SDK's helpers: chat.completions.parse with a zod schema and
responses with text.format, whole and streamed. npm packages are installed at test time into a
cache outside the repository; the ajv and SDK parts skip when npm cannot reach its registry.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), '..', 'shared', 'oracle')
SAMPLES = int(os.environ.get('COLIBRI_STRUCTURED_SAMPLES', '4'))

# Each family's model, served in place from the peer's GGUF (or converted where only HF exists).
FAMILIES = {
    'mixtral': 'mixtral-micro-f32.gguf',
    'olmoe': 'olmoe-micro-f32.gguf',
    'qwen2moe': 'qwen2moe-micro-f32.gguf',
    'qwen3moe': 'qwen3moe/qwen3moe-micro-f32',
    'deepseek2': 'deepseek2/deepseek-micro-f32.gguf',
    'gptoss': 'gptoss/gptoss-micro-mxfp4.gguf',
    'glm4moe': 'glm4moe/glm4moe-micro-f32.gguf',
}


class StructuredOutputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-structured-')
        with open(os.path.join(HERE, 'structured', 'schemas.json')) as f:
            cls.schemas = json.load(f)
        cls.modules = testlib.npm_modules('structured', 'openai@6', 'zod@3', 'ajv@8', 'ajv-formats@3')

    @classmethod
    def tearDownClass(cls):
        testlib.rmtree(cls.dir)

    def model_path(self, family):
        path = os.path.normpath(os.path.join(ORACLE, FAMILIES[family]))
        if not os.path.exists(path):
            self.skipTest(f'oracle model {path} missing')
        if os.path.isdir(path):  # a Hugging Face checkpoint: converted once
            out = os.path.join(self.dir, family)
            if not os.path.isdir(out):
                testlib.convert(path, out, 'f32')
            return out
        return path

    def serve(self, family):
        server = testlib.Service('colibri-server', ['--model', self.model_path(family), '--port', '0',
                                                    '--host', '127.0.0.1', '--threads', '2',
                                                    '--served-model-name', 'demo'], self.dir, tag=family)
        self.addCleanup(server.stop)
        return f'http://127.0.0.1:{server.port()}/v1'

    def chat(self, url, body):
        status, text = testlib.http('POST', url + '/chat/completions', body)
        self.assertEqual(status, 200, text)
        choice = json.loads(text)['choices'][0]
        return choice['message']['content'], choice['finish_reason']

    def test_schemas_on_every_family_validate_with_ajv(self):
        if self.modules is None:
            self.skipTest('npm could not install ajv (offline?)')
        outputs = []
        for family in FAMILIES:
            url = self.serve(family)
            for name, schema in self.schemas.items():
                for seed in range(SAMPLES):
                    body = {'model': 'demo', 'messages': [{'role': 'user', 'content': f'Give me {name}.'}],
                            'temperature': 1.0, 'seed': seed, 'max_tokens': 160,
                            'response_format': {'type': 'json_schema',
                                                'json_schema': {'name': name, 'strict': True, 'schema': schema}}}
                    text, finish = self.chat(url, body)
                    self.assertEqual(finish, 'stop', f'{family} {name}: {text!r}')
                    outputs.append({'schema': name, 'text': text, 'family': family})
            # json_object: any object.
            body = {'model': 'demo', 'messages': [{'role': 'user', 'content': 'An object.'}],
                    'temperature': 1.0, 'seed': 7, 'max_tokens': 80, 'response_format': {'type': 'json_object'}}
            text, finish = self.chat(url, body)
            outputs.append({'schema': 'free_object', 'text': text, 'family': family})
            # The Responses API's text.format, sampled the same way.
            status, text = testlib.http('POST', url + '/responses', {
                'model': 'demo', 'input': 'Nested, please.', 'temperature': 1.0, 'max_output_tokens': 160,
                'text': {'format': {'type': 'json_schema', 'name': 'nested', 'schema': self.schemas['nested']}}})
            self.assertEqual(status, 200, text)
            r = json.loads(text)
            self.assertEqual(r['status'], 'completed', text)
            message = [i for i in r['output'] if i['type'] == 'message'][0]
            outputs.append({'schema': 'nested', 'text': message['content'][0]['text'], 'family': family})
        path = os.path.join(self.dir, 'outputs.json')
        with open(path, 'w') as f:
            json.dump({'schemas': self.schemas, 'outputs': outputs}, f)
        p = testlib.run_node(self.modules, os.path.join(HERE, 'structured', 'validate.mjs'), path)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        result = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual(result['failures'], [])
        self.assertEqual(result['valid'], len(outputs))
        self.assertEqual(result['total'], len(FAMILIES) * (len(self.schemas) * SAMPLES + 2))

    def test_openai_sdk_helpers(self):
        if self.modules is None:
            self.skipTest('npm could not install the openai SDK and zod (offline?)')
        url = self.serve('qwen2moe')
        p = testlib.run_node(self.modules, os.path.join(HERE, 'structured', 'sdk_test.mjs'), url, 'demo')
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertTrue(out['parse']['valid'], out['parse'])
        self.assertEqual(out['parse']['finish'], 'stop')
        self.assertIn(out['parse']['parsed']['day'], ('mon', 'tue', 'wed'))
        self.assertEqual(out['responses']['status'], 'completed')
        for text in (out['responses']['text'], out['streamed']['text']):
            value = json.loads(text)
            self.assertEqual(sorted(value), ['city', 'temp'])
            self.assertIsInstance(value['temp'], int)
            self.assertLessEqual(len(value['city']), 12)
        self.assertEqual(out['streamed']['text'], out['streamed']['final'])
        self.assertEqual(out['refused']['status'], 400)
        self.assertIn("'pattern'", out['refused']['message'])

    def test_forced_tool_calls_on_all_three_apis(self):
        # GLM-4.5's template: tool calls written as <arg_key>/<arg_value> pairs.
        model = testlib.tool_model(self.dir, 'tools')
        server = testlib.Service('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1',
                                                    '--threads', '2', '--served-model-name', 'demo'],
                                 self.dir, tag='tools')
        self.addCleanup(server.stop)
        base = f'http://127.0.0.1:{server.port()}'
        params = {'type': 'object', 'additionalProperties': False, 'required': ['city', 'unit'],
                  'properties': {'city': {'type': 'string', 'maxLength': 10}, 'unit': {'enum': ['c', 'f']},
                                 'days': {'type': 'integer'}}}
        fn = {'name': 'get_weather', 'description': 'Weather.', 'parameters': params}
        other = {'name': 'get_time', 'parameters': {'type': 'object', 'properties': {}, 'additionalProperties': False}}

        def check(name, args):
            self.assertIn(name, ('get_weather', 'get_time'))
            if name == 'get_weather':
                self.assertIsInstance(args['city'], str)
                self.assertLessEqual(len(args['city']), 10)
                self.assertIn(args['unit'], ('c', 'f'))
                self.assertLessEqual(set(args), {'city', 'unit', 'days'})
            else:
                self.assertEqual(args, {})

        for seed in range(3):
            for choice in ('required', {'type': 'function', 'function': {'name': 'get_weather'}}):
                status, text = testlib.http('POST', base + '/v1/chat/completions', {
                    'model': 'demo', 'messages': [{'role': 'user', 'content': 'Weather in Paris?'}],
                    'tools': [{'type': 'function', 'function': fn}, {'type': 'function', 'function': other}],
                    'tool_choice': choice, 'temperature': 1.0, 'seed': seed, 'max_tokens': 120})
                self.assertEqual(status, 200, text)
                choice_out = json.loads(text)['choices'][0]
                self.assertEqual(choice_out['finish_reason'], 'tool_calls', text)
                calls = choice_out['message']['tool_calls']
                self.assertEqual(len(calls), 1, text)
                if choice != 'required':
                    self.assertEqual(calls[0]['function']['name'], 'get_weather')
                check(calls[0]['function']['name'], json.loads(calls[0]['function']['arguments']))
            # Anthropic: tool_choice any and tool.
            for choice in ({'type': 'any'}, {'type': 'tool', 'name': 'get_weather'}):
                status, text = testlib.http('POST', base + '/v1/messages', {
                    'model': 'demo', 'max_tokens': 120, 'temperature': 1.0, 'seed': seed,
                    'messages': [{'role': 'user', 'content': 'Weather in Paris?'}],
                    'tools': [{'name': 'get_weather', 'input_schema': params},
                              {'name': 'get_time', 'input_schema': other['parameters']}],
                    'tool_choice': choice})
                self.assertEqual(status, 200, text)
                msg = json.loads(text)
                self.assertEqual(msg['stop_reason'], 'tool_use', text)
                uses = [b for b in msg['content'] if b['type'] == 'tool_use']
                self.assertEqual(len(uses), 1, text)
                check(uses[0]['name'], uses[0]['input'])
        # Anthropic's output_config.format: the text block is JSON valid against the schema.
        status, text = testlib.http('POST', base + '/v1/messages', {
            'model': 'demo', 'max_tokens': 120, 'temperature': 1.0,
            'messages': [{'role': 'user', 'content': 'Weather in Paris?'}],
            'output_config': {'format': {'type': 'json_schema', 'schema': params}}})
        self.assertEqual(status, 200, text)
        msg = json.loads(text)
        self.assertEqual(msg['stop_reason'], 'end_turn', text)
        check('get_weather', json.loads(''.join(b['text'] for b in msg['content'] if b['type'] == 'text')))
        # A named tool that is not offered, and a schema outside the subset, are refused by name.
        status, text = testlib.http('POST', base + '/v1/chat/completions', {
            'model': 'demo', 'messages': [{'role': 'user', 'content': 'x'}],
            'tools': [{'type': 'function', 'function': fn}],
            'tool_choice': {'type': 'function', 'function': {'name': 'nope'}}})
        self.assertEqual(status, 400, text)
        self.assertIn("'nope'", text)

    def test_bad_schemas_and_grammars_are_refused_by_name(self):
        url = self.serve('mixtral')
        for body, words in (
                ({'response_format': {'type': 'json_schema', 'json_schema': {'name': 'x', 'schema': {
                    'type': 'object', 'properties': {'a': {'type': 'string', 'pattern': 'x+'}}}}}},
                 ("'pattern'", '#/properties/a')),
                ({'response_format': {'type': 'json_schema', 'json_schema': {'name': 'x', 'schema': {
                    '$ref': '#/$defs/nope'}}}}, ('does not resolve',)),
                ({'grammar': 'root ::= "a" undefined'}, ("'undefined'",)),
                ({'response_format': {'type': 'json_schema', 'json_schema': {'name': 'x', 'schema': {
                    'type': 'array', 'minItems': 200, 'items': {'type': 'string', 'minLength': 50}}}},
                  'max_tokens': 20}, ('shortest output',))):
            status, text = testlib.http('POST', url + '/chat/completions', {
                'model': 'demo', 'messages': [{'role': 'user', 'content': 'x'}], **body})
            self.assertEqual(status, 400, text)
            for w in words:
                self.assertIn(w, json.loads(text)['error']['message'])
        # A grammar of the documented syntax is followed exactly.
        text, finish = self.chat(url, {'model': 'demo', 'messages': [{'role': 'user', 'content': 'x'}],
                                       'temperature': 1.0, 'max_tokens': 30,
                                       'grammar': 'root ::= ("yes" | "no") " " [0-9]{2}'})
        self.assertRegex(text, r'^(yes|no) [0-9]{2}$')
        self.assertEqual(finish, 'stop')


if __name__ == '__main__':
    unittest.main()
