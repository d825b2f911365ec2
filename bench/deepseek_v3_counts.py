#!/usr/bin/python3
"""DeepSeek-V3's counts at tiny dimensions: import, start-up and decode.

A DeepseekV3ForCausalLM checkpoint as DeepSeek publishes it (FP8 e4m3 linear weights with
128x128 weight_scale_inv block scales, sharded safetensors with an index, the MTP layer after the
last one) with V3's real counts: 61 layers of which the first 3 dense, 256 routed experts top-8
in 8 groups of which 4 eligible, sigmoid scores with the selection bias, one shared expert; and
tiny dimensions (hidden 64, 4 heads, latent 32 + rope 16, expert ffn 32) so that it fits here.

    bench/deepseek_v3_counts.py [--quantize q8_0] [--cache-size 16M] [--tokens 32]

Measures: generating the checkpoint, colibri-convert (import), colibri-cli inspect (manifest
load), colibri-server's start-up to its port and /health and its resident memory after start,
and colibri-cli bench's decode rate with a small expert cache and with every expert cached.
Prints the numbers as markdown.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'tests'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'golden'))
import deepseek_convert as dc  # noqa: E402
import testlib  # noqa: E402

LAYERS, DENSE, EXPERTS, TOP_K, GROUPS, TOPK_GROUPS = 61, 3, 256, 8, 8, 4
H, NH, NOPE, ROPE, V, Q_LORA, KV_LORA, FFN, DENSE_FFN, VOCAB = 64, 4, 16, 16, 16, 32, 32, 32, 128, 512


def config():
    return {'architectures': ['DeepseekV3ForCausalLM'], 'model_type': 'deepseek_v3', 'hidden_size': H,
            'num_hidden_layers': LAYERS, 'num_attention_heads': NH, 'num_key_value_heads': NH,
            'intermediate_size': DENSE_FFN, 'moe_intermediate_size': FFN, 'n_routed_experts': EXPERTS,
            'num_experts_per_tok': TOP_K, 'n_shared_experts': 1, 'first_k_dense_replace': DENSE,
            'moe_layer_freq': 1, 'n_group': GROUPS, 'topk_group': TOPK_GROUPS, 'topk_method': 'noaux_tc',
            'scoring_func': 'sigmoid', 'norm_topk_prob': True, 'routed_scaling_factor': 2.5,
            'q_lora_rank': Q_LORA, 'kv_lora_rank': KV_LORA, 'qk_nope_head_dim': NOPE, 'qk_rope_head_dim': ROPE,
            'v_head_dim': V, 'rms_norm_eps': 1e-6, 'rope_theta': 10000.0, 'max_position_embeddings': 163840,
            'rope_scaling': {'type': 'yarn', 'factor': 40.0, 'original_max_position_embeddings': 4096,
                             'beta_fast': 32, 'beta_slow': 1, 'mscale': 1.0, 'mscale_all_dim': 1.0},
            'vocab_size': VOCAB, 'tie_word_embeddings': False, 'bos_token_id': 1, 'eos_token_id': 2,
            'num_nextn_predict_layers': 1,
            'quantization_config': {'activation_scheme': 'dynamic', 'fmt': 'e4m3', 'quant_method': 'fp8',
                                    'weight_block_size': [128, 128]}}


def fp8(w):
    """(codes, scale_inv) of matrices w [..., rows, cols] with rows, cols <= 128: one block each."""
    scale = np.maximum(np.abs(w).max(axis=(-2, -1), keepdims=True), 1e-12) / dc.FP8_MAX
    return dc.fp8_e4m3_encode(w / scale), scale.astype(np.float32)


def attention_tensors(t, p, linear, h=H, nh=NH, nope=NOPE, rope=ROPE, v=V, q_lora=Q_LORA, kv_lora=KV_LORA):
    """One layer's norms (ones) and latent-attention projections into t under prefix p;
    linear(name, rows, cols) adds a weight (and its scales) to t."""
    for norm, n in (('input_layernorm', h), ('post_attention_layernorm', h), ('self_attn.q_a_layernorm', q_lora),
                    ('self_attn.kv_a_layernorm', kv_lora)):
        t[p + norm + '.weight'] = np.ones(n, dtype=np.float32)
    linear('self_attn.q_a_proj', q_lora, h)
    linear('self_attn.q_b_proj', nh * (nope + rope), q_lora)
    linear('self_attn.kv_a_proj_with_mqa', kv_lora + rope, h)
    linear('self_attn.kv_b_proj', nh * (nope + v), kv_lora)
    linear('self_attn.o_proj', h, nh * v)


def layer_tensors(i, rng):
    """Layer i's tensors ({name: array}); uint8 arrays are FP8 codes."""
    p, t = f'model.layers.{i}.', {}

    def linear(name, rows, cols):
        codes, scale = fp8(rng.standard_normal((rows, cols)) / np.sqrt(cols))
        t[p + name + '.weight'], t[p + name + '.weight_scale_inv'] = codes, scale.reshape(1, 1)

    attention_tensors(t, p, linear)
    if i < DENSE:
        linear('mlp.gate_proj', DENSE_FFN, H)
        linear('mlp.up_proj', DENSE_FFN, H)
        linear('mlp.down_proj', H, DENSE_FFN)
        return t
    t[p + 'mlp.gate.weight'] = (rng.standard_normal((EXPERTS, H)) * 2 / np.sqrt(H)).astype(np.float32)
    t[p + 'mlp.gate.e_score_correction_bias'] = (rng.standard_normal(EXPERTS) * 0.1).astype(np.float32)
    for proj in ('gate_proj', 'up_proj', 'down_proj'):
        linear(f'mlp.shared_experts.{proj}', *((H, FFN) if proj == 'down_proj' else (FFN, H)))
        shape = (EXPERTS, H, FFN) if proj == 'down_proj' else (EXPERTS, FFN, H)
        codes, scale = fp8(rng.standard_normal(shape) / np.sqrt(shape[2]))
        for e in range(EXPERTS):
            name = f'{p}mlp.experts.{e}.{proj}.weight'
            t[name], t[name + '_scale_inv'] = codes[e], scale[e]
    return t


def write_checkpoint(out, shards=8):
    """The checkpoint, with the toy 512-token vocabulary of the generated test models."""
    rng = np.random.default_rng(3)
    tok = testlib.gen_model(out + '-tok', 'mixtral', 'micro')
    os.makedirs(out, exist_ok=True)
    for f in ('tokenizer.json', 'tokenizer_config.json'):
        shutil.copy(os.path.join(tok, f), os.path.join(out, f))
    with open(os.path.join(out, 'config.json'), 'w') as f:
        json.dump(config(), f, indent=1)
    head = {'model.embed_tokens.weight': rng.standard_normal((VOCAB, H)).astype(np.float32),
            'model.norm.weight': np.ones(H, dtype=np.float32),
            'lm_head.weight': (rng.standard_normal((VOCAB, H)) / np.sqrt(H)).astype(np.float32)}
    layers = list(range(LAYERS + 1))  # + the MTP layer
    weight_map = {}
    for s in range(shards):
        name = f'model-{s + 1:05d}-of-{shards:05d}.safetensors'
        tensors = dict(head) if s == 0 else {}
        for i in layers[s::shards]:
            tensors.update(layer_tensors(i, rng))
            if i == LAYERS:  # the MTP layer's own tensors
                p = f'model.layers.{i}.'
                codes, scale = fp8(rng.standard_normal((H, 2 * H)) / np.sqrt(2 * H))
                tensors.update({p + 'eh_proj.weight': codes, p + 'eh_proj.weight_scale_inv': scale.reshape(1, 1),
                                p + 'enorm.weight': np.ones(H, dtype=np.float32),
                                p + 'hnorm.weight': np.ones(H, dtype=np.float32),
                                p + 'embed_tokens.weight': head['model.embed_tokens.weight'],
                                p + 'shared_head.norm.weight': np.ones(H, dtype=np.float32),
                                p + 'shared_head.head.weight': head['lm_head.weight']})
        dc._write_safetensors(os.path.join(out, name), tensors)
        weight_map.update({k: name for k in tensors})
    with open(os.path.join(out, 'model.safetensors.index.json'), 'w') as f:
        json.dump({'metadata': {}, 'weight_map': weight_map}, f)
    return len(weight_map)


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def timed(cmd):
    t0 = time.time()
    p = testlib.run(cmd)
    return time.time() - t0, p


def rss_kib(pid, key):
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            if line.startswith(key + ':'):
                return int(line.split()[1])
    return 0


def start_up(model, cache_size, workdir):
    """Seconds of colibri-cli inspect, of colibri-server to its port and to /health, its RSS (MiB)."""
    out = {'inspect': timed([testlib.binary('colibri-cli'), 'inspect', '--model', model])[0]}
    server = testlib.Service('colibri-server', ['--model', model, '--port', '0', '--host', '127.0.0.1', '--threads',
                                                '2', '--expert-cache-size', cache_size, '--warm-start', 'off'], workdir)
    t0 = time.time()
    try:
        port = server.port()
        out['port'] = time.time() - t0
        status, text = testlib.http('GET', f'http://127.0.0.1:{port}/health')
        if status != 200:
            raise AssertionError(f'/health: {status} {text}')
        out['health'] = time.time() - t0
        out['rss'] = rss_kib(server.proc.pid, 'VmRSS') / 1024
    finally:
        server.stop()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--quantize', default='q8_0')
    ap.add_argument('--cache-size', default='16M')
    ap.add_argument('--tokens', type=int, default=32)
    a = ap.parse_args()
    d = testlib.tempdir('colibri-v3-counts-')
    try:
        hf = os.path.join(d, 'hf')
        t0 = time.time()
        n_tensors = write_checkpoint(hf)
        gen_s = time.time() - t0
        print(f'checkpoint: {n_tensors} tensors in 8 FP8 shards, {dir_bytes(hf) / 1e6:.0f} MB, generated in '
              f'{gen_s:.0f} s; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}\n')
        model = os.path.join(d, 'model')
        convert_s, _ = timed([testlib.binary('colibri-convert'), '--input', hf, '--output', model,
                              '--quantize', a.quantize])
        convert_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        with open(os.path.join(model, 'manifest.json')) as f:
            m = json.load(f)
        blocks = len(m['experts']['blocks'])
        # Start-up against the micro test model (16 expert blocks): what the counts add.
        micro = testlib.micro_model(os.path.join(d, 'micro'))
        startup = {label: start_up(path, a.cache_size, d) for label, path in (('V3 counts', model), ('micro', micro))}
        rows = []
        for label, cache in ((f'cache {a.cache_size}', a.cache_size), ('every expert cached', '1G')):
            _, p = timed([testlib.binary('colibri-cli'), 'bench', '--model', model, '--threads', '2',
                          '--expert-cache-size', cache, '--warm-start', 'off', '-p', '16', '-n', str(a.tokens),
                          '-r', '1', '--mode', 'cold', '-o', 'json'])
            rows.append((label, {r['test']: r for r in json.loads(p.stdout)['results']}))
        manifest_mb = os.path.getsize(os.path.join(model, 'manifest.json')) / 1e6
        print(f'model: {blocks} expert blocks ({m["config"]["n_layers"]} layers, {len(m["extra"]["tensors"])} MTP '
              f'tensors in extra.bin), {a.quantize}; {dir_bytes(model) / 1e6:.0f} MB on disk, manifest.json '
              f'{manifest_mb:.1f} MB\n')
        print(f'import (colibri-convert --quantize {a.quantize}): {convert_s:.1f} s, peak RSS {convert_rss / 1024:.0f} MiB\n')
        print('| start-up | V3 counts | micro model (16 blocks) |')
        print('|---|---|---|')
        for key, text in (('inspect', 'colibri-cli inspect (manifest load), s'), ('port', 'colibri-server to its port, s'),
                          ('health', 'colibri-server to /health 200, s'), ('rss', 'colibri-server RSS after start, MiB')):
            v3, mi = startup['V3 counts'][key], startup['micro'][key]
            print(f'| {text} | {v3:.2f} | {mi:.2f} |')
        print(f'\n| decode (cold, 2 threads, 16-token prompt, {a.tokens} tokens) | pp tok/s | tg tok/s | tg hit rate '
              f'| tg expert bytes/token |')
        print('|---|---|---|---|---|')
        for label, r in rows:
            tg = r[f'tg{a.tokens}']
            print(f'| {label} | {r["pp16"]["tokens_per_second"]:.1f} | {tg["tokens_per_second"]:.1f} | '
                  f'{tg["expert_hit_rate"]:.0%} | {tg["expert_bytes_per_token"] / 1024:.0f} KiB |')
    finally:
        testlib.rmtree(d)


if __name__ == '__main__':
    main()
