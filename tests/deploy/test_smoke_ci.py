"""scripts/smoke_ci.sh decides when CI runs deploy/smoke.sh: when docker/, deploy/ or services/
differ from the last green main it recorded (or nothing usable is recorded), never otherwise,
and within SMOKE_BUDGET. Checked in a scratch git repository holding a copy of the script and a
stand-in deploy/smoke.sh that records each run.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

SCRIPT = os.path.join(testlib.REPO, 'scripts', 'smoke_ci.sh')
FAKE_SMOKE = '#!/bin/sh\necho run >> "$SMOKE_RUNS"\necho "build budget $SMOKE_BUILD_BUDGET"\n[ -n "${SMOKE_HANG:-}" ] && exec sleep 30\nexit "${SMOKE_RC:-0}"\n'


class SmokeCiTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix='colibri-smoke-ci-')
        self.addCleanup(shutil.rmtree, self.dir)
        self.repo = os.path.join(self.dir, 'repo')
        self.state = os.path.join(self.dir, 'state')
        self.runs_file = os.path.join(self.dir, 'runs')
        for d in ('scripts', 'deploy', 'docker', 'services', 'libs'):
            os.makedirs(os.path.join(self.repo, d))
        shutil.copy(SCRIPT, os.path.join(self.repo, 'scripts', 'smoke_ci.sh'))
        smoke = os.path.join(self.repo, 'deploy', 'smoke.sh')
        with open(smoke, 'w') as f:
            f.write(FAKE_SMOKE)
        os.chmod(smoke, 0o755)
        for d in ('docker', 'services', 'libs'):
            self.write(f'{d}/a.txt', 'one')
        self.git('init', '-q', '-b', 'main')
        self.commit('first')

    def git(self, *args):
        return testlib.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t', *args], cwd=self.repo).stdout.strip()

    def write(self, path, text):
        with open(os.path.join(self.repo, path), 'w') as f:
            f.write(text)

    def commit(self, msg):
        self.git('add', '-A')
        self.git('commit', '-q', '-m', msg)
        return self.git('rev-parse', 'HEAD')

    def ci(self, *args, **env):
        full_env = dict(os.environ, CI_STATE_DIR=self.state, SMOKE_RUNS=self.runs_file, **env)
        full_env.pop('SMOKE', None)
        full_env.update(env)
        p = subprocess.run([os.path.join(self.repo, 'scripts', 'smoke_ci.sh'), *args], cwd=self.repo,
                           capture_output=True, text=True, env=full_env, timeout=120)
        return p.returncode, p.stdout + p.stderr

    def runs(self):
        if not os.path.exists(self.runs_file):
            return 0
        with open(self.runs_file) as f:
            return len(f.read().splitlines())

    def test_no_record_runs_then_a_green_main_is_recorded(self):
        rc, out = self.ci()
        self.assertEqual((rc, self.runs()), (0, 1), out)
        self.assertIn('no green main recorded in', out)
        rc, out = self.ci('record')
        self.assertEqual(rc, 0, out)
        with open(os.path.join(self.state, 'last-green-main')) as f:
            self.assertEqual(f.read().strip(), self.git('rev-parse', 'HEAD'))

    def test_runs_only_when_docker_deploy_or_services_changed(self):
        self.ci('record')
        rc, out = self.ci()
        self.assertEqual((rc, self.runs()), (0, 0), out)
        self.assertIn('smoke_ci: skipped', out)
        self.write('libs/a.txt', 'two')
        self.commit('libs only')
        rc, out = self.ci()
        self.assertEqual((rc, self.runs()), (0, 0), out)
        for n, path in enumerate(('services/a.txt', 'docker/a.txt', 'deploy/env.example'), start=1):
            self.write(path, f'changed {n}')
            self.commit(f'change {path}')
            rc, out = self.ci()
            self.assertEqual((rc, self.runs()), (0, n), out)
            self.assertIn('changed since the last green main', out)
        # A push of several commits: still compared with the recorded commit, not HEAD~1.
        self.ci('record')
        self.write('services/a.txt', 'again')
        self.commit('services again')
        self.write('libs/a.txt', 'three')
        self.commit('libs on top')
        rc, out = self.ci()
        self.assertEqual((rc, self.runs()), (0, 4), out)

    def test_uncommitted_edits_count(self):
        self.ci('record')
        self.write('docker/a.txt', 'edited')
        rc, out = self.ci()
        self.assertEqual((rc, self.runs()), (0, 1), out)

    def test_a_branch_compares_with_main_and_does_not_record(self):
        self.ci('record')
        main = self.git('rev-parse', 'HEAD')
        self.git('checkout', '-q', '-b', 'feature')
        self.write('deploy/x.yml', 'x')
        self.commit('feature')
        rc, out = self.ci()
        self.assertEqual((rc, self.runs()), (0, 1), out)
        self.ci('record')
        with open(os.path.join(self.state, 'last-green-main')) as f:
            self.assertEqual(f.read().strip(), main)

    def test_a_record_missing_from_the_clone_runs(self):
        os.makedirs(self.state)
        with open(os.path.join(self.state, 'last-green-main'), 'w') as f:
            f.write('0123456789abcdef0123456789abcdef01234567\n')
        rc, out = self.ci()
        self.assertEqual((rc, self.runs()), (0, 1), out)
        self.assertIn('is not in this clone', out)

    def test_overrides_failure_and_budget(self):
        self.ci('record')
        rc, out = self.ci(SMOKE='always')
        self.assertEqual((rc, self.runs()), (0, 1), out)
        self.write('docker/a.txt', 'edited')
        rc, out = self.ci(SMOKE='never')
        self.assertEqual((rc, self.runs()), (0, 1), out)
        rc, out = self.ci(SMOKE='sometimes')
        self.assertEqual(rc, 2, out)
        self.assertIn("SMOKE='sometimes': expected auto, always or never", out)
        rc, out = self.ci(SMOKE_RC='3')
        self.assertEqual((rc, self.runs()), (3, 2), out)
        rc, out = self.ci(SMOKE_HANG='1', SMOKE_BUDGET='1')
        self.assertEqual(rc, 124, out)
        self.assertIn('ran past its budget of 1s', out)
        # 77: the host cannot run the test (no runtime, no root, a cold image build past its
        # budget): reported and skipped, CI stays green; the build budget reaches the smoke.
        rc, out = self.ci(SMOKE_RC='77')
        self.assertEqual(rc, 0, out)
        self.assertIn('SKIPPED: this host cannot run the smoke test now', out)
        self.assertIn('(rc 77)', out)
        self.assertIn('build budget 1200', out)

    def test_a_skipped_smoke_is_not_recorded_as_green(self):
        first = self.git('rev-parse', 'HEAD')
        self.ci('record')
        self.write('services/a.txt', 'edited')
        second = self.commit('second')
        # Needed, but the host could not run it (77): the record stays at the first commit...
        rc, out = self.ci(SMOKE_RC='77')
        self.assertEqual((rc, self.runs()), (0, 1), out)
        rc, out = self.ci('record')
        self.assertIn('not recorded: the smoke was needed and skipped', out)
        with open(os.path.join(self.state, 'last-green-main')) as f:
            self.assertEqual(f.read().strip(), first)
        # ...so the next run still sees services/ changed and runs it; once it passes, HEAD is.
        rc, out = self.ci()
        self.assertEqual((rc, self.runs()), (0, 2), out)
        self.ci('record')
        with open(os.path.join(self.state, 'last-green-main')) as f:
            self.assertEqual(f.read().strip(), second)
        # CI's own time budget (`skip`) keeps the record the same way.
        self.write('deploy/b.txt', 'new')
        self.commit('third')
        rc, out = self.ci('skip', 'out of time')
        self.assertEqual(rc, 0, out)
        rc, out = self.ci('record')
        self.assertIn('(out of time)', out)
        with open(os.path.join(self.state, 'last-green-main')) as f:
            self.assertEqual(f.read().strip(), second)


if __name__ == '__main__':
    unittest.main()
