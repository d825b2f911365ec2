"""Hostile clients against bounded listeners (real processes on loopback):

- Memory: colibri-server starts with a bounded KV cache limit (derived, printed) by default.
- HTTP (colibri-server): a slowloris client (headers one byte at a time) is dropped at the
  header deadline; /health answers while every HTTP worker is held by slow clients; with the
  workers busy and the connection queue full a request gets 503 at once instead of waiting.
- Expert store: one peer cannot open more than --max-streams-per-client Fetch streams
  (RESOURCE_EXHAUSTED), and a stream that sends nothing is ended after --idle-stream-timeout.
- KV persistence on a full disk (a small tmpfs; needs mount rights, else skipped): the server
  keeps serving and leaves no temp files.

Waits are on conditions with deadlines; the deadlines asserted are generous multiples of the
configured timeouts.
"""
import os
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

HTTP_WORKERS = 16  # colibri-server's HTTP worker threads
HEADER_TIMEOUT = 2.0
IDLE_TIMEOUT = 3.0  # the store's, for silent streams


def demo_model(workdir):
    """The micro Mixtral fixture, converted to q8_0 under `workdir`."""
    hf = testlib.gen_model(os.path.join(workdir, 'hf'), 'mixtral', 'micro', 'f32')
    return testlib.convert(hf, os.path.join(workdir, 'demo'), 'q8_0')


def connect(port):
    s = socket.create_connection(('127.0.0.1', port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(sock, timeout):
    """Reads until the peer closes or `timeout` passes; returns (bytes, closed)."""
    sock.settimeout(0.2)
    deadline = time.time() + timeout
    data = b''
    while time.time() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


class SlowClient:
    """Sends a request line at once, then a header byte every `interval` seconds until stopped or
    the server drops it (recording when)."""

    def __init__(self, port, interval=0.2):
        self.sock = connect(port)
        self.sock.sendall(b'POST /v1/completions HTTP/1.1\r\n')
        self.started = time.time()
        self.dropped_at = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self.thread.start()

    def _run(self, interval):
        header = b'X-Slow: ' + b'a' * 100000
        for i in range(len(header)):
            if self.stop.wait(interval):
                return
            try:
                self.sock.sendall(header[i:i + 1])
            except OSError:
                self.dropped_at = time.time()
                return
            # A closed connection shows as readable with nothing to read.
            self.sock.setblocking(False)
            try:
                if self.sock.recv(1, socket.MSG_PEEK) == b'':
                    self.dropped_at = time.time()
                    return
            except BlockingIOError:
                pass
            except OSError:
                self.dropped_at = time.time()
                return
            finally:
                self.sock.setblocking(True)

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


class HttpBoundsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-bounds-http-')
        cls.model = demo_model(cls.dir)
        cls.server = testlib.Service('colibri-server', [
            '--model', cls.model, '--port', '0', '--host', '127.0.0.1', '--threads', '2',
            '--http-header-timeout', str(HEADER_TIMEOUT), '--http-idle-timeout', '1', '--http-max-queued', '2'],
            cls.dir)
        cls.port = cls.server.port()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        testlib.rmtree(cls.dir)

    def setUp(self):
        self.clients = []
        self.wait_until_idle()

    def tearDown(self):
        for c in self.clients:
            c.close()

    def wait_until_idle(self):
        """Until a completion request is served at once again (earlier slow clients dropped)."""
        deadline = time.time() + 30
        while time.time() < deadline:
            status, _ = testlib.http('GET', f'http://127.0.0.1:{self.port}/v1/models', timeout=5)
            if status == 200:
                return
        self.fail('the server did not become idle')

    def health(self, timeout):
        s = connect(self.port)
        t0 = time.time()
        s.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
        data, closed = read_all(s, timeout)
        s.close()
        return data, time.time() - t0

    def test_kv_caches_are_bounded_by_default_and_the_limit_is_printed(self):
        log = self.server.read_log()
        line = next((l for l in log.splitlines() if '--kv-cache-limit' in l), None)
        self.assertIsNotNone(line, log)
        # micro model: 2 layers x (K, V) x kv_dim 32 x 4 bytes = 512 B per token; 16 full
        # contexts of 4096 tokens (32 MiB) fit in half of any test machine's free memory.
        self.assertIn('--kv-cache-limit 32.00 MiB (auto: 16 sequences x 4096 tokens x 512 B per token', line)
        self.assertIn('--kv-cache-limit 0 for unbounded', line)

    def test_kv_limit_refuses_what_cannot_fit_and_holds_under_concurrent_requests(self):
        # 64 KiB of KV is 128 tokens of the micro model (512 B each).
        server = testlib.Service('colibri-server', ['--model', self.model, '--port', '0', '--host', '127.0.0.1',
                                                    '--threads', '2', '--kv-cache-limit', '64K'],
                                 self.dir, tag='kv-limit')
        self.addCleanup(server.stop)
        url = f'http://127.0.0.1:{server.port()}'
        status, body = testlib.http('POST', url + '/v1/completions',
                                    {'prompt': [5 + i % 400 for i in range(200)], 'max_tokens': 4})
        self.assertIn(status, (400, 413, 429), body)
        self.assertIn('--kv-cache-limit', body)
        results = []

        def one(i):
            results.append(testlib.http('POST', url + '/v1/completions',
                                        {'prompt': [7 + i + j % 300 for j in range(40)], 'max_tokens': 20,
                                         'temperature': 0, 'ignore_eos': True}))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual([r[0] for r in results], [200] * 4, results)
        # Four finished conversations of 60 tokens (120 KiB) would cross the limit: the pool keeps
        # what fits.
        # The engine pools a finished sequence right after its last token is sent: wait for it.
        deadline = time.time() + 10
        while True:
            _, metrics = testlib.http('GET', url + '/metrics')
            kv = testlib.metric(metrics, 'colibri_compute_kv_cache_bytes')
            if kv > 0 or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertGreater(kv, 0)  # the finished conversations are pooled for their next turn
        self.assertLessEqual(kv, 64 * 1024)

    def test_slowloris_client_is_dropped_at_the_header_deadline(self):
        c = SlowClient(self.port)
        self.clients.append(c)
        c.thread.join(timeout=HEADER_TIMEOUT * 4 + 5)
        self.assertIsNotNone(c.dropped_at, 'a client sending a header byte every 0.2 s was never dropped')
        held = c.dropped_at - c.started
        self.assertGreater(held, HEADER_TIMEOUT * 0.5)
        self.assertLess(held, HEADER_TIMEOUT * 3)

    def test_health_answers_while_every_worker_is_held(self):
        for _ in range(HTTP_WORKERS):
            self.clients.append(SlowClient(self.port))
        data, took = self.health(timeout=3)
        self.assertIn(b' 200 ', data.split(b'\r\n', 1)[0], data)
        self.assertIn(b'"ok"', data)
        self.assertLess(took, 1.5)
        # The slow clients are still held (their deadline has not passed).
        self.assertTrue(all(c.dropped_at is None for c in self.clients))

    def test_a_full_queue_answers_503_at_once(self):
        for _ in range(HTTP_WORKERS + 2):  # every worker, then the two queue places
            self.clients.append(SlowClient(self.port))
        # Queued connections are decided by the front lane as their request line arrives.
        deadline = time.time() + HEADER_TIMEOUT / 2
        status = None
        while time.time() < deadline:
            t0 = time.time()
            status, body = testlib.http('POST', f'http://127.0.0.1:{self.port}/v1/completions',
                                        {'prompt': 'hi', 'max_tokens': 1}, timeout=HEADER_TIMEOUT * 4)
            took = time.time() - t0
            if status == 503:
                break
        self.assertEqual(status, 503, body)
        self.assertLess(took, 1.0)
        self.assertIn('overloaded', body)


class StoreStreamBoundsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import grpc  # python3-grpcio
        cls.grpc = grpc
        cls.dir = testlib.tempdir('colibri-bounds-store-')
        cls.model = demo_model(cls.dir)
        cls.store = testlib.Service('colibri-expert-store', [
            '--model', cls.model, '--listen', '127.0.0.1:0', '--metrics-port', '0',
            '--max-streams-per-client', '2', '--idle-stream-timeout', str(IDLE_TIMEOUT)], cls.dir,
            ('--port-file', '--metrics-port-file'))
        cls.target = f'127.0.0.1:{cls.store.port()}'
        cls.metrics_url = f'http://127.0.0.1:{cls.store.port("--metrics-port-file")}/metrics'

    @classmethod
    def tearDownClass(cls):
        cls.store.stop()
        testlib.rmtree(cls.dir)

    def open_silent_stream(self, channel):
        """A Fetch stream that sends nothing until `release` is set; returns (release, outcome)
        where outcome gets 'code' (the final status) and 'ended_at'."""
        release = threading.Event()
        outcome = {}

        def requests():
            release.wait()
            return
            yield  # noqa: unreachable (makes this a generator)

        fetch = channel.stream_stream('/colibri.v1.ExpertStore/Fetch',
                                      request_serializer=lambda b: b, response_deserializer=lambda b: b)

        def run():
            try:
                for _ in fetch(requests(), timeout=30):
                    pass
                outcome['code'] = self.grpc.StatusCode.OK
            except self.grpc.RpcError as e:
                outcome['code'] = e.code()
                outcome['details'] = e.details()
            outcome['ended_at'] = time.time()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        outcome['thread'] = t
        return release, outcome

    def open_streams(self):
        return float(testlib.metric(testlib.http('GET', self.metrics_url)[1], 'colibri_store_open_streams'))

    def wait_open_streams(self, n, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.open_streams() == n:
                return
        self.fail(f'open streams never reached {n} (at {self.open_streams()})')

    def test_one_peer_gets_at_most_its_quota_of_streams(self):
        channel = self.grpc.insecure_channel(self.target)
        streams = [self.open_silent_stream(channel) for _ in range(2)]
        self.wait_open_streams(2)
        release, third = self.open_silent_stream(channel)
        third['thread'].join(timeout=10)
        self.assertEqual(third.get('code'), self.grpc.StatusCode.RESOURCE_EXHAUSTED, third)
        self.assertIn('--max-streams-per-client', third.get('details', ''))
        for r, o in streams + [(release, third)]:
            r.set()
            o['thread'].join(timeout=10)
        channel.close()

    def test_a_silent_stream_is_ended_after_the_idle_timeout(self):
        self.wait_open_streams(0)
        channel = self.grpc.insecure_channel(self.target)
        t0 = time.time()
        release, o = self.open_silent_stream(channel)
        o['thread'].join(timeout=IDLE_TIMEOUT * 5)
        release.set()
        self.assertEqual(o.get('code'), self.grpc.StatusCode.OK, o)
        held = o['ended_at'] - t0
        self.assertGreater(held, IDLE_TIMEOUT * 0.8)
        self.assertLess(held, IDLE_TIMEOUT * 3)
        text = testlib.http('GET', self.metrics_url)[1]
        self.assertGreaterEqual(testlib.metric(text, 'colibri_store_idle_streams_closed_total'), 1)
        channel.close()


class KvDiskFullTest(unittest.TestCase):
    """--kv-persist-dir on a 256 KiB tmpfs: caches that do not fit are dropped, the server keeps
    answering, and no temp file is left behind."""

    def setUp(self):
        self.dir = testlib.tempdir('colibri-bounds-kv-')
        self.mnt = os.path.join(self.dir, 'kv')
        os.makedirs(self.mnt)
        p = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', self.mnt], capture_output=True,
                           text=True)
        if p.returncode != 0:
            testlib.rmtree(self.dir)
            raise unittest.SkipTest(f'cannot mount a tmpfs: {p.stderr.strip()}')

    def tearDown(self):
        subprocess.run(['umount', '-l', self.mnt], capture_output=True)
        testlib.rmtree(self.dir)

    def test_full_disk_drops_caches_and_leaves_no_temp_files(self):
        model = demo_model(self.dir)
        server = testlib.Service('colibri-server', [
            '--model', model, '--port', '0', '--host', '127.0.0.1', '--threads', '2',
            '--kv-offload-limit', '1', '--kv-persist-dir', self.mnt], self.dir)
        try:
            url = f'http://127.0.0.1:{server.port()}'
            # Concurrent conversations each hold a cache (one after another they would all reuse
            # the last one through the shared BOS token); at shutdown each is written to the tiny
            # disk and most fail with ENOSPC.
            results = []

            def one(i):
                results.append(testlib.http('POST', url + '/v1/completions',
                                            {'prompt': chr(65 + i) + ' conversation' * 20, 'max_tokens': 16}))

            threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            self.assertEqual([r[0] for r in results], [200] * 12, results)
            status, _ = testlib.http('GET', url + '/health')
            self.assertEqual(status, 200)
        finally:
            server.stop()
        names = os.listdir(self.mnt)
        self.assertFalse([n for n in names if n.endswith('.tmp')], names)
        self.assertTrue(names, 'nothing was persisted at all')
        with open(server.log.name) as f:
            self.assertIn('KV cache not persisted', f.read())
        for n in names:
            self.assertEqual(os.stat(os.path.join(self.mnt, n)).st_mode & 0o777, 0o600, n)


if __name__ == '__main__':
    unittest.main()
