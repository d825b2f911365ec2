#!/usr/bin/python3
"""Fair prefill (issue 38 item 4): the inter-token latency of a running stream while another
request's long prompt prefills, against the same stream alone, with --fair-prefill (default) and
--no-fair-prefill, in one run on one colibri-server model.

    bench/fairness_bench.py [--prompt 4096] [--preset demo] [--no-write]

Stream A decodes (greedy, EOS ignored) through POST /v1/completions; once it runs, request B
sends a prompt of --prompt token ids for one token. Reported: A's inter-token gaps alone and
while B prefills (p50 / p99 / max), their p99 ratio (aim: <= 2), and B's time to its first token
(the price of fairness). Prints a markdown table; appends it to bench/RESULTS.md under
"## Fair prefill".
"""
import argparse
import datetime
import json
import os
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import testlib  # noqa: E402
import results_md  # noqa: E402

HEADING = "## Fair prefill (issue 38 item 4)"


def stream_stamps(url, n, stop):
    """Streams n greedy tokens; the arrival time of each token (until `stop` is set, then ends)."""
    body = {"model": "demo", "prompt": "The sea", "max_tokens": n, "temperature": 0, "stream": True,
            "return_token_ids": True, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    stamps = []
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                for c in json.loads(line[6:])["choices"]:
                    stamps += [time.perf_counter()] * len(c.get("token_ids") or [])
            if stop is not None and stop.is_set():
                break
    return stamps


def gaps_ms(stamps, t0=None, t1=None):
    out = []
    for a, b in zip(stamps, stamps[1:]):
        if (t0 is None or a >= t0) and (t1 is None or b <= t1):
            out.append((b - a) * 1000)
    return sorted(out)


def pct(v, p):
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


def run(model, fair, prompt_len):
    d = testlib.tempdir("colibri-fair-")
    server = testlib.Service("colibri-server", ["--model", model, "--port", "0", "--host", "127.0.0.1",
                                                "--threads", "2", "--served-model-name", "demo",
                                                "--fair-prefill" if fair else "--no-fair-prefill"], d)
    try:
        url = f"http://127.0.0.1:{server.port()}"
        idle = gaps_ms(stream_stamps(url, 64, None)[2:])
        # A runs; once it streams, B's long prompt arrives.
        stop = threading.Event()
        result = {}
        a = threading.Thread(target=lambda: result.setdefault("a", stream_stamps(url, 100000, stop)))
        a.start()
        time.sleep(2.0)
        ids = [3 + (i * 37) % 400 for i in range(prompt_len)]
        t0 = time.perf_counter()
        status, text = testlib.http("POST", url + "/v1/completions",
                                    {"model": "demo", "prompt": ids, "max_tokens": 1, "temperature": 0},
                                    timeout=3600)
        t1 = time.perf_counter()
        time.sleep(0.5)
        stop.set()
        a.join()
        if status != 200:
            sys.exit(f"fairness_bench: B failed: {status} {text}")
        during = gaps_ms(result["a"], t0, t1)
        return idle, during, t1 - t0
    finally:
        server.stop()
        testlib.rmtree(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=4096, help="B's prompt, tokens")
    ap.add_argument("--preset", default="demo", help="gen_tiny_model preset of the model")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    work = testlib.tempdir("colibri-fair-model-")
    try:
        hf = testlib.gen_model(os.path.join(work, "hf"), "mixtral", args.preset, "f32",
                               extra=["--config-set", f"max_position_embeddings={args.prompt + 1024}"])
        model = testlib.convert(hf, os.path.join(work, "model"), "q8_0")
        rows = []
        for fair in (True, False):
            idle, during, ttft = run(model, fair, args.prompt)
            rows.append("| %s | %s | %d | %.1f / %.1f | %.1f / %.1f / %.1f | %d | %.2f | %.1f (%.0f tok/s) |" % (
                testlib.cpu_name(), "on" if fair else "off", args.prompt, pct(idle, 0.5), pct(idle, 0.99),
                pct(during, 0.5), pct(during, 0.99), during[-1] if during else float("nan"), len(during),
                pct(during, 0.99) / pct(idle, 0.99), ttft, args.prompt / ttft))
    finally:
        testlib.rmtree(work)
    table = "\n".join([
        "| CPU | fair prefill | B's prompt | A alone: p50 / p99 gap (ms) | A during B's prefill: p50 / p99 / max (ms) | gaps | p99 ratio | B's time to first token, s |",
        "|---|---|---|---|---|---|---|---|", *rows])
    header = "%s, Mixtral-like %s preset (Q8_0), 2 threads:" % (datetime.date.today().isoformat(), args.preset)
    print(header + "\n\n" + table)
    if args.no_write:
        return
    results_md.append(HEADING, (
        "`bench/fairness_bench.py`: a stream's inter-token gaps alone and while another request's long "
        "prompt prefills, with the engine's fair prefill on (a step's prompt tokens capped to about one "
        "decode step's time, measured) and off (512-token chunks)."), header + "\n\n" + table)

if __name__ == "__main__":
    main()
