"""Hostile input against a default colibri-server (HTTP and the Router gRPC API): each case is an
attack a reviewer tried, and each failed on the main of 2026-11 (crash, wrong status, or work
that went on for a client that had left). See docs/SECURITY.md.
"""
import json
import math
import os
import re
import socket
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

sys.path.insert(0, os.path.join(testlib.REPO, 'tools'))
import router_client  # noqa: E402

LONG_PROMPT = [3 + (i * 7) % 500 for i in range(3000)]  # 3000 tokens: seconds of prefill at chunk 1


def metric(text, name):
    m = re.search(r'^' + re.escape(name) + r'(?:\{[^}]*\})? (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def raw_http(port, request_bytes, read=True, timeout=10):
    """Sends raw bytes; returns the status line and body of the answer (b'' when not read)."""
    with socket.create_connection(('127.0.0.1', port), timeout=timeout) as s:
        s.sendall(request_bytes)
        if not read:
            return b''
        data = b''
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if b'\r\n\r\n' in data:
                head, _, body = data.partition(b'\r\n\r\n')
                m = re.search(rb'Content-Length: (\d+)', head, re.I)
                if m and len(body) >= int(m.group(1)):
                    break
        return data


def post_bytes(path, body, content_type='application/json', host='127.0.0.1'):
    head = (f'POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n'
            f'Content-Length: {len(body)}\r\nConnection: close\r\n\r\n').encode()
    return head + body


class HostileInputTest(testlib.ServicesTestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-hostile-')
        hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), 'mixtral', 'demo', 'f32')
        cls.model = testlib.convert(hf, os.path.join(cls.dir, 'demo'), 'q8_0')
        cls.server = cls.start('colibri-server', ['--model', cls.model, '--port', '0', '--host', '127.0.0.1',
                                                  '--grpc-listen', '127.0.0.1:0', '--prefill-chunk', '1',
                                                  '--max-batch', '4'],
                               ('--port-file', '--grpc-port-file'))
        cls.port = cls.server.port()
        cls.url = f'http://127.0.0.1:{cls.port}'
        router_client.load_protos(os.path.join(cls.dir, 'py'))
        cls.pb = sys.modules['colibri.v1.router_pb2']
        cls.grpc_target = None

    def grpc(self):
        if self.grpc_target is None:
            type(self).grpc_target = f'127.0.0.1:{self.server.port("--grpc-port-file")}'
        return self.grpc_target

    def assert_alive(self):
        status, _ = testlib.http('GET', self.url + '/health', timeout=10)
        self.assertEqual(status, 200)
        status, text = testlib.http('POST', self.url + '/v1/completions',
                                    {'prompt': [1, 2, 3], 'max_tokens': 2, 'temperature': 0}, timeout=60)
        self.assertEqual(status, 200, text)

    def metrics(self):
        return testlib.http('GET', self.url + '/metrics')[1]

    # --- JSON ----------------------------------------------------------------------------------

    def test_deeply_nested_bodies_get_400_naming_the_limit(self):
        bodies = [b'[' * 400000,
                  b'{"messages":[{"role":"user","content":"hi"}],"tools":[' + b'[' * 5000 + b']' * 5000 + b']}',
                  b'{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"a":' + b'{"b":' * 3000
                  + b'1' + b'}' * 3000 + b'}}',
                  b'{"messages":[{"role":"user","content":[{"type":"text","text":"x","y":' + b'[' * 200
                  + b']' * 200 + b'}]}]}']
        for body in bodies:
            reply = raw_http(self.port, post_bytes('/v1/chat/completions', body))
            self.assertIn(b' 400 ', reply.split(b'\r\n')[0], reply[:200])
            self.assertIn(b'deeper than 64 levels', reply)
        self.assert_alive()

    # --- Content-Type and Host -----------------------------------------------------------------

    def test_non_json_content_types_are_refused(self):
        body = json.dumps({'prompt': [1, 2], 'max_tokens': 1}).encode()
        for ct in ('text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x'):
            reply = raw_http(self.port, post_bytes('/v1/completions', body, ct))
            self.assertIn(b' 415 ', reply.split(b'\r\n')[0], ct)
            self.assertIn(b'application/json', reply)
        reply = raw_http(self.port, post_bytes('/v1/completions', body, 'application/json; charset=utf-8'))
        self.assertIn(b' 200 ', reply.split(b'\r\n')[0])

    def test_foreign_host_header_is_refused_on_a_loopback_server(self):
        """DNS rebinding: a page on evil.example resolves its name to 127.0.0.1."""
        body = json.dumps({'prompt': [1, 2], 'max_tokens': 1}).encode()
        reply = raw_http(self.port, post_bytes('/v1/completions', body, host='evil.example:%d' % self.port))
        self.assertIn(b' 403 ', reply.split(b'\r\n')[0])
        self.assertIn(b'--allowed-hosts', reply)
        for host in (f'localhost:{self.port}', f'127.0.0.1:{self.port}', f'[::1]:{self.port}'):
            reply = raw_http(self.port, post_bytes('/v1/completions', body, host=host))
            self.assertIn(b' 200 ', reply.split(b'\r\n')[0], host)
        # Probes keep working whatever name they use.
        reply = raw_http(self.port, b'GET /health HTTP/1.1\r\nHost: 10.1.2.3\r\nConnection: close\r\n\r\n')
        self.assertIn(b' 200 ', reply.split(b'\r\n')[0])

    # --- Sampling over gRPC: the same checks as HTTP -------------------------------------------

    def test_non_finite_sampling_over_grpc_is_invalid_argument(self):
        import grpc
        pb = self.pb
        cases = {'temperature': math.nan, 'top_p': math.inf, 'presence_penalty': -math.inf,
                 'frequency_penalty': math.nan, 'repetition_penalty': math.nan, 'min_p': 7.0}
        for field, value in cases.items():
            req = pb.RouterGenerateRequest(tokens=pb.TokenIds(ids=[1, 2, 3]))
            setattr(req.sampling, field, value)
            req.stop.max_tokens = 2
            with self.assertRaises(grpc.RpcError) as cm:
                list(router_client.stream(self.grpc(), 'Generate', req, timeout=30))
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, field)
            self.assertIn(f"'{field}'", cm.exception.details())
        # And the same message as over HTTP.
        status, text = testlib.http('POST', self.url + '/v1/completions',
                                    {'prompt': [1, 2, 3], 'max_tokens': 2, 'min_p': 7})
        self.assertEqual(status, 400)
        self.assertIn("'min_p': must be between 0 and 1", text)
        req = pb.RouterGenerateRequest(chat=pb.ChatMessages(messages=[pb.ChatMessage(role='root', content='x')]))
        with self.assertRaises(grpc.RpcError) as cm:
            list(router_client.stream(self.grpc(), 'Generate', req, timeout=30))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("unknown role 'root'", cm.exception.details())
        self.assert_alive()

    # --- Disconnects during prefill stop the engine --------------------------------------------

    def wait_cancelled(self, before, deadline_s=20):
        deadline = time.time() + deadline_s
        while time.time() < deadline:
            m = self.metrics()
            if metric(m, 'colibri_compute_requests_cancelled_total') > before:
                return m
            time.sleep(0.05)
        self.fail('the engine did not see the client leave')

    def assert_prefill_stopped(self, leave):
        """`leave` starts a request with LONG_PROMPT and abandons it once its prefill is under way."""
        m0 = self.metrics()
        cancelled0 = metric(m0, 'colibri_compute_requests_cancelled_total')
        prompt0 = metric(m0, 'colibri_compute_prompt_tokens_total')
        started = time.time()
        leave(lambda: metric(self.metrics(), 'colibri_compute_prompt_tokens_total') > prompt0 + 20)
        m1 = self.wait_cancelled(cancelled0)
        computed = metric(m1, 'colibri_compute_prompt_tokens_total') - prompt0
        self.assertLess(computed, len(LONG_PROMPT), 'the whole prompt was prefilled for a client that left')
        time.sleep(0.3)  # nothing more is computed afterwards
        self.assertEqual(metric(self.metrics(), 'colibri_compute_prompt_tokens_total') - prompt0, computed)
        self.assertLess(time.time() - started, 30)

    def wait_for(self, cond, deadline_s=30):
        deadline = time.time() + deadline_s
        while not cond():
            if time.time() > deadline:
                self.fail('prefill did not start')
            time.sleep(0.02)

    def test_http_client_leaving_during_prefill_stops_it(self):
        for stream in (False, True):
            def leave(prefilling):
                body = json.dumps({'prompt': LONG_PROMPT, 'max_tokens': 4, 'stream': stream}).encode()
                s = socket.create_connection(('127.0.0.1', self.port))
                s.sendall(post_bytes('/v1/completions', body))
                self.wait_for(prefilling)
                s.close()
            with self.subTest(stream=stream):
                self.assert_prefill_stopped(leave)
        self.assert_alive()

    def test_grpc_call_cancelled_during_prefill_stops_it(self):
        import grpc
        pb = self.pb

        def leave(prefilling):
            req = pb.RouterGenerateRequest(tokens=pb.TokenIds(ids=LONG_PROMPT))
            req.stop.max_tokens = 4
            with grpc.insecure_channel(self.grpc()) as ch:
                call = ch.unary_stream('/colibri.v1.Router/Generate', request_serializer=type(req).SerializeToString,
                                       response_deserializer=pb.RouterGenerateResponse.FromString)(req, timeout=60)
                self.wait_for(prefilling)
                call.cancel()
        self.assert_prefill_stopped(leave)
        self.assert_alive()


if __name__ == '__main__':
    unittest.main()
