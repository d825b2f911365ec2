"""Shared helpers for colibri's cross-module tests (golden, integration, fault).

Run with Debian's /usr/bin/python3 (numpy from python3-numpy). The built binaries are found in
$COLIBRI_BIN_DIR (CTest sets it), else build/bin under the repository root.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get('COLIBRI_BIN_DIR', os.path.join(REPO, 'build', 'bin'))
PY = '/usr/bin/python3'
ORACLE = os.environ.get('COLIBRI_ORACLE_DIR', os.path.join(os.path.dirname(REPO), 'shared', 'oracle'))

sys.path.insert(0, os.path.join(REPO, 'tests', 'reference'))


def binary(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f'{path} not built (set COLIBRI_BIN_DIR)')
    return path


def run(cmd, check=True, **kw):
    """Runs a command, returning CompletedProcess with text output; raises with its stderr."""
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f'{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}')
    return p


def gen_model(out, family='mixtral', preset='micro', dtype='f32', seed=0, extra=()):
    run([PY, os.path.join(REPO, 'tools', 'gen_tiny_model.py'), '--out', out, '--family', family,
         '--preset', preset, '--dtype', dtype, '--seed', str(seed), *extra])
    return out


def convert(hf_dir, out, quantize='f32', extra=()):
    run([binary('colibri-convert'), '--input', hf_dir, '--output', out, '--quantize', quantize, *extra])
    return out


def micro_model(workdir, name='demo'):
    """The micro Mixtral test model (f32), generated and converted under `workdir`: its directory."""
    hf = gen_model(os.path.join(workdir, 'hf'), 'mixtral', 'micro', 'f32')
    return convert(hf, os.path.join(workdir, name), 'f32')


def tool_model(workdir, name='agent', context=None):
    """The micro Mixtral test model with GLM-4.5's chat template, which renders tools, tool calls
    and tool results (the micro template renders user and assistant text only); `context`: its
    max_position_embeddings (an agent's first request needs tens of thousands of tokens)."""
    extra = ['--config-set', f'max_position_embeddings={context}'] if context else []
    hf = gen_model(os.path.join(workdir, f'hf-{name}'), 'mixtral', 'micro', 'f32', extra=extra)
    config = os.path.join(hf, 'tokenizer_config.json')
    with open(config) as f:
        tc = json.load(f)
    with open(os.path.join(REPO, 'tests', 'tokenizer', 'templates', 'glm4_5.jinja')) as f:
        tc['chat_template'] = f.read()
    with open(config, 'w') as f:
        json.dump(tc, f)
    return convert(hf, os.path.join(workdir, name), 'f32')


def disk_read_rate(model, seconds=1.0):
    """Bytes/s of random O_DIRECT reads of whole expert blocks of `model` (colibri-cli plan's disk
    probe: what a cache miss costs), for benchmarks' disk-bound limits."""
    p = run([binary('colibri-cli'), 'plan', '--model', model, '--json', '--measure-seconds', str(seconds)])
    disks = json.loads(p.stdout)['machine']['disks']
    return disks[0]['read_bytes_per_second'] if disks else 0.0


def cli_run(model, tokens, max_tokens, logits_out=None, extra=()):
    """colibri-cli run with greedy decoding; returns the generated ids."""
    cmd = [binary('colibri-cli'), 'run', '--model', model, '--prompt-tokens', ','.join(map(str, tokens)),
           '--max-tokens', str(max_tokens), '--temperature', '0', '--ignore-eos', '--threads', '2', *extra]
    if logits_out:
        cmd += ['--logits-out', logits_out]
    return json.loads(run(cmd).stdout.strip().splitlines()[-1])


def reference(hf_dir, tokens, greedy, logits_out):
    """The numpy reference: (logits [n, V] float64, greedy ids, margins)."""
    import moe_ref  # noqa: E402  (path set above)
    model = moe_ref.load_model(hf_dir)
    logits, ids, margins = moe_ref.run(model, list(tokens), greedy)
    return logits, ids, margins


class Service:
    """A colibri binary started as its own process; announces its port through --port-file."""

    def __init__(self, name, args, workdir, port_flags=('--port-file',), tag=None, env=None, wrap=()):
        """`tag` names this instance's port and log files (default: the binary's name); give one to
        run several instances of a binary in one directory. `env`: extra environment variables.
        `wrap`: a command the binary runs under (it must exec its arguments), e.g. MemoryCgroup.wrap()."""
        self.name = name
        tag = tag or name
        self.files = {flag: os.path.join(workdir, f'{tag}{flag.replace("-", "_")}') for flag in port_flags}
        for f in self.files.values():
            if os.path.exists(f):
                os.remove(f)
        cmd = [*wrap, binary(name), *args]
        for flag, f in self.files.items():
            cmd += [flag, f]
        self.log = open(os.path.join(workdir, f'{tag}.log'), 'w')
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **env) if env else None)

    def port(self, flag='--port-file', timeout=60):
        deadline = time.time() + timeout
        path = self.files[flag]
        while time.time() < deadline:
            if os.path.exists(path):
                with open(path) as f:
                    text = f.read().strip()
                if text:
                    return int(text)
            if self.proc.poll() is not None:
                raise AssertionError(f'{self.name} exited with {self.proc.returncode}: {self.read_log()}')
            time.sleep(0.05)
        raise AssertionError(f'{self.name} did not announce its port within {timeout}s: {self.read_log()}')

    def read_log(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def kill(self):
        self.proc.kill()
        self.proc.wait()


class ServicesTestCase(unittest.TestCase):
    """Tests that share services started once per class: setUpClass sets cls.dir (a tempdir) and
    starts each service with cls.start; tearDownClass stops them, newest first, and removes cls.dir."""

    @classmethod
    def start(cls, name, args, port_flags=('--port-file',)):
        if 'services' not in cls.__dict__:
            cls.services = []
        s = Service(name, args, cls.dir, port_flags)
        cls.services.append(s)
        return s

    @classmethod
    def tearDownClass(cls):
        for s in reversed(cls.__dict__.get('services', [])):
            s.stop()
        rmtree(cls.dir)


def http(method, url, body=None, headers=None, timeout=120):
    """Returns (status, body text)."""
    data = None
    hdrs = dict(headers or {})
    if body is not None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        hdrs.setdefault('Content-Type', 'application/json')
    req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def sse_events(url, body, timeout=120):
    """POSTs a streaming request; returns the list of decoded `data:` payloads (JSON or '[DONE]')."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'}, method='POST')
    events = []
    with urllib.request.urlopen(req, timeout=timeout) as r:
        assert r.headers.get('Content-Type', '').startswith('text/event-stream'), r.headers
        for raw in r:
            line = raw.decode().rstrip('\n')
            if line.startswith('data: '):
                payload = line[6:]
                events.append(payload if payload == '[DONE]' else json.loads(payload))
    return events


def stream_completion(url, body, timeout=300):
    """Streams POST /v1/completions (token ids on): {'ttft', 'token_ids', 'chunks' (events with
    text), 'finish'}. Raises RuntimeError for an error event."""
    t0 = time.time()
    out = {'ttft': None, 'token_ids': [], 'chunks': 0, 'finish': None}
    req = urllib.request.Request(url + '/v1/completions',
                                 data=json.dumps(dict(body, stream=True, return_token_ids=True)).encode(),
                                 headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith('data: {'):
                continue
            j = json.loads(line[6:])
            if 'error' in j:
                raise RuntimeError(j['error']['message'])
            for c in j['choices']:
                if c.get('text') or c.get('token_ids'):
                    out['chunks'] += 1
                    out['ttft'] = out['ttft'] or time.time() - t0
                out['token_ids'] += c.get('token_ids') or []
                out['finish'] = c.get('finish_reason') or out['finish']
    return out


def stream_decode_rate(url, prompt, n):
    """Streams a greedy completion of n tokens (EOS ignored) from the OpenAI API at `url`: (tokens/s between the first and the last streamed token, tokens, seconds
    from sending the request to its last token, the token ids)."""
    body = {'prompt': prompt, 'max_tokens': n, 'temperature': 0, 'stream': True, 'return_token_ids': True,
            'ignore_eos': True}
    req = urllib.request.Request(url + '/v1/completions', data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    stamps, ids = [], []
    sent = time.perf_counter()
    with urllib.request.urlopen(req, timeout=1800) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith('data: {'):
                for c in json.loads(line[6:])['choices']:
                    ids += c.get('token_ids', [])
                    stamps += [time.perf_counter()] * len(c.get('token_ids', []))
    if len(stamps) < 2:
        raise AssertionError(f'{url}: {len(stamps)} tokens streamed')
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), len(stamps), stamps[-1] - sent, ids


class MemoryCgroup:
    """A child memory cgroup with a hard limit (v1 memory.limit_in_bytes, or v2 memory.max with
    swap off), for tests that hold a process to a budget as docker, Kubernetes or systemd would.
    Needs root; `available()` says why not where neither hierarchy is writable."""

    V1 = '/sys/fs/cgroup/memory'
    V2 = '/sys/fs/cgroup'

    @classmethod
    def available(cls):
        """'' when a child cgroup can be made here, else the reason."""
        if os.geteuid() != 0:
            return 'not root: cannot create a memory cgroup'
        if os.path.isfile(os.path.join(cls.V1, 'memory.limit_in_bytes')) or \
                os.path.isfile(os.path.join(cls.V1, 'cgroup.procs')):
            return ''
        try:
            with open(os.path.join(cls.V2, 'cgroup.controllers')) as f:
                if 'memory' in f.read().split():
                    return ''
        except OSError:
            pass
        return 'no writable memory cgroup (v1 or v2) on this machine'

    def __init__(self, limit_bytes, tag='test'):
        self.v1 = os.path.isdir(self.V1) and os.path.exists(os.path.join(self.V1, 'cgroup.procs'))
        root = self.V1 if self.v1 else self.V2
        self.path = os.path.join(root, f'colibri-{tag}-{os.getpid()}-{int(time.time() * 1000) % 100000}')
        os.mkdir(self.path)
        self.limit = limit_bytes
        if self.v1:
            self._write('memory.limit_in_bytes', limit_bytes)
        else:
            self._write('memory.max', limit_bytes)
            try:
                self._write('memory.swap.max', 0)
            except OSError:
                pass

    def _write(self, name, value):
        with open(os.path.join(self.path, name), 'w') as f:
            f.write(str(value))

    def _read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def wrap(self):
        """A command prefix: joins this cgroup, then execs the rest (so everything it maps counts)."""
        return ['/bin/sh', '-c', f'echo $$ > {self.path}/cgroup.procs && exec "$@"', 'sh']

    def oom_kills(self):
        """Processes the kernel killed for this cgroup's limit (kernels before 4.13: OOM events)."""
        text = self._read('memory.oom_control' if self.v1 else 'memory.events')
        fields = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        if 'oom_kill' in fields:
            return int(fields['oom_kill'])
        return int(fields.get('oom', 0)) if not self.v1 else (1 if fields.get('under_oom') == '1' else 0)

    def reset_peak(self):
        """Starts usage_peak() over (v1 only; v2's memory.peak cannot be reset)."""
        if self.v1:
            self._write('memory.max_usage_in_bytes', 0)

    def usage_peak(self):
        """The cgroup's peak charge (page cache included): v1 max_usage, v2 memory.peak."""
        try:
            return int(self._read('memory.max_usage_in_bytes' if self.v1 else 'memory.peak'))
        except OSError:
            return 0

    def remove(self):
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


def size_bytes(text):
    """'512M', '1.25G', '4096' -> bytes."""
    units = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
    t = text.strip().upper().rstrip('B').rstrip('I')
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def drop_caches():
    """Drops the kernel's page cache (root); False where it cannot."""
    try:
        subprocess.run(['sync'], check=True)
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('3\n')
        return True
    except OSError:
        return False


def peak_rss(pid):
    """VmHWM of a live process, bytes."""
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) * 1024
    return 0


def metric(text, name, labels=''):
    """Sums the samples of Prometheus metric `name` in exposition `text` (optionally only the
    lines containing `labels`, e.g. 'tier="ram"')."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and len(line) > len(name) and line[len(name)] in ' {' and labels in line:
            total += float(line.rsplit(' ', 1)[1])
    return total


def tempdir(prefix):
    d = tempfile.mkdtemp(prefix=prefix)
    return d


def tempdir_in(parent, prefix):
    """A fresh directory under `parent` (e.g. /var/tmp: a real disk where /tmp may be tmpfs)."""
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


def rmtree(d):
    shutil.rmtree(d, ignore_errors=True)


def make_certs(out_dir, *names):
    """A throwaway CA and a certificate per name (scripts/make-certs.sh, with the openssl CLI):
    returns {name: [--tls-cert, PEM, --tls-key, KEY, --tls-ca, CA]} flags for each name. Made at
    test time, never committed."""
    run(['bash', os.path.join(REPO, 'scripts', 'make-certs.sh'), out_dir, *names], env=dict(os.environ, DAYS='2'))
    ca = os.path.join(out_dir, 'ca.pem')
    return {n: ['--tls-cert', os.path.join(out_dir, f'{n}.pem'), '--tls-key', os.path.join(out_dir, f'{n}.key'),
                '--tls-ca', ca] for n in names}


def write_key_file(path, keys):
    """An --api-key-file (mode 0600): a comment line, a blank line, then one key per line."""
    with open(path, 'w') as f:
        f.write('# colibri API keys\n\n' + ''.join(f'{k}\n' for k in keys))
    os.chmod(path, 0o600)
    return path


def npm_modules(name, spec, *more):
    """The node_modules directory holding npm package `spec` (e.g. 'openai@6') and any `more`,
    installed on first use into ~/.cache/colibri-npm/<name> (or $COLIBRI_NPM_CACHE/<name>),
    outside the repository; None when node or npm is missing or the registry cannot be reached
    (tests then skip)."""
    root = os.environ.get('COLIBRI_NPM_CACHE', os.path.join(os.path.expanduser('~'), '.cache', 'colibri-npm'))
    prefix = os.path.join(root, name)
    modules = os.path.join(prefix, 'node_modules')
    specs = [spec, *more]
    packages = [s.rsplit('@', 1)[0] if s.rfind('@') > 0 else s for s in specs]
    if all(os.path.isdir(os.path.join(modules, p)) for p in packages):
        return modules
    if not shutil.which('npm') or not shutil.which('node'):
        return None
    os.makedirs(prefix, exist_ok=True)
    p = subprocess.run(['npm', 'install', '--prefix', prefix, '--no-audit', '--no-fund', *specs],
                       capture_output=True, text=True, timeout=600)
    return modules if p.returncode == 0 else None


def run_node(modules, script, *args, timeout=300):
    """Runs an ES module script with node next to `modules` (ESM resolves packages beside the
    script, so a copy is run inside the install directory); returns CompletedProcess."""
    copy = os.path.join(os.path.dirname(modules), os.path.basename(script))
    shutil.copy(script, copy)
    return subprocess.run(['node', copy, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def cpu_name():
    """The CPU's model name (for bench tables)."""
    import platform
    with open('/proc/cpuinfo') as f:
        for line in f:
            if line.startswith('model name'):
                return line.split(':', 1)[1].strip()
    return platform.processor()
