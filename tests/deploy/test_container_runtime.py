"""deploy/container-runtime.sh against stub engines: it takes the first candidate (docker when its
daemon answers, podman with crun, podman with runc) that runs a trivial container, says why it
passed over the others, and writes podman's configuration with the runtime it chose.

The stubs stand in for docker, podman, crun, runc and id on a PATH that holds every other tool
of the host, so no container runs; each stub records its arguments, and the podman stub fails a
runtime the way the real one fails on a hybrid cgroup host.
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

SCRIPT = os.path.join(testlib.REPO, 'deploy', 'container-runtime.sh')
STUBBED = {'docker', 'podman', 'crun', 'runc', 'id'}
HYBRID_ERROR = 'Error: OCI runtime error: crun: cgroups in hybrid mode not supported, drop all controllers from cgroupv2'

# podman / docker: `import - IMAGE` reads the tar; `run [--runtime R] IMAGE /bin/sh -c "echo LINE"`
# prints LINE unless STUB_FAIL_<R> (R = default for docker's daemon runtime) holds an error;
# `docker info` fails unless STUB_DOCKER_DAEMON=up.
ENGINE_STUB = r'''#!/bin/bash
echo "$(basename "$0") $*" >> "$STUB_LOG"
case "$1" in
  info) [ "${STUB_DOCKER_DAEMON:-down}" = up ] && { echo 24.0.0; exit 0; }
        echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1 ;;
  import) n=$(wc -c); [ "$n" -gt 1024 ] || { echo "empty image tar" >&2; exit 1; }; echo sha256:0; exit 0 ;;
  rmi) exit 0 ;;
  run)
    shift; runtime=default
    while [ $# -gt 0 ]; do
      case "$1" in --rm) shift ;; --runtime) runtime="$2"; shift 2 ;; *) break ;; esac
    done
    var="STUB_FAIL_$runtime"
    if [ -n "${!var:-}" ]; then echo "${!var}" >&2; exit 126; fi
    [ "$2" = /bin/sh ] && [ "$3" = -c ] || { echo "unexpected command: $*" >&2; exit 125; }
    echo "${4#echo }"; exit 0 ;;
esac
echo "stub: unexpected $*" >&2; exit 125
'''
ID_STUB = '#!/bin/sh\n[ "$1" = -u ] && { echo "${STUB_UID:-0}"; exit 0; }\nexec /usr/bin/id "$@"\n'
RUNTIME_STUB = '#!/bin/sh\necho "$(basename "$0") $*" >> "$STUB_LOG"\n'


def write_exe(path, text):
    with open(path, 'w') as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class ContainerRuntimeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.host_bin = tempfile.mkdtemp(prefix='colibri-runtime-host-')
        for d in ('/usr/local/bin', '/usr/bin', '/bin', '/usr/sbin', '/sbin'):
            if not os.path.isdir(d):
                continue
            for name in os.listdir(d):
                link = os.path.join(cls.host_bin, name)
                if name not in STUBBED and not os.path.lexists(link):
                    os.symlink(os.path.join(d, name), link)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.host_bin)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix='colibri-runtime-')
        self.addCleanup(shutil.rmtree, self.dir)
        self.stubs = os.path.join(self.dir, 'stubs')
        os.mkdir(self.stubs)
        self.log = os.path.join(self.dir, 'calls.log')
        self.conf = os.path.join(self.dir, 'etc', 'containers.conf')
        write_exe(os.path.join(self.stubs, 'id'), ID_STUB)

    def install(self, *names):
        for name in names:
            write_exe(os.path.join(self.stubs, name), ENGINE_STUB if name in ('docker', 'podman') else RUNTIME_STUB)

    def run_script(self, *args, **env):
        full_env = {'PATH': f'{self.stubs}:{self.host_bin}', 'STUB_LOG': self.log, 'HOME': self.dir, **env}
        p = subprocess.run([SCRIPT, '--containers-conf', self.conf, *args], capture_output=True, text=True,
                           env=full_env, timeout=120)
        return p.returncode, p.stdout.strip(), p.stderr

    def calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return f.read().splitlines()

    def runs(self):
        return [c for c in self.calls() if ' run ' in f' {c} ']

    def conf_text(self):
        with open(self.conf) as f:
            return f.read()

    def test_hybrid_host_without_docker_daemon_takes_podman_with_runc(self):
        self.install('docker', 'podman', 'crun', 'runc')
        rc, out, err = self.run_script(STUB_FAIL_crun=HYBRID_ERROR)
        self.assertEqual((rc, out), (0, 'podman runc'), err)
        self.assertIn('docker: no daemon answers (Cannot connect to the Docker daemon', err)
        self.assertIn(f'podman crun: a trivial container fails: {HYBRID_ERROR}', err)
        self.assertIn('podman runc: runs a trivial container: using it', err)
        self.assertEqual([r.split()[:4] for r in self.runs()],
                         [['podman', 'run', '--rm', '--runtime'], ['podman', 'run', '--rm', '--runtime']])
        self.assertEqual([r.split()[4] for r in self.runs()], ['crun', 'runc'])
        conf = self.conf_text()
        self.assertIn('runtime = "runc"', conf)
        self.assertIn('cgroup_manager = "cgroupfs"', conf)
        self.assertRegex(conf, r'default_ulimits = \["nofile=\d+:\d+", "nproc=\d+:\d+"\]')

    def test_docker_with_an_answering_daemon_comes_first(self):
        self.install('docker', 'podman', 'crun', 'runc')
        rc, out, err = self.run_script(STUB_DOCKER_DAEMON='up')
        self.assertEqual((rc, out), (0, 'docker default'), err)
        self.assertEqual([c.split()[:2] for c in self.calls()],
                         [['docker', 'info'], ['docker', 'import'], ['docker', 'run'], ['docker', 'rmi']])

    def test_docker_daemon_that_cannot_run_falls_back_to_podman(self):
        self.install('docker', 'podman', 'crun', 'runc')
        rc, out, err = self.run_script(STUB_DOCKER_DAEMON='up', STUB_FAIL_default='docker: Error response from daemon: '
                                       'failed to create shim task: OCI runtime create failed')
        self.assertEqual((rc, out), (0, 'podman crun'), err)
        self.assertIn('docker default: a trivial container fails: docker: Error response from daemon', err)
        self.assertIn('runtime = "crun"', self.conf_text())

    def test_crun_absent_is_said_and_runc_taken(self):
        self.install('podman', 'runc')
        rc, out, err = self.run_script()
        self.assertEqual((rc, out), (0, 'podman runc'), err)
        self.assertIn('docker: not installed', err)
        self.assertIn('podman crun: crun not installed', err)
        self.assertEqual([r.split()[4] for r in self.runs()], ['runc'])

    def test_only_restricts_the_candidates(self):
        self.install('docker', 'podman', 'crun', 'runc')
        rc, out, err = self.run_script('--only', 'podman:runc', STUB_DOCKER_DAEMON='up')
        self.assertEqual((rc, out), (0, 'podman runc'), err)
        self.assertEqual([c.split()[0] for c in self.calls()], ['podman', 'podman', 'podman'])
        self.assertEqual([r.split()[4] for r in self.runs()], ['runc'])
        rc, out, err = self.run_script(COLIBRI_CONTAINER_ENGINE='docker', STUB_DOCKER_DAEMON='up')
        self.assertEqual((rc, out), (0, 'docker default'), err)

    def test_nothing_runs_a_container_exits_1_naming_each_reason(self):
        self.install('docker', 'podman', 'crun', 'runc')
        rc, out, err = self.run_script(STUB_FAIL_crun=HYBRID_ERROR,
                                       STUB_FAIL_runc='Error: runc: error setting rlimit type 7: operation not permitted')
        self.assertEqual((rc, out), (1, ''))
        self.assertIn('docker: no daemon answers', err)
        self.assertIn(f'podman crun: a trivial container fails: {HYBRID_ERROR}', err)
        self.assertIn('podman runc: a trivial container fails: Error: runc: error setting rlimit type 7', err)
        self.assertIn('no container engine and runtime here can run a container '
                      '(candidates: docker podman:crun podman:runc)', err)

    def test_podman_needs_root(self):
        self.install('podman', 'crun', 'runc')
        rc, out, err = self.run_script(STUB_UID='1000')
        self.assertEqual(rc, 1, err)
        self.assertIn('podman crun: needs root (rootful podman)', err)
        self.assertEqual(self.runs(), [])

    def test_bad_arguments_are_refused(self):
        rc, _, err = self.run_script('--only', 'lxc')
        self.assertEqual(rc, 2)
        self.assertIn("--only 'lxc': expected docker, podman, podman:crun or podman:runc", err)
        rc, _, err = self.run_script('--bogus')
        self.assertEqual(rc, 2)
        self.assertIn("unknown argument '--bogus'", err)


if __name__ == '__main__':
    unittest.main()
