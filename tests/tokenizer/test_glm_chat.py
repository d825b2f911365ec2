"""GLM-4.5's chat template (templates/glm4_5.jinja, as zai-org ships it in tokenizer_config.json)
through colibri's Jinja interpreter, against Jinja2 with transformers' settings.

Every conversation of corpus.py (thinking on and off, reasoning in content and in
reasoning_content, tools, tool calls with object and string arguments, tool results) renders to
the same text as Jinja2, or fails where Jinja2 fails; a few renders are also pinned to the exact
text GLM-4.5 was trained on. No network: the tokenizer is the tiny generated one (the template
does not depend on the vocabulary). Skips when python3-jinja2 is missing.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpus  # noqa: E402
from template_check import HAVE_JINJA2, TemplateTestCase  # noqa: E402


@unittest.skipUnless(HAVE_JINJA2, "python3-jinja2 is not installed")
class GlmChatTemplateTest(TemplateTestCase):
    template = "glm4_5.jinja"

    def test_corpus_matches_jinja2(self):
        cases = corpus.conversations()
        # GLM-specific shapes: thinking off with a user turn already ending in /nothink, and a
        # tool result given as a list.
        cases += [
            ("nothink_already", {"enable_thinking": False, "messages": [{"role": "user", "content": "hi /nothink"}]}),
            ("tool_result_list", {"messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "tool", "content": [{"output": "sunny"}, "raw"]}]}),
        ]
        rendered = self.check_matches_jinja2(cases)
        self.assertGreaterEqual(rendered, len(cases) - 4)  # string-argument tool calls fail in both

    def test_exact_renders(self):
        call = {"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "東京", "days": 3}}}
        got = self.ours([
            {"enable_thinking": False, "messages": [{"role": "system", "content": "Be brief."},
                                                     {"role": "user", "content": "1+1?"}]},
            {"messages": [{"role": "user", "content": "Weather?"},
                          {"role": "assistant", "content": "Checking.", "reasoning_content": "need the tool",
                           "tool_calls": [call]},
                          {"role": "tool", "content": "{\"temp\": 18}"}]},
        ])
        self.assertEqual(got[0]["prompt"],
                         "[gMASK]<sop><|system|>\nBe brief.<|user|>\n1+1?/nothink<|assistant|>\n<think></think>")
        self.assertEqual(got[1]["prompt"],
                         "[gMASK]<sop><|user|>\nWeather?<|assistant|>\n<think>need the tool</think>\nChecking."
                         "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>東京</arg_value>\n"
                         "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
                         "<|observation|>\n<tool_response>\n{\"temp\": 18}\n</tool_response><|assistant|>")


if __name__ == "__main__":
    unittest.main()
