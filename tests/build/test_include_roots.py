"""Include roots stay clean: no header reachable under two names, no test helper in a
production include directory.

Reads the build's compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS is on): every -I
directory inside the source tree is an include root. A root nested in another (services/router
and services/router/src) gives each header below the inner one two names ("x.h" and "src/x.h"),
so nested roots fail. A root outside a testing/ directory must hold no test helper (test_*.h,
fake_*.h, *_fake.h, a testing/ folder): those live in testing/include of a *_testing target.
"""
import json
import os
import re
import shlex
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'tests'))
import testlib  # noqa: E402  (COLIBRI_BIN_DIR: the build's bin/)

HEADER = re.compile(r'\.(h|hpp|cuh)$')
HELPER = re.compile(r'(^|/)(test_[^/]*|fake_[^/]*|[^/]*_fake|[^/]*_test_util)\.(h|hpp|cuh)$|(^|/)testing/')


def include_roots(commands, source_dir):
    """The -I directories of every compile command that lie inside source_dir."""
    roots = set()
    source_dir = os.path.realpath(source_dir)
    for c in commands:
        args = c['arguments'] if 'arguments' in c else shlex.split(c['command'])
        for i, a in enumerate(args):
            if a == '-I' and i + 1 < len(args):
                path = args[i + 1]
            elif a.startswith('-I') and len(a) > 2:
                path = a[2:]
            else:
                continue
            path = os.path.realpath(os.path.join(c.get('directory', ''), path))
            if path == source_dir or path.startswith(source_dir + os.sep):
                roots.add(path)
    return roots


def headers_under(root):
    for d, _, files in os.walk(root):
        for f in files:
            if HEADER.search(f):
                yield os.path.relpath(os.path.join(d, f), root)


def problems(roots, source_dir):
    """Each problem as a line naming the roots and headers."""
    out = []
    ordered = sorted(roots)
    for outer in ordered:
        for inner in ordered:
            if inner != outer and inner.startswith(outer + os.sep):
                names = sorted(headers_under(inner))
                if names:
                    rel = os.path.relpath(inner, outer)
                    out.append(f'{os.path.relpath(inner, source_dir)} is inside include root '
                               f'{os.path.relpath(outer, source_dir)}: {names[0]} is also '
                               f'{os.path.join(rel, names[0])} ({len(names)} headers)')
    for root in ordered:
        if '/testing/' in root + '/':
            continue
        for name in sorted(headers_under(root)):
            if HELPER.search(name):
                out.append(f'test helper {name} in production include root '
                           f'{os.path.relpath(root, source_dir)} (move it to a testing/ target)')
    return out


def write(path, text=''):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


class IncludeRootsTest(unittest.TestCase):
    def test_nested_root_and_helper_are_caught(self):
        with tempfile.TemporaryDirectory() as src:
            write(os.path.join(src, 'svc', 'src', 'thing.h'))
            write(os.path.join(src, 'lib', 'include', 'colibri', 'lib', 'test_model.h'))
            write(os.path.join(src, 'lib', 'testing', 'include', 'colibri', 'lib', 'testing',
                               'fake.h'))
            commands = [{'directory': src, 'command':
                         f'c++ -I{src}/svc -I {src}/svc/src -I{src}/lib/include '
                         f'-I{src}/lib/testing/include -isystem /usr/include -c x.cc'}]
            roots = include_roots(commands, src)
            self.assertEqual(roots, {f'{src}/svc', f'{src}/svc/src', f'{src}/lib/include',
                                     f'{src}/lib/testing/include'})
            found = problems(roots, src)
            self.assertEqual(len(found), 2, found)
            self.assertIn('svc/src is inside include root svc: thing.h is also src/thing.h', found[0])
            self.assertIn('test helper colibri/lib/test_model.h in production include root '
                          'lib/include', found[1])

    def test_clean_roots_pass(self):
        with tempfile.TemporaryDirectory() as src:
            write(os.path.join(src, 'svc', 'src', 'thing.h'))
            write(os.path.join(src, 'lib', 'testing', 'include', 'colibri', 'lib', 'testing',
                               'test_model.h'))
            commands = [{'directory': src, 'arguments':
                         ['c++', f'-I{src}/svc/src', f'-I{src}/lib/testing/include', '-c', 'x.cc']}]
            self.assertEqual(problems(include_roots(commands, src), src), [])

    def test_this_build(self):
        path = os.path.join(os.path.dirname(testlib.BIN), 'compile_commands.json')
        if not os.path.exists(path):
            self.skipTest(f'{path} not written (configure with CMake first)')
        with open(path) as f:
            commands = json.load(f)
        roots = include_roots(commands, REPO)
        self.assertGreater(len(roots), 10, roots)  # the libs' include/, the services' src/, ...
        self.assertEqual(problems(roots, REPO), [])


if __name__ == '__main__':
    unittest.main()
