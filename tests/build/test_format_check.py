"""scripts/format_check.sh: passes on formatted sources, names each file that is not (exit 1),
and --fix rewrites them so the check passes. Run in a scratch git repository holding a copy of
the script and the repository's .clang-format, so the real tree is never touched.
"""
import os
import shutil
import subprocess
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLANG_FORMAT = shutil.which('clang-format-14')


@unittest.skipIf(CLANG_FORMAT is None, 'clang-format-14 not installed (scripts/install-deps.sh)')
class FormatCheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix='colibri-format-check-')
        self.addCleanup(shutil.rmtree, self.dir)
        os.makedirs(os.path.join(self.dir, 'scripts'))
        os.makedirs(os.path.join(self.dir, 'src'))
        shutil.copy(os.path.join(REPO, 'scripts', 'format_check.sh'), os.path.join(self.dir, 'scripts'))
        shutil.copy(os.path.join(REPO, '.clang-format'), self.dir)
        self.write('src/good.cc', 'int Add(int a, int b) { return a + b; }\n')
        self.write('src/bad.h', 'int  Sub( int a,int b );\n')
        subprocess.run(['git', 'init', '-q'], cwd=self.dir, check=True)
        subprocess.run(['git', 'add', '-A'], cwd=self.dir, check=True)

    def write(self, path, text):
        with open(os.path.join(self.dir, path), 'w') as f:
            f.write(text)

    def check(self, *args):
        p = subprocess.run([os.path.join(self.dir, 'scripts', 'format_check.sh'), *args],
                           cwd=self.dir, capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def test_names_the_unformatted_file_and_fix_rewrites_it(self):
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn('1 of 2 files are not formatted', out)
        self.assertIn('src/bad.h', out)
        self.assertNotIn('src/good.cc', out)
        rc, out = self.check('--fix')
        self.assertEqual(rc, 0, out)
        with open(os.path.join(self.dir, 'src/bad.h')) as f:
            self.assertEqual(f.read(), 'int Sub(int a, int b);\n')
        rc, out = self.check()
        self.assertEqual((rc, out.strip()), (0, 'format_check: 2 files formatted'))


if __name__ == '__main__':
    unittest.main()
