"""Security: one authentication for every entry point. A store, a compute node and a router on
loopback, compute and router started with an --api-key-file of two keys: the HTTP API, /metrics,
compute's admin routes and every Router gRPC method refuse a caller without a key; sessions are
visible only to the key that created them; POST /admin/stores validates its target. Plus the
safe defaults: plaintext gRPC on a non-loopback address is refused without --insecure, and an open
HTTP bind warns. Each of these passed unauthenticated on the main branch before this suite.
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

KEY_A, KEY_B = 'key-alpha-4b1d2f0e', 'key-bravo-93c7a6d5'


def bearer(key):
    return {'Authorization': f'Bearer {key}'}


class AuthTest(testlib.ServicesTestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-auth-')
        cls.model = testlib.micro_model(cls.dir)
        keys = testlib.write_key_file(os.path.join(cls.dir, 'keys'), [KEY_A, KEY_B])
        cls.store = cls.start('colibri-expert-store', ['--model', cls.model, '--listen', '127.0.0.1:0',
                                                       '--metrics-port', '-1'])
        cls.store_target = f'127.0.0.1:{cls.store.port()}'
        cls.compute = cls.start('colibri-compute', ['--model', cls.model, '--store', cls.store_target,
                                                    '--listen', '127.0.0.1:0', '--metrics-port', '0',
                                                    '--threads', '2', '--api-key-file', keys],
                                ('--port-file', '--metrics-port-file'))
        cls.router = cls.start('colibri-router', ['--model', cls.model, '--compute', f'127.0.0.1:{cls.compute.port()}',
                                                  '--port', '0', '--grpc-listen', '127.0.0.1:0',
                                                  '--api-key-file', keys],
                               ('--port-file', '--grpc-port-file'))
        cls.url = f'http://127.0.0.1:{cls.router.port()}'
        cls.admin = f'http://127.0.0.1:{cls.compute.port("--metrics-port-file")}'
        cls.grpc_target = f'127.0.0.1:{cls.router.port("--grpc-port-file")}'
        cls.pb = router_client.load_protos()

    def test_http_api_needs_a_key_on_every_route_but_health(self):
        body = {'prompt': [1, 2, 3], 'max_tokens': 2}
        for method, path, data in (('GET', '/v1/models', None), ('POST', '/v1/completions', body),
                                   ('POST', '/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}]}),
                                   ('GET', '/metrics', None), ('GET', '/no/such/route', None)):
            for headers in ({}, bearer('wrong'), {'Authorization': KEY_A}, {'Authorization': f'Basic {KEY_A}'}):
                status, text = testlib.http(method, self.url + path, data, headers)
                self.assertEqual(status, 401, (path, headers, text))
            self.assertEqual(json.loads(text)['error']['code'], 'invalid_api_key')
        self.assertEqual(testlib.http('GET', self.url + '/health')[0], 200)
        # Both keys of the file work.
        for key in (KEY_A, KEY_B):
            status, text = testlib.http('GET', self.url + '/v1/models', headers=bearer(key))
            self.assertEqual(status, 200, text)
            self.assertEqual(json.loads(text)['data'][0]['id'], 'demo')
        status, text = testlib.http('POST', self.url + '/v1/completions', dict(body, temperature=0),
                                    bearer(KEY_B))
        self.assertEqual(status, 200, text)
        self.assertEqual(json.loads(text)['usage']['completion_tokens'], 2)
        status, text = testlib.http('GET', self.url + '/metrics', headers=bearer(KEY_A))
        self.assertEqual(status, 200)
        self.assertIn('colibri_router_requests_total', text)

    def test_compute_metrics_and_admin_routes_need_a_key(self):
        for method, path, data in (('GET', '/metrics', None), ('GET', '/admin/stats', None),
                                   ('GET', '/admin/stores', None), ('POST', '/admin/stores', {'target': 'x:1'}),
                                   ('POST', '/admin/cache/clear', {'model': 'demo'})):
            status, text = testlib.http(method, self.admin + path, data)
            self.assertEqual(status, 401, (path, text))
            self.assertEqual(testlib.http(method, self.admin + path, data, bearer('nope'))[0], 401, path)
        self.assertEqual(testlib.http('GET', self.admin + '/health')[0], 200)
        status, text = testlib.http('GET', self.admin + '/admin/stats', headers=bearer(KEY_A))
        self.assertEqual(status, 200, text)
        self.assertEqual(json.loads(text)['model'], 'demo')
        status, text = testlib.http('GET', self.admin + '/metrics', headers=bearer(KEY_B))
        self.assertEqual(status, 200)
        self.assertIn('colibri_compute_', text)

    def test_admin_stores_validates_the_target_and_refuses_duplicates(self):
        post = lambda target: testlib.http('POST', self.admin + '/admin/stores', {'target': target}, bearer(KEY_A))
        for bad in ('store', 'store:0', 'store:65536', 'store:-5', 'st ore:5', 'store:5/x', 'a;rm -rf:5',
                    'unix:relative.sock', 'dns:///store:5', '[zz]:5', 'x' * 300 + ':5'):
            status, text = post(bad)
            self.assertEqual(status, 400, (bad, text))
        # Plaintext to a non-loopback store is refused without --insecure.
        status, text = post('10.255.0.1:50051')
        self.assertEqual(status, 400, text)
        self.assertIn('--insecure', json.loads(text)['error']['message'])
        status, text = post(self.store_target)
        self.assertEqual(status, 409, text)
        self.assertIn('already', json.loads(text)['error']['message'])
        stores = json.loads(testlib.http('GET', self.admin + '/admin/stores', headers=bearer(KEY_A))[1])['stores']
        self.assertEqual([s['target'] for s in stores], [self.store_target])

    def grpc_call(self, method, request, response_type, key=None):
        auth = router_client.Auth(api_key=key)
        return router_client.unary(self.grpc_target, method, request, response_type, auth=auth)

    def test_every_router_rpc_needs_a_key(self):
        import grpc
        methods = self.pb.DESCRIPTOR.services_by_name['Router'].methods
        self.assertEqual({m.name for m in methods},
                         {'Generate', 'ListModels', 'CreateSession', 'SendMessage', 'GetSession', 'DeleteSession'})
        with grpc.insecure_channel(self.grpc_target) as channel:
            for m in methods:
                for metadata in ((), (('authorization', 'Bearer wrong'),), (('authorization', KEY_A),)):
                    path = f'/colibri.v1.Router/{m.name}'
                    if m.server_streaming:
                        call = channel.unary_stream(path)
                        with self.assertRaises(grpc.RpcError) as e:
                            list(call(b'', timeout=30, metadata=metadata))
                    else:
                        call = channel.unary_unary(path)
                        with self.assertRaises(grpc.RpcError) as e:
                            call(b'', timeout=30, metadata=metadata)
                    self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED, (m.name, metadata))
        # The health service stays open (probes carry no key).
        health = testlib.run([testlib.binary('colibri-health'), 'grpc', self.grpc_target])
        self.assertIn('SERVING', health.stdout)
        # With a key, Generate streams tokens.
        req = self.pb.RouterGenerateRequest()
        req.tokens.ids.extend([1, 2, 3])
        req.stop.max_tokens = 3
        got = router_client.collect(router_client.stream(self.grpc_target, 'Generate', req,
                                                         auth=router_client.Auth(api_key=KEY_A)), echo=False)
        self.assertEqual(len(got['token_ids']), 3)
        models = self.grpc_call('ListModels', self.pb.RouterListModelsRequest(), self.pb.RouterListModelsResponse,
                                KEY_B)
        self.assertEqual(list(models.models), ['demo'])

    def test_a_session_is_visible_only_to_its_key(self):
        import grpc
        pb = self.pb
        created = self.grpc_call('CreateSession', pb.CreateSessionRequest(system_prompt='Be brief.'), pb.SessionInfo,
                                 KEY_A)
        sid = created.session_id
        self.assertTrue(sid.startswith('sess-'))
        with self.assertRaises(grpc.RpcError) as e:
            self.grpc_call('GetSession', pb.GetSessionRequest(session_id=sid), pb.SessionInfo, KEY_B)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        send = pb.SendMessageRequest(session_id=sid)
        send.message.role, send.message.content = 'user', 'Hello'
        send.stop.max_tokens = 2
        with self.assertRaises(grpc.RpcError) as e:
            list(router_client.stream(self.grpc_target, 'SendMessage', send, auth=router_client.Auth(api_key=KEY_B)))
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        deleted = self.grpc_call('DeleteSession', pb.DeleteSessionRequest(session_id=sid), pb.DeleteSessionResponse,
                                 KEY_B)
        self.assertFalse(deleted.deleted)
        # The owner still has it, unchanged by the other key's attempts, and can use it.
        info = self.grpc_call('GetSession', pb.GetSessionRequest(session_id=sid), pb.SessionInfo, KEY_A)
        self.assertEqual([(m.role, m.content) for m in info.messages], [('system', 'Be brief.')])
        turn = router_client.collect(router_client.stream(self.grpc_target, 'SendMessage', send,
                                                          auth=router_client.Auth(api_key=KEY_A)), echo=False)
        self.assertEqual(len(turn['token_ids']), 2)
        self.assertEqual(self.grpc_call('GetSession', pb.GetSessionRequest(session_id=sid), pb.SessionInfo,
                                        KEY_A).turns, 1)
        self.assertTrue(self.grpc_call('DeleteSession', pb.DeleteSessionRequest(session_id=sid),
                                       pb.DeleteSessionResponse, KEY_A).deleted)


class SafeDefaultsTest(testlib.ServicesTestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-defaults-')
        cls.model = testlib.micro_model(cls.dir)

    def refused(self, name, args):
        p = testlib.run([testlib.binary(name), *args], check=False, timeout=60)
        self.assertIn(p.returncode, (1, 2), (name, args, p.stdout, p.stderr))
        return p.stdout + p.stderr

    def test_plaintext_grpc_on_a_non_loopback_address_is_refused(self):
        m = ['--model', self.model]
        for name, args in (('colibri-expert-store', [*m, '--listen', '0.0.0.0:0']),
                           ('colibri-compute', [*m, '--listen', '0.0.0.0:0']),
                           ('colibri-compute', [*m, '--store', '10.255.0.1:50051']),
                           ('colibri-router', [*m, '--compute', '10.255.0.1:50052']),
                           ('colibri-router', [*m, '--compute', '127.0.0.1:1', '--grpc-listen', '0.0.0.0:0']),
                           ('colibri-server', [*m, '--port', '0', '--grpc-listen', '0.0.0.0:0'])):
            out = self.refused(name, args)
            self.assertIn('without TLS', out, (name, args))
            self.assertIn('--insecure', out, (name, args))

    def test_insecure_is_the_explicit_opt_in(self):
        compute = testlib.Service('colibri-compute', ['--model', self.model, '--listen', '0.0.0.0:0', '--insecure',
                                                      '--metrics-port', '-1', '--threads', '2'], self.dir)
        try:
            self.assertGreater(compute.port(), 0)
            self.assertIn('plaintext gRPC', compute.read_log())
        finally:
            compute.stop()

    def test_open_bind_warns_and_turns_admin_routes_off(self):
        server = testlib.Service('colibri-server', ['--model', self.model, '--port', '0', '--host', '0.0.0.0',
                                                    '--threads', '2'], self.dir)
        try:
            url = f'http://127.0.0.1:{server.port()}'
            self.assertIn('with no API key', server.read_log())
            self.assertEqual(testlib.http('GET', url + '/admin/stats')[0], 404)
            self.assertEqual(testlib.http('POST', url + '/admin/cache/clear', {'model': 'demo'})[0], 404)
            self.assertEqual(testlib.http('GET', url + '/v1/models')[0], 200)
        finally:
            server.stop()

    def test_metrics_public_and_key_from_the_environment(self):
        server = testlib.Service('colibri-server', ['--model', self.model, '--port', '0', '--metrics-public',
                                                    '--threads', '2'], self.dir, tag='env-key',
                                 env={'COLIBRI_API_KEY': KEY_A})
        try:
            url = f'http://127.0.0.1:{server.port()}'
            self.assertEqual(testlib.http('GET', url + '/metrics')[0], 200)
            self.assertEqual(testlib.http('GET', url + '/v1/models')[0], 401)
            self.assertEqual(testlib.http('GET', url + '/admin/stats')[0], 401)
            self.assertEqual(testlib.http('GET', url + '/v1/models', headers=bearer(KEY_A))[0], 200)
            self.assertEqual(testlib.http('GET', url + '/admin/stats', headers=bearer(KEY_A))[0], 200)
        finally:
            server.stop()

    def test_a_key_file_readable_by_others_is_warned_about(self):
        keys = testlib.write_key_file(os.path.join(self.dir, 'open-keys'), [KEY_B])
        os.chmod(keys, 0o644)
        server = testlib.Service('colibri-server', ['--model', self.model, '--port', '0', '--threads', '2',
                                                    '--api-key-file', keys], self.dir, tag='open-keys')
        try:
            url = f'http://127.0.0.1:{server.port()}'
            self.assertIn('is readable by other users (mode 644)', server.read_log())
            self.assertEqual(testlib.http('GET', url + '/v1/models', headers=bearer(KEY_B))[0], 200)
        finally:
            server.stop()

    def test_bad_key_files_are_refused_at_start(self):
        empty = testlib.write_key_file(os.path.join(self.dir, 'empty-keys'), [])
        out = self.refused('colibri-server', ['--model', self.model, '--port', '0', '--api-key-file', empty])
        self.assertIn('holds no key', out)
        out = self.refused('colibri-server', ['--model', self.model, '--port', '0', '--api-key-file',
                                              os.path.join(self.dir, 'absent')])
        self.assertIn('cannot be read', out)



if __name__ == '__main__':
    unittest.main()
