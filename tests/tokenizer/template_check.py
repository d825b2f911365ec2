"""A chat template file through colibri's Jinja interpreter (colibri-cli chat-template) against
Jinja2 with transformers' settings (hf_chat_template.py): the test base of test_glm_chat.py and
test_deepseek_kimi_chat.py. The tokenizer is the tiny generated one (the templates do not depend
on the vocabulary); bos_token "<s>", eos_token "</s>"."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import hf_chat_template as hf  # noqa: E402

BIN_DIR = os.environ.get("COLIBRI_BIN_DIR", os.path.join(REPO, "build", "bin"))
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
try:
    import jinja2  # noqa: F401
    HAVE_JINJA2 = True
except ImportError:
    HAVE_JINJA2 = False


class TemplateTestCase(unittest.TestCase):
    """Subclasses set `template` (a file name under templates/)."""
    template = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="colibri-chat-template-")
        cls.tok = os.path.join(cls.tmp, "tok")
        subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tools", "gen_tiny_model.py"), "--out", cls.tok,
                        "--family", "mixtral", "--preset", "micro"], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, template=None):
        return os.path.join(HERE, "templates", template or self.template)

    def ours(self, cases, template=None):
        """colibri's renders of `cases` ({"prompt": ...} or {"error": ...} each)."""
        path = os.path.join(self.tmp, "cases.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False)
        p = subprocess.run([os.path.join(BIN_DIR, "colibri-cli"), "chat-template", "--tokenizer", self.tok,
                            "--template", self.path(template), "--messages", path, "--batch"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def check_matches_jinja2(self, cases, template=None):
        """Every (name, case) renders to Jinja2's text, or fails where Jinja2 fails; returns how
        many rendered."""
        with open(self.path(template), encoding="utf-8") as f:
            source = f.read()
        got = self.ours([case for _, case in cases], template)
        mismatches, rendered = [], 0
        for (name, case), ours in zip(cases, got):
            try:
                want = hf.render(source, case, SPECIAL)
            except hf.TemplateRaised as e:
                if "error" not in ours:
                    mismatches.append(f"{name}: Jinja2 failed ({e}) but we rendered {ours.get('prompt')!r}")
                continue
            rendered += 1
            if ours.get("prompt") != want:
                mismatches.append(f"{name}:\n  ours {ours}\n  ref  {want!r}")
        self.assertEqual(mismatches, [], "\n".join(mismatches[:5]))
        return rendered
