"""Offline checks of what the deploy files expose (docs/SECURITY.md): every colibri listener in
compose, k8s and the images binds an explicitly chosen address, plaintext gRPC off loopback is an
explicit --insecure (or the links run mutual TLS), published compose ports default to the host's
loopback, Grafana has no default admin password, Prometheus has no lifecycle API, and k8s runs
mutual TLS with a NetworkPolicy in front of compute and the stores.
"""
import glob
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

DEPLOY = os.path.join(testlib.REPO, 'deploy')
K8S = os.path.join(DEPLOY, 'k8s')

try:
    import yaml
except ImportError as e:  # pragma: no cover
    raise unittest.SkipTest(f'{e.name} missing (apt-get install python3-yaml)')

# The gRPC and HTTP listeners of each colibri binary and the flag that sets each one's address.
BIND_FLAGS = {
    'colibri-expert-store': ('--listen', '--metrics-host'),
    'colibri-compute': ('--listen', '--metrics-host'),
    'colibri-router': ('--host', '--grpc-listen'),
}
TLS_FLAGS = ('--tls-cert', '--tls-key', '--tls-ca')


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def command_text(service):
    """The command of a compose service as one string (list or shell form)."""
    cmd = service.get('command', [])
    return ' '.join(cmd) if isinstance(cmd, list) else cmd


def flags_of(text):
    """The --flag names in a command line (`--a=b` and `--a b` alike)."""
    return set(re.findall(r'(--[a-z][a-z0-9-]*)', text))


class ComposeExposureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.compose = load(os.path.join(DEPLOY, 'docker-compose.yml'))['services']
        cls.tls = load(os.path.join(DEPLOY, 'docker-compose.tls.yml'))['services']

    def test_every_listener_binds_explicitly_and_plaintext_is_explicit(self):
        binaries = {'expert-store': 'colibri-expert-store', 'compute': 'colibri-compute', 'router': 'colibri-router'}
        for name, binary in binaries.items():
            flags = flags_of(command_text(self.compose[name]))
            for f in BIND_FLAGS[binary]:
                self.assertIn(f, flags, f'compose {name}: {f} not set explicitly')
            self.assertIn('--insecure', flags, f'compose {name}: plaintext off loopback needs --insecure')

    def test_tls_override_gives_every_service_its_certificate(self):
        for name in ('expert-store', 'compute', 'router'):
            env = self.tls[name]['environment']
            for var in ('COLIBRI_TLS_CERT', 'COLIBRI_TLS_KEY', 'COLIBRI_TLS_CA'):
                self.assertTrue(env.get(var, '').startswith('/tls/'), (name, var, env))
            self.assertIn(f'/tls/{name}.pem', env['COLIBRI_TLS_CERT'])
            self.assertTrue(any(v.endswith(':/tls:ro') for v in self.tls[name]['volumes']), name)
        for name in ('expert-store', 'compute'):
            self.assertIn('--tls-ca /tls/ca.pem', self.tls[name]['healthcheck']['test'], name)
        self.assertEqual(self.tls['compute']['environment']['COLIBRI_TLS_SERVER_NAME'], 'expert-store')

    def test_published_ports_default_to_loopback(self):
        published = 0
        for name, service in self.compose.items():
            for port in service.get('ports', []):
                published += 1
                self.assertTrue(port.startswith('${PUBLISH_HOST:-127.0.0.1}:'), f'{name}: {port}')
        self.assertGreaterEqual(published, 4)

    def test_grafana_has_no_default_admin_password(self):
        env = self.compose['grafana']['environment']
        password = env['GF_SECURITY_ADMIN_PASSWORD']
        self.assertRegex(password, r'^\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}$')
        self.assertEqual(env.get('GF_AUTH_ANONYMOUS_ORG_ROLE'), 'Viewer')
        with open(os.path.join(DEPLOY, 'env.example')) as f:
            example = f.read()
        self.assertRegex(example, r'(?m)^GRAFANA_ADMIN_PASSWORD=$')
        self.assertNotRegex(example, r'(?mi)^GRAFANA_ADMIN_PASSWORD=admin\b')

    def test_prometheus_has_no_lifecycle_api(self):
        self.assertNotIn('--web.enable-lifecycle', command_text(self.compose['prometheus']))
        self.assertNotIn('--web.enable-admin-api', command_text(self.compose['prometheus']))

    def test_router_takes_its_key_from_the_environment(self):
        self.assertEqual(self.compose['router']['environment']['COLIBRI_API_KEY'], '${COLIBRI_API_KEY}')
        # podman-compose 1.0 substitutes ${VAR:-default} only with a non-empty default.
        with open(os.path.join(DEPLOY, 'docker-compose.yml')) as f:
            self.assertNotRegex(f.read(), r'\$\{[A-Za-z_][A-Za-z0-9_]*:?-\}')


class ImageDefaultsTest(unittest.TestCase):
    def test_image_commands_bind_explicitly(self):
        for binary, dockerfile in (('colibri-expert-store', 'Dockerfile.expert-store'),
                                   ('colibri-compute', 'Dockerfile.compute'), ('colibri-router', 'Dockerfile.router')):
            with open(os.path.join(testlib.REPO, 'docker', dockerfile)) as f:
                cmd = [line for line in f if line.startswith('CMD [') and 'colibri-health' not in line][-1]
            flags = flags_of(cmd)
            for flag in BIND_FLAGS[binary]:
                self.assertIn(flag, flags, f'{dockerfile}: {flag}')
            self.assertIn('--insecure', flags, dockerfile)


class K8sExposureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = {}
        for path in glob.glob(os.path.join(K8S, '*.yaml')):
            with open(path) as f:
                for d in yaml.safe_load_all(f):
                    if d and 'kind' in d and 'metadata' in d:
                        cls.objects[(d['kind'], d['metadata']['name'])] = d

    def container(self, kind, name):
        return self.objects[(kind, name)]['spec']['template']['spec']['containers'][0]

    def test_every_listener_binds_explicitly_with_mutual_tls(self):
        for kind, name, binary in (('StatefulSet', 'expert-store', 'colibri-expert-store'),
                                   ('Deployment', 'compute', 'colibri-compute'),
                                   ('Deployment', 'router', 'colibri-router')):
            c = self.container(kind, name)
            flags = flags_of(' '.join(c['args']))
            for f in (*BIND_FLAGS[binary], *TLS_FLAGS):
                self.assertIn(f, flags, f'k8s {name}: {f}')
            self.assertNotIn('--insecure', flags, f'k8s {name} runs mutual TLS')
            volumes = self.objects[(kind, name)]['spec']['template']['spec']['volumes']
            self.assertIn({'name': 'tls', 'secret': {'secretName': 'colibri-tls', 'defaultMode': 0o440}}, volumes)
            for probe in ('readinessProbe', 'livenessProbe'):
                command = c[probe].get('exec', {}).get('command')
                if command and command[:2] == ['colibri-health', 'grpc']:
                    self.assertIn('--tls-cert', command, f'{name} {probe}')
        self.assertIn('--tls-server-name=expert-store', self.container('Deployment', 'compute')['args'])

    def test_network_policy_guards_compute_and_stores(self):
        store = self.objects[('NetworkPolicy', 'expert-store')]['spec']
        compute = self.objects[('NetworkPolicy', 'compute')]['spec']

        def grpc_sources(spec, port):
            return [rule.get('from') for rule in spec['ingress'] if {'port': port} in rule.get('ports', [])]
        self.assertEqual(grpc_sources(store, 50051), [[{'podSelector': {'matchLabels': {
            'app.kubernetes.io/name': 'compute'}}}]])
        self.assertEqual(grpc_sources(compute, 50052), [[{'podSelector': {'matchLabels': {
            'app.kubernetes.io/name': 'router'}}}]])
        self.assertEqual(store['podSelector']['matchLabels']['app.kubernetes.io/name'], 'expert-store')
        self.assertEqual(compute['policyTypes'], ['Ingress'])

    def test_router_key_comes_from_a_secret(self):
        env = {e['name']: e for e in self.container('Deployment', 'router')['env']}
        self.assertEqual(env['COLIBRI_API_KEY']['valueFrom']['secretKeyRef']['name'], 'colibri-api-key')


if __name__ == '__main__':
    unittest.main()
