#!/usr/bin/python3
"""A GGUF served where it lies against the container colibri-convert makes of it (issue 36).

1. Start-up on a DeepSeek-V3-shaped split GGUF header: 61 layers (3 dense), 256 experts of
   3 x 7168 x 2048 Q4_K, MLA attention, a 129,280-token vocabulary, split in --parts parts whose
   tensor data is sparse (the header is real, the bytes are holes): `colibri-cli inspect` on the
   first part, i.e. parse, derive the manifest (every expert's ranges) and the parts' identity.
2. A Mixtral-shaped Q8_0 GGUF with random blocks (--layers x --experts experts of 3 x --hidden x
   --ffn): colibri-convert --quantize keep against dd's O_DIRECT read and write of the same bytes.
3. Decode and prefill (colibri-cli run, 2 threads, --cache-share of the experts cached) from the
   GGUF in place and from the converted container, cold (page cache dropped before each run),
   alternating, --repeats times each; medians and the in-place / container ratio.
4. colibri-server on each in a memory cgroup below the model's size (dense + --cache-share of the
   experts + 512 MiB), every budget auto: peak resident memory (VmHWM) against the planned budget
   and the cap, OOM kills, prefill and decode (bench/memory_budget_bench.py's run_cap).

Usage (root, for drop_caches):
  bench/gguf_in_place_bench.py [--dir /var/tmp/colibri-gguf-bench] [--layers 8 --hidden 2048
      --ffn 5632 --experts 8] [--cache-share 0.25] [--tokens 32] [--prompt 128] [--repeats 3]
Prints markdown tables for bench/RESULTS.md.
"""
import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'tests'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'golden'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_write  # noqa: E402
import memory_budget_bench  # noqa: E402  (its run_cap: colibri-server in a memory cgroup)
import testlib  # noqa: E402

Q8_0, Q4_K, F32 = 8, 12, 0
MiB = 1 << 20


def tensor_bytes(ggml_type, shape):
    n = int(np.prod(shape))
    return {F32: 4 * n, Q8_0: n // 32 * 34, Q4_K: n // 256 * 144}[ggml_type]


# ---- 1. a DeepSeek-V3-shaped split header ------------------------------------------------------

def deepseek_tensors():
    H, L, V, E, F, D = 7168, 61, 129280, 256, 2048, 18432
    t = [('token_embd.weight', Q4_K, (V, H)), ('output_norm.weight', F32, (H,)),
         ('output.weight', Q4_K, (V, H))]
    for i in range(L):
        b = f'blk.{i}.'
        t += [(b + 'attn_norm.weight', F32, (H,)), (b + 'attn_q_a.weight', Q4_K, (1536, H)),
              (b + 'attn_q_a_norm.weight', F32, (1536,)), (b + 'attn_q_b.weight', Q4_K, (128 * 192, 1536)),
              (b + 'attn_kv_a_mqa.weight', Q4_K, (576, H)), (b + 'attn_kv_a_norm.weight', F32, (512,)),
              (b + 'attn_kv_b.weight', Q4_K, (128 * 256, 512)), (b + 'attn_output.weight', Q4_K, (H, 128 * 128)),
              (b + 'ffn_norm.weight', F32, (H,))]
        if i < 3:
            t += [(b + 'ffn_gate.weight', Q4_K, (D, H)), (b + 'ffn_up.weight', Q4_K, (D, H)),
                  (b + 'ffn_down.weight', Q4_K, (H, D))]
        else:
            t += [(b + 'exp_probs_b.bias', F32, (E,)), (b + 'ffn_gate_inp.weight', F32, (E, H)),
                  (b + 'ffn_gate_shexp.weight', Q4_K, (F, H)), (b + 'ffn_up_shexp.weight', Q4_K, (F, H)),
                  (b + 'ffn_down_shexp.weight', Q4_K, (H, F)),
                  (b + 'ffn_gate_exps.weight', Q4_K, (E, F, H)), (b + 'ffn_up_exps.weight', Q4_K, (E, F, H)),
                  (b + 'ffn_down_exps.weight', Q4_K, (E, H, F))]
    return t


def write_deepseek_split(d, parts):
    a = 'deepseek2'
    meta = {'general.architecture': a, 'general.name': 'DeepSeek-V3-shaped', f'{a}.block_count': 61,
            f'{a}.context_length': 163840, f'{a}.embedding_length': 7168, f'{a}.feed_forward_length': 18432,
            f'{a}.attention.head_count': 128, f'{a}.attention.head_count_kv': 128,
            f'{a}.rope.freq_base': 10000.0, f'{a}.attention.layer_norm_rms_epsilon': 1e-6,
            f'{a}.expert_used_count': 8, f'{a}.attention.q_lora_rank': 1536,
            f'{a}.attention.kv_lora_rank': 512, f'{a}.attention.key_length': 192,
            f'{a}.attention.value_length': 128, f'{a}.rope.dimension_count': 64,
            f'{a}.leading_dense_block_count': 3, f'{a}.expert_count': 256, f'{a}.expert_shared_count': 1,
            f'{a}.expert_feed_forward_length': 2048, f'{a}.expert_weights_scale': 2.5,
            f'{a}.expert_weights_norm': True, f'{a}.expert_gating_func': 2,
            f'{a}.expert_group_count': 8, f'{a}.expert_group_used_count': 4,
            'tokenizer.ggml.model': 'gpt2', 'tokenizer.ggml.bos_token_id': 0,
            'tokenizer.ggml.eos_token_id': 1}
    tokens = [f'tok{i}' for i in range(129280)]
    tensors = deepseek_tensors()
    chunks = [tensors[i * len(tensors) // parts:(i + 1) * len(tensors) // parts] for i in range(parts)]
    total = 0
    first = None
    for i, chunk in enumerate(chunks):
        m = dict(meta) if i == 0 else {'general.architecture': a}
        m.update({'split.no': i, 'split.count': parts, 'split.tensors.count': len(tensors)})
        if i == 0:
            m['tokenizer.ggml.tokens'] = tokens
        kv = b''.join(gguf_write._string(k) + gguf_write._value(v) for k, v in m.items())
        n_kv = len(m)
        out = bytearray(b'GGUF' + struct.pack('<IQQ', 3, len(chunk), n_kv)) + kv
        offset = 0
        for name, ggml_type, shape in chunk:
            dims = list(reversed(shape))
            out += gguf_write._string(name) + struct.pack('<I', len(dims)) + struct.pack(f'<{len(dims)}Q', *dims)
            out += struct.pack('<IQ', ggml_type, offset)
            offset += tensor_bytes(ggml_type, shape)
            offset += (32 - offset % 32) % 32
        out += b'\0' * ((32 - len(out) % 32) % 32)
        path = os.path.join(d, f'DeepSeek-V3-shaped-{i + 1:05d}-of-{parts:05d}.gguf')
        with open(path, 'wb') as f:
            f.write(out)
            f.truncate(len(out) + offset)  # sparse: the data is a hole
        total += len(out) + offset
        first = first or path
    return first, total


# ---- 2. a Mixtral-shaped Q8_0 GGUF ----------------------------------------------------------------

def q8_blocks(shape, rng):
    n = int(np.prod(shape)) // 32
    blocks = rng.integers(-127, 128, size=(n, 34), dtype=np.int8).view(np.uint8)
    d = (0.002 * rng.uniform(0.5, 1.5, size=n)).astype(np.float16).view(np.uint8).reshape(n, 2)
    blocks[:, 0:2] = d
    return gguf_write.RawTensor(Q8_0, shape, blocks.tobytes())


def tokenizer_metadata(donor):
    """The tokenizer.* keys of GGUF `donor` (for a generated model colibri-server can serve)."""
    sys.path.insert(0, os.path.join(REPO, 'tests', 'reference'))
    from gguf_np import GGUFFile
    return {k: v for k, v in GGUFFile(donor).metadata.items() if k.startswith('tokenizer.')}


def write_mixtral_q8(path, layers, hidden, ffn, experts, vocab=32000, heads=16, kv_heads=4,
                     tokenizer=None):
    """`tokenizer`: tokenizer.* metadata to carry (the vocabulary then has its size)."""
    rng = np.random.default_rng(7)
    a = 'llama'
    if tokenizer:
        vocab = len(tokenizer['tokenizer.ggml.tokens'])
    meta = {'general.architecture': a, f'{a}.block_count': layers, f'{a}.context_length': 4096,
            f'{a}.embedding_length': hidden, f'{a}.feed_forward_length': ffn,
            f'{a}.attention.head_count': heads, f'{a}.attention.head_count_kv': kv_heads,
            f'{a}.rope.freq_base': 1e6, f'{a}.attention.layer_norm_rms_epsilon': 1e-5,
            f'{a}.expert_count': experts, f'{a}.expert_used_count': 2,
            'tokenizer.ggml.bos_token_id': 1, 'tokenizer.ggml.eos_token_id': 2}
    hd = hidden // heads
    t = {'token_embd.weight': q8_blocks((vocab, hidden), rng),
         'output_norm.weight': np.ones(hidden, np.float32),
         'output.weight': q8_blocks((vocab, hidden), rng)}
    for i in range(layers):
        b = f'blk.{i}.'
        t[b + 'attn_norm.weight'] = np.ones(hidden, np.float32)
        t[b + 'attn_q.weight'] = q8_blocks((hidden, hidden), rng)
        t[b + 'attn_k.weight'] = q8_blocks((kv_heads * hd, hidden), rng)
        t[b + 'attn_v.weight'] = q8_blocks((kv_heads * hd, hidden), rng)
        t[b + 'attn_output.weight'] = q8_blocks((hidden, hidden), rng)
        t[b + 'ffn_norm.weight'] = np.ones(hidden, np.float32)
        t[b + 'ffn_gate_inp.weight'] = rng.normal(0, 0.05, (experts, hidden)).astype(np.float32)
        t[b + 'ffn_gate_exps.weight'] = q8_blocks((experts, ffn, hidden), rng)
        t[b + 'ffn_up_exps.weight'] = q8_blocks((experts, ffn, hidden), rng)
        t[b + 'ffn_down_exps.weight'] = q8_blocks((experts, hidden, ffn), rng)
    meta.update(tokenizer or {})
    gguf_write.write_gguf(path, meta, t)


def dd_rates(path, scratch_dir):
    """dd's O_DIRECT read of `path` and write of as many bytes: alone, then both at once (what a
    conversion onto the same disk can reach: it moves every byte in and out)."""
    size = os.path.getsize(path)
    out = os.path.join(scratch_dir, 'dd-write.bin')
    count = size // (16 * MiB)
    read_cmd = ['dd', f'if={path}', 'of=/dev/null', 'bs=16M', 'iflag=direct']
    write_cmd = ['dd', 'if=/dev/zero', f'of={out}', 'bs=16M', f'count={count}', 'oflag=direct',
                 'conv=fsync']
    testlib.drop_caches()
    t0 = time.time()
    subprocess.run(read_cmd, check=True, capture_output=True)
    read = size / (time.time() - t0)
    t0 = time.time()
    subprocess.run(write_cmd, check=True, capture_output=True)
    write = count * 16 * MiB / (time.time() - t0)
    testlib.drop_caches()
    t0 = time.time()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for c in (read_cmd, write_cmd)]
    for p in procs:
        p.wait()
    both = size / (time.time() - t0)  # bytes through, in and out, per second
    os.remove(out)
    return read, write, both


RUN = re.compile(r'prompt (\d+) tokens in ([\d.]+) s; (\d+) tokens in ([\d.]+) s')


def decode(model, prompt, tokens, cache):
    testlib.drop_caches()
    r = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', model, '--prompt-tokens',
                     ','.join(map(str, prompt)), '--max-tokens', str(tokens), '--temperature', '0',
                     '--ignore-eos', '--threads', '2', '--expert-cache-size', str(cache)])
    m = RUN.search(r.stderr + r.stdout)
    if not m:
        raise RuntimeError(r.stderr[-2000:])
    return int(m.group(1)) / float(m.group(2)), int(m.group(3)) / float(m.group(4)), \
        json_tokens(r.stdout)


def json_tokens(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--dir', default='/var/tmp/colibri-gguf-bench')
    ap.add_argument('--parts', type=int, default=9)
    ap.add_argument('--layers', type=int, default=8)
    ap.add_argument('--hidden', type=int, default=2048)
    ap.add_argument('--ffn', type=int, default=5632)
    ap.add_argument('--experts', type=int, default=8)
    ap.add_argument('--cache-share', type=float, default=0.25)
    ap.add_argument('--tokens', type=int, default=32)
    ap.add_argument('--prompt', type=int, default=128)
    ap.add_argument('--repeats', type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    cpu = testlib.cpu_name()
    print(f'CPU: {cpu}; load {os.getloadavg()[0]:.2f}')

    # 1. start-up on a DeepSeek-V3-shaped split header
    ds = os.path.join(a.dir, 'deepseek')
    testlib.rmtree(ds)
    os.makedirs(ds)
    first, total = write_deepseek_split(ds, a.parts)
    times = []
    for _ in range(3):
        t0 = time.time()
        r = testlib.run([testlib.binary('colibri-cli'), 'inspect', '--model', first])
        times.append(time.time() - t0)
    blocks = re.search(r'"expert_blocks": (\d+)', r.stdout)
    print('\n| CPU | header | parts | file size (sparse) | expert blocks | `colibri-cli inspect` (whole process), median of 3 |')
    print('|---|---|---|---|---|---|')
    print(f'| {cpu} | DeepSeek-V3 shape, 61 layers x 256 experts, Q4_K | {a.parts} | {total / 1e9:.0f} GB | '
          f'{blocks.group(1) if blocks else "?"} | {statistics.median(times):.3f} s |')
    testlib.rmtree(ds)

    # 2. conversion against dd
    gguf = os.path.join(a.dir, 'mixtral-q8.gguf')
    if not os.path.exists(gguf):
        # The oracle's tiny Mixtral tokenizer (512 tokens), so colibri-server can serve the file.
        write_mixtral_q8(gguf, a.layers, a.hidden, a.ffn, a.experts, tokenizer=tokenizer_metadata(
            os.path.join(testlib.ORACLE, 'mixtral-tiny-q4_k_m.gguf')))
    size = os.path.getsize(gguf)
    converted = os.path.join(a.dir, 'converted')
    testlib.rmtree(converted)
    read, write, both = dd_rates(gguf, a.dir)
    testlib.drop_caches()
    t0 = time.time()
    testlib.convert(gguf, converted, 'keep')
    conv_s = time.time() - t0
    conv = size / conv_s
    print('\n| CPU | GGUF | dd read (O_DIRECT) | dd write (O_DIRECT) | dd read + write at once (same disk) '
          '| colibri-convert --quantize keep | of min(read, write) | of read + write at once |')
    print('|---|---|---|---|---|---|---|---|')
    print(f'| {cpu} | {size / 1e9:.2f} GB Q8_0 | {read / 1e6:.0f} MB/s | {write / 1e6:.0f} MB/s | '
          f'{both / 1e6:.0f} MB/s | {conv / 1e6:.0f} MB/s ({conv_s:.1f} s) | {conv / min(read, write):.2f} | '
          f'{conv / both:.2f} |')

    # doctor --deep reads and checks the whole file (recording its checksums), cold
    testlib.rmtree(os.path.join(a.dir, 'mixtral-q8.colibri'))
    testlib.drop_caches()
    t0 = time.time()
    testlib.run([testlib.binary('colibri-cli'), 'doctor', '--model', gguf, '--deep'])
    deep_s = time.time() - t0
    print('\n| CPU | GGUF | `colibri-cli doctor --deep` (whole process, cold) | rate | of dd read |')
    print('|---|---|---|---|---|')
    print(f'| {cpu} | {size / 1e9:.2f} GB Q8_0 | {deep_s:.2f} s | {size / deep_s / 1e6:.0f} MB/s | '
          f'{size / deep_s / read:.2f} |')

    # 3. decode and prefill, in place against the container
    with open(os.path.join(converted, 'manifest.json')) as f:
        m = json.load(f)
    experts = sum(b['padded_size'] for b in m['experts']['blocks'])
    cache = int(experts * a.cache_share)
    rng = np.random.default_rng(3)
    prompt = [int(x) for x in rng.integers(3, 512, size=a.prompt)]
    rows = {'container': [], 'in place': []}
    tokens = {}
    for _ in range(a.repeats):
        for label, model in (('container', converted), ('in place', gguf)):
            pf, dec, toks = decode(model, prompt, a.tokens, cache)
            rows[label].append((pf, dec))
            tokens.setdefault(label, toks)
    print(f'\n| CPU | model | cache | source | prefill tok/s ({a.prompt} tokens, cold) | decode tok/s '
          f'({a.tokens} tokens) | vs container |')
    print('|---|---|---|---|---|---|---|')
    base = None
    for label in ('container', 'in place'):
        pf = statistics.median(r[0] for r in rows[label])
        dec = statistics.median(r[1] for r in rows[label])
        base = base or (pf, dec)
        print(f'| {cpu} | {a.layers} layers x {a.experts} experts Q8_0 ({experts / 1e9:.2f} GB experts) | '
              f'{a.cache_share:.0%} | {label} | {pf:.1f} | {dec:.2f} | '
              f'prefill {pf / base[0]:.3f}, decode {dec / base[1]:.3f} |')
    print(f'\nsame greedy tokens: {tokens["container"] == tokens["in place"]}')

    # 4. colibri-server in a memory cgroup below the model: dense + --cache-share of the experts
    # + 512 MiB, every budget auto (memory_budget_bench.run_cap: a cold prefill, then a decode).
    reason = testlib.MemoryCgroup.available()
    if reason:
        print(f'\nserver in a memory cgroup: skipped ({reason})')
        return
    cap = m['dense']['size'] + int(a.cache_share * experts) + (512 << 20)
    server = argparse.Namespace(threads=2, prompt=256, tokens=a.tokens)
    print(f'\ncolibri-server in a memory cgroup of {cap / 1e9:.3f} GB (the model: '
          f'{(m["dense"]["size"] + experts) / 1e9:.2f} GB)\n')
    print('| CPU | source | budget (auto) | peak RSS (VmHWM) | of the budget | of the cap | OOM kills '
          '| prefill tok/s (256) | decode tok/s |')
    print('|---|---|---|---|---|---|---|---|---|')
    for label, model in (('container', converted), ('in place', gguf)):
        r = memory_budget_bench.run_cap(server, model, cap, a.dir, f'gguf-{label.replace(" ", "-")}')
        print(f'| {cpu} | {label} | {r["budget"] / 1e6:.0f} MB | {r["peak_rss"] / 1e6:.0f} MB | '
              f'{r["peak_rss"] / r["budget"]:.2f} | {r["peak_rss"] / cap:.2f} | {r["oom_kills"]} | '
              f'{r["prefill_tok_s"]:.1f} | {r["decode_tok_s"]:.2f} |')


if __name__ == '__main__':
    main()
