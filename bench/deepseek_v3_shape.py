#!/usr/bin/python3
"""DeepSeek-V3's real per-expert size, streamed from disk under a memory cap (issue 15 item 7).

A DeepseekV3ForCausalLM checkpoint (FP8 e4m3 with 128x128 weight_scale_inv block scales) with V3's
dimensions: hidden 7168, 128 heads, q_lora 1536, kv_lora 512 + rope 64, nope 128, v 128, expert FFN
2048 (each expert 3 x 7168 x 2048), one shared expert, sigmoid routing with the selection bias,
top-8 in groups. Only the counts are cut so it fits this machine: 2 MoE layers of 32 experts
(4 groups, 2 eligible) instead of 58 of 256. Random FP8 codes (the weights' values do not change
the bytes moved), imported with colibri-convert (default q4_k_m: Q4_K experts).

    bench/deepseek_v3_shape.py [--experts 32] [--layers 2] [--quantize q4_k_m] [--cache-share 0.25]
                               [--contexts 4096] [--tokens 16]

Prints: the model's sizes; KV bytes per token, latent vs decompressed (this model and V3's 61
layers); decode under the cap (colibri-cli bench, cold) against the disk-bound limit (the measured
random O_DIRECT block-read rate, testlib.disk_read_rate, over the expert bytes missed per token); decode after a prompt of each
--contexts length (colibri-cli run). One run; load noted.
"""
import argparse
import json
import math
import os
import re
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'tests'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'golden'))
sys.path.insert(0, os.path.join(ROOT, 'bench'))
import deepseek_convert as dc  # noqa: E402
import deepseek_v3_counts as counts  # noqa: E402
import testlib  # noqa: E402

H, NH, NOPE, ROPE, V, Q_LORA, KV_LORA, FFN, VOCAB = 7168, 128, 128, 64, 128, 1536, 512, 2048, 512


def config(layers, experts):
    return {'architectures': ['DeepseekV3ForCausalLM'], 'model_type': 'deepseek_v3', 'hidden_size': H,
            'num_hidden_layers': layers, 'num_attention_heads': NH, 'num_key_value_heads': NH,
            'intermediate_size': 18432, 'moe_intermediate_size': FFN, 'n_routed_experts': experts,
            'num_experts_per_tok': 8, 'n_shared_experts': 1, 'first_k_dense_replace': 0, 'moe_layer_freq': 1,
            'n_group': 4, 'topk_group': 2, 'topk_method': 'noaux_tc', 'scoring_func': 'sigmoid',
            'norm_topk_prob': True, 'routed_scaling_factor': 2.5, 'q_lora_rank': Q_LORA, 'kv_lora_rank': KV_LORA,
            'qk_nope_head_dim': NOPE, 'qk_rope_head_dim': ROPE, 'v_head_dim': V, 'rms_norm_eps': 1e-6,
            'rope_theta': 10000.0, 'max_position_embeddings': 163840,
            'rope_scaling': {'type': 'yarn', 'factor': 40.0, 'original_max_position_embeddings': 4096,
                             'beta_fast': 32, 'beta_slow': 1, 'mscale': 1.0, 'mscale_all_dim': 1.0},
            'vocab_size': VOCAB, 'tie_word_embeddings': False, 'bos_token_id': 1, 'eos_token_id': 2,
            'quantization_config': {'activation_scheme': 'dynamic', 'fmt': 'e4m3', 'quant_method': 'fp8',
                                    'weight_block_size': [128, 128]}}


def fp8_linear(rng, rows, cols):
    """Random e4m3 codes (magnitudes 2^-3..2^2, either sign) and block scales giving ~1/sqrt(cols)."""
    codes = rng.integers(0x20, 0x48, size=(rows, cols), dtype=np.uint8)
    codes |= (rng.integers(0, 2, size=(rows, cols), dtype=np.uint8) << 7)
    scale = np.full((math.ceil(rows / 128), math.ceil(cols / 128)), 0.5 / math.sqrt(cols), dtype=np.float32)
    return codes, scale


def layer_tensors(i, experts, rng):
    p, t = f'model.layers.{i}.', {}

    def linear(name, rows, cols):
        t[p + name + '.weight'], t[p + name + '.weight_scale_inv'] = fp8_linear(rng, rows, cols)

    counts.attention_tensors(t, p, linear, H, NH, NOPE, ROPE, V, Q_LORA, KV_LORA)
    # Router scores spread enough that different tokens pick different experts.
    t[p + 'mlp.gate.weight'] = (rng.standard_normal((experts, H)) * 4 / np.sqrt(H)).astype(np.float32)
    t[p + 'mlp.gate.e_score_correction_bias'] = (rng.standard_normal(experts) * 0.01).astype(np.float32)
    for proj in ('gate_proj', 'up_proj', 'down_proj'):
        shape = (H, FFN) if proj == 'down_proj' else (FFN, H)
        linear(f'mlp.shared_experts.{proj}', *shape)
        for e in range(experts):
            linear(f'mlp.experts.{e}.{proj}', *shape)
    return t


def write_checkpoint(out, layers, experts):
    rng = np.random.default_rng(5)
    tok = testlib.gen_model(out + '-tok', 'mixtral', 'micro')
    os.makedirs(out, exist_ok=True)
    for f in ('tokenizer.json', 'tokenizer_config.json'):
        with open(os.path.join(tok, f), 'rb') as src, open(os.path.join(out, f), 'wb') as dst:
            dst.write(src.read())
    with open(os.path.join(out, 'config.json'), 'w') as f:
        json.dump(config(layers, experts), f, indent=1)
    weight_map = {}
    for i in range(layers):
        tensors = {}
        if i == 0:
            tensors = {'model.embed_tokens.weight': rng.standard_normal((VOCAB, H)).astype(np.float32),
                       'model.norm.weight': np.ones(H, dtype=np.float32),
                       'lm_head.weight': (rng.standard_normal((VOCAB, H)) / np.sqrt(H)).astype(np.float32)}
        tensors.update(layer_tensors(i, experts, rng))
        name = f'model-{i + 1:05d}-of-{layers:05d}.safetensors'
        dc._write_safetensors(os.path.join(out, name), tensors)
        weight_map.update({k: name for k in tensors})
        del tensors
    with open(os.path.join(out, 'model.safetensors.index.json'), 'w') as f:
        json.dump({'metadata': {}, 'weight_map': weight_map}, f)


RUN_LOG = re.compile(r'prompt (\d+) tokens in ([\d.]+) s; (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\); '
                     r'expert cache (\d+) hits / (\d+) misses, (\d+) expert bytes read')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--experts', type=int, default=32)
    ap.add_argument('--layers', type=int, default=2)
    ap.add_argument('--quantize', default='q4_k_m')
    ap.add_argument('--cache-share', type=float, default=0.25)
    ap.add_argument('--contexts', default='4096')
    ap.add_argument('--tokens', type=int, default=16)
    ap.add_argument('--keep', help='work directory to keep (default: a temporary one, removed)')
    a = ap.parse_args()
    d = a.keep or testlib.tempdir('colibri-v3-shape-')
    os.makedirs(d, exist_ok=True)
    try:
        hf, model = os.path.join(d, 'hf'), os.path.join(d, 'model')
        t0 = time.time()
        if not os.path.exists(os.path.join(hf, 'model.safetensors.index.json')):
            write_checkpoint(hf, a.layers, a.experts)
        gen_s = time.time() - t0
        t0 = time.time()
        if not os.path.exists(os.path.join(model, 'manifest.json')):
            testlib.run([testlib.binary('colibri-convert'), '--input', hf, '--output', model, '--quantize', a.quantize])
        convert_s = time.time() - t0
        with open(os.path.join(model, 'manifest.json')) as f:
            m = json.load(f)
        blocks = m['experts']['blocks']
        block_bytes = max(b['size'] for b in blocks)
        experts_bytes = sum(b['size'] for b in blocks)
        print(f'{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; checkpoint {counts.dir_bytes(hf) / 1e9:.2f} GB FP8 '
              f'(generated {gen_s:.0f} s), imported ({a.quantize}) in {convert_s:.0f} s: {len(blocks)} expert blocks of '
              f'{block_bytes / 2**20:.1f} MiB, {experts_bytes / 2**30:.2f} GiB of experts, dense '
              f'{m["dense"]["size"] / 2**20:.0f} MiB\n')
        lat, dec = (KV_LORA + ROPE) * 4, NH * ((NOPE + ROPE) + V) * 4
        print('| KV per token and layer (F32) | bytes | 61 layers (V3) |')
        print('|---|---|---|')
        print(f'| latent (kv_lora + rope = {KV_LORA + ROPE}) | {lat} | {61 * lat / 2**10:.0f} KiB |')
        print(f'| decompressed K and V ({NH} x ({NOPE + ROPE} + {V})) | {dec} | {61 * dec / 2**20:.2f} MiB |')
        print(f'| ratio | {dec / lat:.0f}x | |\n')
        rate = testlib.disk_read_rate(model) / 1e9
        cache = int(experts_bytes * a.cache_share)
        p = testlib.run([testlib.binary('colibri-cli'), 'bench', '--model', model, '--threads', '2',
                         '--expert-cache-size', str(cache), '--warm-start', 'off', '-p', '64', '-n', str(a.tokens),
                         '-r', '1', '--mode', 'cold', '-o', 'json'])
        r = {x['test']: x for x in json.loads(p.stdout)['results']}
        tg = r[f'tg{a.tokens}']
        missed = tg['expert_bytes_per_token']
        limit = rate * 1e9 / missed if missed > 0 else float('inf')
        print(f'O_DIRECT random reads of whole expert blocks (colibri-cli plan): {rate:.2f} GB/s\n')
        print(f'| cache {a.cache_share:.0%} of the experts ({cache / 2**20:.0f} MiB), cold | tok/s | hit rate | '
              f'expert bytes read / token | disk-bound limit | fraction |')
        print('|---|---|---|---|---|---|')
        print(f'| pp64 | {r["pp64"]["tokens_per_second"]:.2f} | {r["pp64"]["expert_hit_rate"]:.0%} | | | |')
        print(f'| tg{a.tokens} | {tg["tokens_per_second"]:.2f} | {tg["expert_hit_rate"]:.0%} | '
              f'{missed / 2**20:.0f} MiB | {limit:.2f} tok/s | {tg["tokens_per_second"] / limit:.0%} |\n')
        print(f'| decode after a prompt of | prefill tok/s | decode tok/s ({a.tokens} tokens) | expert bytes read / '
              f'decoded token |')
        print('|---|---|---|---|')
        rng = np.random.default_rng(9)
        for n in (int(x) for x in a.contexts.split(',')):
            prompt = ','.join(str(int(t)) for t in rng.integers(3, VOCAB, size=n))
            p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', model, '--threads', '2',
                             '--expert-cache-size', str(cache), '--warm-start', 'off', '--prompt-tokens', prompt,
                             '--max-tokens', str(a.tokens)])
            match = RUN_LOG.search(p.stderr + p.stdout)
            if not match:
                raise AssertionError(f'no timing line in colibri-cli run output:\n{p.stderr[-2000:]}')
            pn, ps, gn, gs, rate_tg = int(match[1]), float(match[2]), int(match[3]), float(match[4]), float(match[5])
            print(f'| {pn} tokens | {pn / ps:.1f} | {rate_tg:.2f} | (run total {int(match[8]) / 2**30:.2f} GiB read) |')
    finally:
        if not a.keep:
            testlib.rmtree(d)


if __name__ == '__main__':
    main()
