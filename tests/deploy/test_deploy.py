"""Deployment checks CI can run without a container engine:

- every service's real /metrics (the three services started on loopback with a tiny model, after
  a chat completion) passes `promtool check metrics`, and has the families the dashboards and
  rules need (the queue gauges and the per-layer expert heat, with values);
- `promtool check config deploy/prometheus.yml`, `promtool check rules`, `promtool test rules`;
- every metric a recording/alerting rule or a Grafana panel queries exists in the services'
  /metrics or is a recording rule; the dashboards are valid JSON with a query on every panel;
- `docker-compose config -q` on deploy/docker-compose.yml (Debian's docker-compose).

A missing tool (promtool from Debian's prometheus, docker-compose) skips its test, saying which
package to install (scripts/install-deps.sh installs both).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

REPO = testlib.REPO
DEPLOY = os.path.join(REPO, 'deploy')
RULES = os.path.join(DEPLOY, 'prometheus', 'colibri.rules.yml')
RULES_TEST = os.path.join(DEPLOY, 'prometheus', 'tests', 'colibri.rules.test.yml')
DASHBOARDS = sorted(glob.glob(os.path.join(DEPLOY, 'grafana', 'dashboards', '*.json')))
DATASOURCES = os.path.join(DEPLOY, 'grafana', 'provisioning', 'datasources', 'prometheus.yml')


def tool(name, package):
    path = shutil.which(name)
    if path is None:
        raise unittest.SkipTest(f'{name} not installed (apt-get install {package}; scripts/install-deps.sh does)')
    return path


def families(text):
    """Metric family name -> type, from an exposition's # TYPE lines."""
    out = {}
    for line in text.splitlines():
        if line.startswith('# TYPE '):
            _, _, name, kind = line.split(' ', 3)
            out[name] = kind
    return out


def series_names(fams):
    """Every series name a PromQL query may use for these families (histogram parts included)."""
    names = set()
    for name, kind in fams.items():
        names.add(name)
        if kind == 'histogram':
            names |= {name + '_bucket', name + '_sum', name + '_count'}
        if kind == 'summary':
            names |= {name + '_sum', name + '_count'}
    return names


PROMQL_FUNCS_AND_WORDS = {
    'sum', 'rate', 'increase', 'irate', 'by', 'without', 'max', 'min', 'avg', 'count', 'and', 'or', 'unless',
    'histogram_quantile', 'clamp_min', 'clamp_max', 'round', 'topk', 'bottomk', 'offset', 'on', 'ignoring',
    'group_left', 'group_right', 'abs', 'delta', 'deriv', 'avg_over_time', 'max_over_time', 'min_over_time',
    'label_replace', 'vector', 'scalar', 'time', 'bool', 'le', 'absent',
}


def referenced_metrics(expr):
    """Metric names a PromQL expression reads: identifiers outside label matchers, strings,
    grouping clauses and durations, that are not functions or keywords."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r'\{[^}]*\}', '', e)
    e = re.sub(r'\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', '', e)
    e = re.sub(r'\[[^\]]*\]', '', e)
    names = set()
    for m in re.finditer(r'[A-Za-z_:][A-Za-z0-9_:]*', e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if word in PROMQL_FUNCS_AND_WORDS or rest.startswith('('):
            continue
        if re.fullmatch(r'\d+[smhdwy]', word):
            continue
        names.add(word)
    return names


def rule_exprs():
    """(kind, name, expr) of every rule in the rules file, read with docker-compose's python3-yaml
    when present, else a small indentation-based reader of this file's shape."""
    with open(RULES) as f:
        text = f.read()
    try:
        import yaml
        doc = yaml.safe_load(text)
        out = []
        for g in doc['groups']:
            for r in g['rules']:
                out.append(('record' if 'record' in r else 'alert', r.get('record') or r.get('alert'), r['expr']))
        return out
    except ImportError:
        pass
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r'\s*- (record|alert): (\S+)', lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not re.match(r'\s*expr:', lines[j]):
                j += 1
            first = lines[j].split('expr:', 1)[1].strip()
            indent = len(lines[j]) - len(lines[j].lstrip())
            expr = [] if first in ('>-', '|', '>') else [first]
            k = j + 1
            while first in ('>-', '|', '>') and k < len(lines) and (len(lines[k]) - len(lines[k].lstrip()) > indent):
                expr.append(lines[k].strip())
                k += 1
            out.append((m.group(1), m.group(2), ' '.join(expr)))
            i = k
        else:
            i += 1
    return out


class StaticConfigTest(unittest.TestCase):
    """Checks that need no running service."""

    def test_prometheus_config(self):
        promtool = tool('promtool', 'prometheus')
        p = testlib.run([promtool, 'check', 'config', os.path.join(DEPLOY, 'prometheus.yml')])
        self.assertIn('SUCCESS', p.stdout + p.stderr)
        self.assertIn('rules found', p.stdout + p.stderr)

    def test_rules_check_and_unit_tests(self):
        promtool = tool('promtool', 'prometheus')
        p = testlib.run([promtool, 'check', 'rules', RULES])
        n = int(re.search(r'SUCCESS: (\d+) rules found', p.stdout + p.stderr).group(1))
        self.assertEqual(n, len(rule_exprs()))
        p = testlib.run([promtool, 'test', 'rules', RULES_TEST])
        self.assertIn('SUCCESS', p.stdout + p.stderr)
        # Every alert the issue names has a unit test that expects it to fire.
        with open(RULES_TEST) as f:
            tests = f.read()
        alerts = [name for kind, name, _ in rule_exprs() if kind == 'alert']
        self.assertEqual(sorted(alerts), sorted(['ColibriTargetDown', 'ColibriExpertStoreDown', 'ColibriChecksumFailures',
                                                 'ColibriExpertCacheHitRateCollapse', 'ColibriRequestQueueSaturated',
                                                 'ColibriRequestsRejected']))
        for a in alerts:
            self.assertIn(f'alertname: {a}\n        exp_alerts:\n          - exp_labels', tests, a)

    def test_compose_config(self):
        compose = tool('docker-compose', 'docker-compose')
        env = {k: v for k, v in os.environ.items() if not k.startswith(('STORE_', 'MODEL', 'COMPOSE_', 'GRAFANA_'))}
        # Grafana has no default admin password: without one the file does not configure.
        p = subprocess.run([compose, '-f', os.path.join(DEPLOY, 'docker-compose.yml'), 'config', '-q'],
                           capture_output=True, text=True, env=env, cwd=DEPLOY)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('GRAFANA_ADMIN_PASSWORD', p.stderr)
        env['GRAFANA_ADMIN_PASSWORD'] = 'test-only-password'
        p = subprocess.run([compose, '-f', os.path.join(DEPLOY, 'docker-compose.yml'), 'config', '-q'],
                           capture_output=True, text=True, env=env, cwd=DEPLOY)
        self.assertEqual(p.returncode, 0, p.stderr)
        # The mutual TLS override configures on top of it.
        p = subprocess.run([compose, '-f', os.path.join(DEPLOY, 'docker-compose.yml'), '-f',
                            os.path.join(DEPLOY, 'docker-compose.tls.yml'), 'config'],
                           capture_output=True, text=True, env=env, cwd=DEPLOY)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn('COLIBRI_TLS_SERVER_NAME: expert-store', p.stdout)
        p = subprocess.run([compose, '-f', os.path.join(DEPLOY, 'docker-compose.yml'), 'config', '--services'],
                           capture_output=True, text=True, env=env, cwd=DEPLOY)
        self.assertEqual(sorted(p.stdout.split()),
                         ['compute', 'convert', 'expert-store', 'grafana', 'prometheus', 'router'])
        # The example .env is what the README tells users to copy: it must configure the same file.
        env_file = os.path.join(DEPLOY, 'env.example')  # (GRAFANA_ADMIN_PASSWORD from env above)
        p = subprocess.run([compose, '-f', os.path.join(DEPLOY, 'docker-compose.yml'), '--env-file', env_file,
                            'config'], capture_output=True, text=True, env=env, cwd=DEPLOY)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn('replicas: 2', p.stdout)
        self.assertIn('--store-dns expert-store:50051', p.stdout)

    def test_dashboards_are_grafana_json_with_a_query_per_panel(self):
        self.assertTrue(DASHBOARDS, 'no dashboard in deploy/grafana/dashboards')
        with open(DATASOURCES) as f:
            uid = re.search(r'uid:\s*(\S+)', f.read()).group(1)
        for path in DASHBOARDS:
            with open(path) as f:
                dash = json.load(f)
            self.assertTrue(dash.get('uid') and dash.get('title'), path)
            ids = [p['id'] for p in dash['panels']]
            self.assertEqual(len(ids), len(set(ids)), f'{path}: duplicate panel ids')
            for p in dash['panels']:
                if p['type'] == 'row':
                    continue
                self.assertTrue(p.get('targets'), f'{path}: panel "{p["title"]}" has no query')
                for t in p['targets']:
                    self.assertTrue(t.get('expr', '').strip(), f'{path}: panel "{p["title"]}" has an empty query')
                    self.assertEqual(t['datasource']['uid'], uid, p['title'])
                g = p['gridPos']
                self.assertLessEqual(g['x'] + g['w'], 24, p['title'])

    def test_dashboard_covers_the_issue_panels(self):
        with open(os.path.join(DEPLOY, 'grafana', 'dashboards', 'colibri-overview.json')) as f:
            dash = json.load(f)
        titles = {p['title'] for p in dash['panels']}
        for want in ['Tokens/s', 'Time to first token', 'Request queue', 'Hit rate per tier',
                     'Prefetch precision and coverage', 'Expert stall per token', 'Bytes read per disk',
                     'Bytes per store node', 'Checksum failures', 'VRAM, RAM and KV usage',
                     'Expert heat per layer: hot-set size']:
            self.assertIn(want, titles)
        heat = [p for p in dash['panels'] if p['title'] == 'Expert heat per layer: hot-set size'][0]
        self.assertEqual(heat['type'], 'heatmap')

    def test_promql_reader(self):
        self.assertEqual(referenced_metrics('sum by (instance, tier) (rate(a_total{result="hit"}[5m])) / b:c:rate5m'),
                         {'a_total', 'b:c:rate5m'})
        self.assertEqual(referenced_metrics('histogram_quantile(0.95, sum by (le) (rate(x_bucket[5m])))'),
                         {'x_bucket'})
        self.assertEqual(referenced_metrics('up{job=~"colibri-.*"} == 0'), {'up'})


class LiveMetricsTest(testlib.ServicesTestCase):
    """The three services on loopback (the store serving two imported disks), one chat completion."""

    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-deploy-')
        try:
            hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), 'mixtral', 'micro', 'f32')
            cls.model = testlib.convert(hf, os.path.join(cls.dir, 'demo'), 'f32')
            disks = [os.path.join(cls.dir, 'disk0'), os.path.join(cls.dir, 'disk1')]
            for d in disks:
                os.makedirs(d)
            disk_flags = [a for d in disks for a in ('--disk', d)]
            testlib.run([testlib.binary('colibri-expert-store'), 'import', '--model', cls.model, *disk_flags])
            store = cls.start('colibri-expert-store', [*disk_flags, '--listen', '127.0.0.1:0', '--metrics-port', '0'],
                              ('--port-file', '--metrics-port-file'))
            # --store-dns with a numeric name: the discovery path without a DNS server.
            compute = cls.start('colibri-compute', ['--model', cls.model, '--store-dns', f'127.0.0.1:{store.port()}',
                                                    '--listen', '127.0.0.1:0', '--expert-cache-size', '300K',
                                                    '--metrics-port', '0', '--threads', '2', '--routing-heat', 'none'],
                                ('--port-file', '--metrics-port-file'))
            router = cls.start('colibri-router', ['--model', cls.model, '--compute', f'127.0.0.1:{compute.port()}',
                                                  '--port', '0', '--host', '127.0.0.1', '--grpc-listen', '127.0.0.1:0'],
                               ('--port-file', '--grpc-port-file'))
            url = f'http://127.0.0.1:{router.port()}'
            status, body = testlib.http('POST', url + '/v1/chat/completions', {
                'messages': [{'role': 'user', 'content': 'Hello there'}], 'max_tokens': 8, 'temperature': 0})
            if status != 200:
                raise AssertionError(f'chat completion: {status} {body}')
            cls.completion = json.loads(body)
            cls.metrics = {
                'store': testlib.http('GET', f'http://127.0.0.1:{store.port("--metrics-port-file")}/metrics')[1],
                'compute': testlib.http('GET', f'http://127.0.0.1:{compute.port("--metrics-port-file")}/metrics')[1],
                'router': testlib.http('GET', url + '/metrics')[1],
            }
            with open(os.path.join(cls.model, 'manifest.json')) as f:
                cls.config = json.load(f)['config']
        except BaseException:
            cls.tearDownClass()
            raise

    def test_promtool_check_metrics(self):
        promtool = tool('promtool', 'prometheus')
        for service, text in self.metrics.items():
            self.assertIn(f'colibri_{"store" if service == "store" else service}_', text)
            p = subprocess.run([promtool, 'check', 'metrics'], input=text, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, f'{service}: {p.stdout}{p.stderr}')
            self.assertEqual((p.stdout + p.stderr).strip(), '', f'{service} /metrics lint: {p.stdout}{p.stderr}')

    def test_queue_and_heat_metrics_have_values(self):
        c = self.metrics['compute']
        self.assertEqual(testlib.metric(c, 'colibri_compute_pending_requests_limit'), 64)
        self.assertEqual(testlib.metric(c, 'colibri_compute_pending_requests'), 0)
        n_layers, n_experts, top_k = (int(self.config[k]) for k in ('n_layers', 'n_experts', 'top_k'))
        for layer in range(n_layers):
            hot = testlib.metric(c, 'colibri_compute_expert_hot_set_experts', f'layer="{layer}"')
            share = testlib.metric(c, 'colibri_compute_expert_heat_top_k_ratio', f'layer="{layer}"')
            # After a completion every layer was routed: at least top_k experts, at most all.
            self.assertGreaterEqual(hot, top_k, layer)
            self.assertLessEqual(hot, n_experts, layer)
            self.assertGreater(share, 0, layer)
            self.assertLessEqual(share, 1 + 1e-9, layer)
        heat_lines = [ln for ln in c.splitlines() if ln.startswith('colibri_compute_expert_hot_set_experts{')]
        self.assertEqual(len(heat_lines), n_layers)  # one series per layer: bounded cardinality
        # Discovery found the store through --store-dns and reads from it.
        self.assertEqual(testlib.metric(c, 'colibri_compute_store_up'), 1)
        self.assertGreater(testlib.metric(c, 'colibri_compute_store_received_bytes_total'), 0)
        s = self.metrics['store']
        per_disk = {}
        for ln in s.splitlines():
            m = re.match(r'colibri_store_disk_read_bytes_total\{disk="([^"]+)"\} (\S+)', ln)
            if m:
                per_disk[m.group(1)] = float(m.group(2))
        self.assertEqual(len(per_disk), 2, per_disk)  # both disks of the node read (striped)
        self.assertTrue(all(v > 0 for v in per_disk.values()), per_disk)
        self.assertEqual(self.completion['usage']['completion_tokens'], 8)

    def test_rules_and_dashboards_query_existing_metrics(self):
        known = set()
        for text in self.metrics.values():
            known |= series_names(families(text))
        recorded = {name for kind, name, _ in rule_exprs() if kind == 'record'}
        known |= recorded | {'up'}
        missing = {}
        for kind, name, expr in rule_exprs():
            for m in referenced_metrics(expr) - known:
                missing.setdefault(m, []).append(f'rule {name}')
        for path in DASHBOARDS:
            with open(path) as f:
                dash = json.load(f)
            for p in dash['panels']:
                for t in p.get('targets', []):
                    for m in referenced_metrics(t['expr']) - known:
                        missing.setdefault(m, []).append(f'{os.path.basename(path)} panel "{p["title"]}"')
        self.assertEqual(missing, {}, 'queried metrics that no service exports and no rule records')
        # And the dashboards use the recording rules (what Grafana should read, not raw rates).
        used = set()
        for path in DASHBOARDS:
            with open(path) as f:
                for p in json.load(f)['panels']:
                    for t in p.get('targets', []):
                        used |= referenced_metrics(t['expr'])
        self.assertGreaterEqual(len(used & recorded), 10)


if __name__ == '__main__':
    unittest.main()
