"""Integration: the memory budget is a promise. colibri-server runs inside a real memory cgroup
capped at the model's dense weights + a quarter of its experts + 0.5 GiB, on a model whose experts
are several times the cap, under a mixed load: 4 concurrent streams, a 2k-token prompt, n-gram
speculation, then a restart whose warm start reads the hottest experts back; then the three-process cluster, compute in
the same cap and the expert store in 512 MiB of its own, blocks over TCP. Nothing may be
OOM-killed, and peak resident memory (VmHWM) must stay within the budget the compute process
reports on /metrics (auto: read from the cgroup) plus 3% for code and libraries.

The model is synthetic (bench's expert_cache_bench build: Mixtral-shaped q8_0 weights, the micro
test model's tokenizer) in a directory on a real disk, since O_DIRECT reads are what keep the page
cache out of the budget. Its size: COLIBRI_MEMORY_TEST_LAYERS x 32 experts of 53.5 MB (default 4
layers: 6.85 GB of experts).
"""
import json
import os
import random
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

MiB = 1 << 20
LAYERS = int(os.environ.get('COLIBRI_MEMORY_TEST_LAYERS', '4'))
WORKDIR = os.environ.get('COLIBRI_MEMORY_TEST_DIR', '/var/tmp')


def completion(url, prompt, max_tokens, temperature, seed):
    status, body = testlib.http('POST', url + '/v1/completions',
                                {'prompt': prompt, 'max_tokens': max_tokens,
                                 'temperature': temperature, 'seed': seed, 'ignore_eos': True},
                                timeout=1200)
    if status != 200:
        raise AssertionError(f'{status}: {body}')
    return json.loads(body)


class MemoryBudgetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = testlib.MemoryCgroup.available()
        if reason:
            raise unittest.SkipTest(reason)
        cls.dir = testlib.tempdir_in(WORKDIR, 'colibri-memory-budget-')
        donor = testlib.micro_model(cls.dir, 'donor')
        cls.model = os.path.join(cls.dir, 'memory-budget')
        out = testlib.run([testlib.binary('expert_cache_bench'), 'build', '--dir', cls.model,
                           '--layers', str(LAYERS), '--hidden', '2048', '--ffn', '8192', '--experts', '32',
                           '--top-k', '2', '--quant', 'q8_0', '--vocab', '512', '--tokenizer-from', donor])
        facts = json.loads(out.stdout.strip().splitlines()[-1])
        cls.dense, cls.experts = facts['dense_bytes'], facts['expert_bytes']
        cls.cap = cls.dense + cls.experts // 4 + 512 * MiB
        print(f'\nmodel: dense {cls.dense / MiB:.0f} MiB, experts {cls.experts / MiB:.0f} MiB in '
              f'{facts["expert_blocks"]} blocks; cgroup cap {cls.cap / MiB:.0f} MiB', file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        testlib.rmtree(cls.dir)

    def serve(self, cgroup, tag, extra=()):
        s = testlib.Service('colibri-server',
                            ['--model', self.model, '--port', '0', '--host', '127.0.0.1', '--threads', '2',
                             '--speculative', 'ngram', '--draft-max', '4', '--max-batch', '4',
                             '--routing-heat', os.path.join(self.dir, 'heat.json'), *extra],
                            self.dir, tag=tag, wrap=cgroup.wrap())
        self.addCleanup(s.stop)
        return s, f'http://127.0.0.1:{s.port(timeout=300)}'

    def check_within_budget(self, cgroup, server, url, what):
        _, text = testlib.http('GET', url + '/metrics')
        budget = testlib.metric(text, 'colibri_compute_memory_budget_bytes')
        arena = testlib.metric(text, 'colibri_compute_expert_arena_capacity_bytes')
        peak = testlib.peak_rss(server.proc.pid)
        print(f'{what}: peak resident {peak / MiB:.0f} MiB, budget {budget / MiB:.0f} MiB '
              f'(arena {arena / MiB:.0f} MiB), cgroup cap {cgroup.limit / MiB:.0f} MiB, '
              f'cgroup peak charge {cgroup.usage_peak() / MiB:.0f} MiB', file=sys.stderr)
        self.assertIsNone(server.proc.poll(), server.read_log())
        self.assertEqual(cgroup.oom_kills(), 0)
        self.assertGreater(budget, 0)
        self.assertLessEqual(budget, cgroup.limit)  # auto read the cgroup, not the host's RAM
        self.assertLessEqual(peak, budget * 1.03, server.read_log()[-3000:])
        return text

    def test_mixed_load_and_warm_restart_stay_within_the_budget(self):
        self.assertGreater(self.experts, 2.5 * self.cap)  # the experts do not nearly fit
        cgroup = testlib.MemoryCgroup(self.cap, 'budget')
        self.addCleanup(cgroup.remove)

        server, url = self.serve(cgroup, 'first')
        rng = random.Random(7)
        results, errors = {}, []

        def run(name, prompt, max_tokens, temperature):
            try:
                results[name] = completion(url, prompt, max_tokens, temperature, rng.randrange(1 << 30))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(f'{name}: {e}')

        long_prompt = [rng.randrange(3, 512) for _ in range(2048)]
        jobs = [threading.Thread(target=run, args=('long', long_prompt, 2, 0))]
        for i in range(4):
            # Repeating prompts, so n-gram drafting has something to propose.
            prompt = [rng.randrange(3, 512) for _ in range(8)] * 4
            jobs.append(threading.Thread(target=run, args=(f'stream{i}', prompt, 6, 1.0 if i % 2 else 0)))
        for j in jobs:
            j.start()
        for j in jobs:
            j.join(timeout=1500)
        self.assertEqual(errors, [], server.read_log()[-3000:])
        self.assertEqual(results['long']['usage']['prompt_tokens'], 2048)
        for i in range(4):
            self.assertEqual(results[f'stream{i}']['usage']['completion_tokens'], 6)
        text = self.check_within_budget(cgroup, server, url, 'mixed load')
        self.assertGreater(testlib.metric(text, 'colibri_compute_expert_fetched_bytes_total'), self.cap)
        server.stop()  # saves the routing heat the restart warms from

        server, url = self.serve(cgroup, 'restart')
        deadline = time.time() + 300
        while True:
            _, text = testlib.http('GET', url + '/metrics')
            if testlib.metric(text, 'colibri_compute_expert_warm_queued_blocks') == 0:
                break
            self.assertLess(time.time(), deadline, 'warm start did not finish')
            time.sleep(0.2)
        self.assertGreater(testlib.metric(text, 'colibri_compute_expert_warm_blocks_total', 'result="read"'), 0)
        completion(url, [rng.randrange(3, 512) for _ in range(64)], 4, 0, 1)
        self.check_within_budget(cgroup, server, url, 'warm restart')

    def test_three_process_cluster_stays_within_its_budgets(self):
        # Compute in the same cap as the server above; the store (reads, chunk buffers, its pool
        # of idle buffers) in 512 MiB of its own; blocks cross TCP into compute's arena.
        compute_cg = testlib.MemoryCgroup(self.cap, 'compute')
        self.addCleanup(compute_cg.remove)
        store_cg = testlib.MemoryCgroup(512 * MiB, 'store')
        self.addCleanup(store_cg.remove)
        store = testlib.Service('colibri-expert-store', ['--model', self.model, '--listen', '127.0.0.1:0',
                                                         '--metrics-port', '0'],
                                self.dir, ('--port-file', '--metrics-port-file'), tag='cluster-store',
                                wrap=store_cg.wrap())
        self.addCleanup(store.stop)
        compute = testlib.Service('colibri-compute', ['--model', self.model, '--store', f'127.0.0.1:{store.port()}',
                                                      '--store-shm-size', '0', '--listen', '127.0.0.1:0',
                                                      '--metrics-port', '0', '--threads', '2',
                                                      '--routing-heat', 'none'],
                                  self.dir, ('--port-file', '--metrics-port-file'), tag='cluster-compute',
                                  wrap=compute_cg.wrap())
        self.addCleanup(compute.stop)
        router = testlib.Service('colibri-router', ['--model', self.model, '--compute',
                                                    f'127.0.0.1:{compute.port(timeout=300)}', '--port', '0',
                                                    '--host', '127.0.0.1', '--grpc-listen', '127.0.0.1:0'],
                                 self.dir, ('--port-file', '--grpc-port-file'), tag='cluster-router')
        self.addCleanup(router.stop)
        url = f'http://127.0.0.1:{router.port()}'
        rng = random.Random(11)
        errors = []

        def run(prompt, n):
            try:
                completion(url, prompt, n, 1.0, rng.randrange(1 << 30))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(str(e))

        jobs = [threading.Thread(target=run, args=([rng.randrange(3, 512) for _ in range(1024)], 2))]
        jobs += [threading.Thread(target=run, args=([rng.randrange(3, 512) for _ in range(16)], 6)) for _ in range(3)]
        for j in jobs:
            j.start()
        for j in jobs:
            j.join(timeout=1500)
        self.assertEqual(errors, [], compute.read_log()[-3000:])
        metrics_url = f'http://127.0.0.1:{compute.port("--metrics-port-file")}'
        self.check_within_budget(compute_cg, compute, metrics_url, 'cluster compute')
        store_peak = testlib.peak_rss(store.proc.pid)
        print(f'cluster store: peak resident {store_peak / MiB:.0f} MiB in a 512 MiB cgroup', file=sys.stderr)
        self.assertIsNone(store.proc.poll(), store.read_log())
        self.assertEqual(store_cg.oom_kills(), 0)
        self.assertLess(store_peak, 512 * MiB)


if __name__ == '__main__':
    unittest.main()
