"""Security: mutual TLS on the cluster links. A throwaway CA and one certificate per service are made
with the openssl CLI at test time (scripts/make-certs.sh); store, compute and router run with
--tls-cert/--tls-key/--tls-ca, so router -> compute -> store and clients -> router are TLS with
client certificates. Generation works across the links; a client without a certificate, with a
certificate of another CA, or in plaintext is refused on every gRPC port.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                'tools'))
import testlib  # noqa: E402
import router_client  # noqa: E402

KEY = 'tls-test-key-0c9e'
HEALTH = '/grpc.health.v1.Health/Check'


def read(path):
    with open(path, 'rb') as f:
        return f.read()


class MutualTlsTest(testlib.ServicesTestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-tls-')
        cls.model = testlib.micro_model(cls.dir)
        cls.pki = os.path.join(cls.dir, 'pki')
        cls.tls = testlib.make_certs(cls.pki, 'expert-store', 'compute', 'router', 'client')
        cls.rogue = testlib.make_certs(os.path.join(cls.dir, 'rogue'), 'client')['client']
        store = cls.start('colibri-expert-store', ['--model', cls.model, '--listen', '127.0.0.1:0',
                                                   '--metrics-port', '-1', *cls.tls['expert-store']])
        cls.store_target = f'127.0.0.1:{store.port()}'
        # A cache of three expert blocks (of 16): experts really stream over the TLS link.
        compute = cls.start('colibri-compute', ['--model', cls.model, '--store', cls.store_target,
                                                '--listen', '127.0.0.1:0', '--expert-cache-size', '300K',
                                                '--metrics-port', '0', '--threads', '2', *cls.tls['compute']],
                            ('--port-file', '--metrics-port-file'))
        cls.compute_target = f'127.0.0.1:{compute.port()}'
        router = cls.start('colibri-router', ['--model', cls.model, '--compute', cls.compute_target, '--port', '0',
                                              '--grpc-listen', '127.0.0.1:0', '--api-key', KEY, *cls.tls['router']],
                           ('--port-file', '--grpc-port-file'))
        cls.router_target = f'127.0.0.1:{router.port("--grpc-port-file")}'
        cls.url = f'http://127.0.0.1:{router.port()}'
        cls.compute = compute
        cls.pb = router_client.load_protos()

    def files(self, flags):
        """{cert, key, ca} paths of a make_certs flag list."""
        return dict(zip(('cert', 'key', 'ca'), flags[1::2]))

    def health(self, target, credentials):
        """grpc.health.v1.Health/Check over `credentials` (None: plaintext): the status code."""
        import grpc
        channel = grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)
        with channel:
            try:
                channel.unary_unary(HEALTH)(b'', timeout=10)
                return grpc.StatusCode.OK
            except grpc.RpcError as e:
                return e.code()

    def test_generation_runs_over_mutual_tls(self):
        status, text = testlib.http('POST', self.url + '/v1/completions',
                                    {'prompt': [1, 275, 290, 300, 13], 'max_tokens': 8, 'temperature': 0,
                                     'return_token_ids': True},
                                    {'Authorization': f'Bearer {KEY}'})
        self.assertEqual(status, 200, text)
        self.assertEqual(json.loads(text)['usage']['completion_tokens'], 8)
        metrics = testlib.http('GET', f'http://127.0.0.1:{self.compute.port("--metrics-port-file")}/metrics')[1]
        self.assertGreater(testlib.metric(metrics, 'colibri_compute_store_received_bytes_total'), 0)
        # The Router gRPC API: client certificate and key.
        c = self.files(self.tls['client'])
        auth = router_client.Auth(api_key=KEY, tls_cert=c['cert'], tls_key=c['key'], tls_ca=c['ca'])
        req = self.pb.RouterGenerateRequest()
        req.tokens.ids.extend([1, 275, 290, 300, 13])
        req.stop.max_tokens = 8
        got = router_client.collect(router_client.stream(self.router_target, 'Generate', req, auth=auth), echo=False)
        self.assertEqual(got['token_ids'], json.loads(text)['choices'][0]['token_ids'])

    def test_a_client_without_a_valid_certificate_is_refused_on_every_port(self):
        import grpc
        c, r = self.files(self.tls['client']), self.files(self.rogue)
        good = grpc.ssl_channel_credentials(read(c['ca']), read(c['key']), read(c['cert']))
        no_cert = grpc.ssl_channel_credentials(read(c['ca']))
        other_ca = grpc.ssl_channel_credentials(read(c['ca']), read(r['key']), read(r['cert']))
        for target in (self.store_target, self.compute_target, self.router_target):
            self.assertEqual(self.health(target, good), grpc.StatusCode.OK, target)
            for name, creds in (('plaintext', None), ('no client certificate', no_cert),
                                ('certificate of another CA', other_ca)):
                self.assertEqual(self.health(target, creds), grpc.StatusCode.UNAVAILABLE, (target, name))

    def test_health_tool_speaks_tls(self):
        ok = testlib.run([testlib.binary('colibri-health'), 'grpc', self.compute_target, *self.tls['compute']])
        self.assertIn('SERVING', ok.stdout)
        plain = testlib.run([testlib.binary('colibri-health'), 'grpc', self.compute_target, '--timeout', '5'],
                            check=False)
        self.assertEqual(plain.returncode, 2, plain.stdout)

    def test_a_plaintext_compute_cannot_use_a_tls_store(self):
        p = testlib.run([testlib.binary('colibri-compute'), '--model', self.model, '--store', self.store_target,
                         '--listen', '127.0.0.1:0', '--metrics-port', '-1', '--threads', '2'], check=False, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('not reachable', p.stdout + p.stderr)

    def test_partial_tls_flags_are_refused(self):
        c = self.files(self.tls['compute'])
        p = testlib.run([testlib.binary('colibri-compute'), '--model', self.model, '--tls-cert', c['cert'],
                         '--tls-key', c['key']], check=False, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn('--tls-ca', p.stdout + p.stderr)


if __name__ == '__main__':
    unittest.main()
