"""The chat templates of DeepSeek-R1 (templates/deepseek_r1.jinja: the thinking model's template
from its tokenizer_config.json, which drops the <think> part of earlier assistant turns and opens
the answer with "<think>\\n") and Kimi K2 (templates/kimi_k2.jinja: Kimi-K2-Instruct's, with its
tool declaration, default system prompt, tool-call sections and "## Return of" tool results)
through colibri's Jinja interpreter, against Jinja2 with transformers' settings. DeepSeek-V3's
own template is checked against the real tokenizer_config.json in test_reference.py.

Every conversation of corpus.py plus a few of these templates' own shapes renders to Jinja2's
text, or fails where Jinja2 fails (DeepSeek concatenates tool-call arguments as strings: object
arguments fail in both); a few renders are pinned to the exact text. Skips without python3-jinja2.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpus  # noqa: E402
from template_check import HAVE_JINJA2, TemplateTestCase  # noqa: E402

CALL = {"id": "functions.get_weather:0", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "東京"}}}
CALL_STR = {"id": "functions.search:1", "type": "function",
            "function": {"name": "search", "arguments": "{\"query\": \"news\"}"}}


def own_cases():
    return [
        ("r1_history_thinking_dropped", {"messages": [
            {"role": "user", "content": "1+1?"},
            {"role": "assistant", "content": "<think>\nadd\n</think>\n\n2"},
            {"role": "user", "content": "2+2?"}]}),
        ("tool_then_answer", {"messages": [
            {"role": "user", "content": "News?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL_STR]},
            {"role": "tool", "content": "nothing new", "tool_call_id": "functions.search:1"},
            {"role": "assistant", "content": "Nothing new."}]}),
        ("content_parts", {"messages": [
            {"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "image_url", "image_url": {}},
                                         {"type": "text", "text": "what is it?"}]}]}),
        ("tool_call_with_content", {"tools": corpus.TOOLS, "messages": [
            {"role": "user", "content": "東京?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [CALL, CALL_STR]},
            {"role": "tool", "content": "18°C", "tool_call_id": "functions.get_weather:0"}]}),
    ]


@unittest.skipUnless(HAVE_JINJA2, "python3-jinja2 is not installed")
class DeepseekR1ChatTemplateTest(TemplateTestCase):
    template = "deepseek_r1.jinja"

    def test_corpus_matches_jinja2(self):
        cases = corpus.conversations() + own_cases()
        rendered = self.check_matches_jinja2(cases)
        self.assertGreaterEqual(rendered, len(cases) - 6)

    def test_exact_renders(self):
        got = self.ours([own_cases()[0][1], own_cases()[1][1],
                         {"add_generation_prompt": False,
                          "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]}])
        self.assertEqual(got[0]["prompt"], "<s><｜User｜>1+1?<｜Assistant｜>\n\n2<｜end▁of▁sentence｜>"
                                           "<｜User｜>2+2?<｜Assistant｜><think>\n")
        self.assertEqual(got[1]["prompt"],
                         "<s><｜User｜>News?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
                         "<｜tool▁sep｜>search\n```json\n{\"query\": \"news\"}\n```<｜tool▁call▁end｜>"
                         "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>nothing new<｜tool▁output▁end｜>"
                         "<｜tool▁outputs▁end｜>Nothing new.<｜end▁of▁sentence｜><｜Assistant｜><think>\n")
        self.assertEqual(got[2]["prompt"], "<s>Be brief.<｜User｜>hi")


@unittest.skipUnless(HAVE_JINJA2, "python3-jinja2 is not installed")
class KimiK2ChatTemplateTest(TemplateTestCase):
    template = "kimi_k2.jinja"

    def test_corpus_matches_jinja2(self):
        cases = corpus.conversations() + own_cases()
        rendered = self.check_matches_jinja2(cases)
        self.assertEqual(rendered, len(cases))  # nothing in it fails

    def test_exact_renders(self):
        got = self.ours([
            {"messages": [{"role": "user", "content": "東京?"},
                          {"role": "assistant", "content": "", "tool_calls": [CALL]},
                          {"role": "tool", "content": "18°C", "tool_call_id": "functions.get_weather:0"}]},
            {"add_generation_prompt": False,
             "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]},
        ])
        self.assertEqual(got[0]["prompt"],
                         "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
                         "<|im_end|><|im_user|>user<|im_middle|>東京?<|im_end|>"
                         "<|im_assistant|>assistant<|im_middle|><|tool_calls_section_begin|>"
                         "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"東京\"}"
                         "<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
                         "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n18°C<|im_end|>"
                         "<|im_assistant|>assistant<|im_middle|>")
        self.assertEqual(got[1]["prompt"],
                         "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>hi<|im_end|>")


if __name__ == "__main__":
    unittest.main()
