"""GLM-4.5's chat template (templates/glm4_5.jinja, as zai-org ships it in tokenizer_config.json)
through colibri's Jinja interpreter, against Jinja2 with transformers' settings.

Every conversation of corpus.py (thinking on and off, reasoning in content and in
reasoning_content, tools, tool calls with object and string arguments, tool results) renders to
the same text as Jinja2, or fails where Jinja2 fails; a few renders are also pinned to the exact
text GLM-4.5 was trained on. No network: the tokenizer is the tiny generated one (the template
does not depend on the vocabulary). Skips when python3-jinja2 is missing.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
import hf_chat_template as hf  # noqa: E402

BIN_DIR = os.environ.get("COLIBRI_BIN_DIR", os.path.join(REPO, "build", "bin"))
TEMPLATE = os.path.join(HERE, "templates", "glm4_5.jinja")
try:
    import jinja2  # noqa: F401
    HAVE_JINJA2 = True
except ImportError:
    HAVE_JINJA2 = False


@unittest.skipUnless(HAVE_JINJA2, "python3-jinja2 is not installed")
class GlmChatTemplateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="colibri-glm-chat-")
        cls.tok = os.path.join(cls.tmp, "tok")
        subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tools", "gen_tiny_model.py"), "--out", cls.tok,
                        "--family", "mixtral", "--preset", "micro"], check=True, capture_output=True)
        with open(TEMPLATE, encoding="utf-8") as f:
            cls.source = f.read()

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ours(self, cases):
        path = os.path.join(self.tmp, "cases.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False)
        p = subprocess.run([os.path.join(BIN_DIR, "colibri-cli"), "chat-template", "--tokenizer", self.tok,
                            "--template", TEMPLATE, "--messages", path, "--batch"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

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
        got = self.ours([case for _, case in cases])
        mismatches, rendered = [], 0
        for (name, case), ours in zip(cases, got):
            try:
                want = hf.render(self.source, case, {"bos_token": "<s>", "eos_token": "</s>"})
            except hf.TemplateRaised as e:
                if "error" not in ours:
                    mismatches.append(f"{name}: Jinja2 failed ({e}) but we rendered {ours.get('prompt')!r}")
                continue
            rendered += 1
            if ours.get("prompt") != want:
                mismatches.append(f"{name}:\n  ours {ours}\n  ref  {want!r}")
        self.assertEqual(mismatches, [], "\n".join(mismatches[:5]))
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
