"""The DeepSeek oracle models in the other formats users have, for the golden tests:

- gguf_to_split_kv_b: a deepseek2 GGUF rewritten in llama.cpp's newer layout (attn_k_b / attn_v_b
  instead of attn_kv_b, the absorbed MQA view in the metadata: head_count_kv 1, key_length
  kv_lora + rope, value_length kv_lora, the per-head sizes as *_mla keys);
- hf_to_gguf: a DeepseekV3ForCausalLM checkpoint as a deepseek2 GGUF (older layout, group keys);
- gguf_to_hf: a deepseek2 GGUF as a DeepseekV3ForCausalLM checkpoint (F32 safetensors);
- hf_to_fp8: an F32 checkpoint as DeepSeek-V3 / R1 / Kimi K2 are published: every linear layer
  (`*_proj.weight` in the layers) FP8 e4m3 with 128x128 block scales `*_weight_scale_inv` (F32),
  the rest as it was.
Only F32 tensors and scalar metadata travel (the tests feed token ids, not text)."""
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'reference'))
import gguf_write  # noqa: E402
from gguf_np import GGUFFile  # noqa: E402
import moe_ref  # noqa: E402

A = 'deepseek2'


def _scalars(g):
    out = {}
    for k, v in g.metadata.items():
        if isinstance(v, (bool, int, float, str)) and not k.startswith('tokenizer.'):
            out[k] = v
    return out


def gguf_to_split_kv_b(src, dst):
    g = GGUFFile(src)
    meta = _scalars(g)
    nh, rope = meta[f'{A}.attention.head_count'], meta[f'{A}.rope.dimension_count']
    key, val, kv_lora = meta[f'{A}.attention.key_length'], meta[f'{A}.attention.value_length'], \
        meta[f'{A}.attention.kv_lora_rank']
    nope = key - rope
    meta.update({f'{A}.attention.head_count_kv': 1, f'{A}.attention.key_length': kv_lora + rope,
                 f'{A}.attention.value_length': kv_lora, f'{A}.attention.key_length_mla': key,
                 f'{A}.attention.value_length_mla': val})
    tensors = {}
    for name in g.tensors:
        a = g.tensor(name)
        if name.endswith('attn_kv_b.weight'):
            kv = a.reshape(nh, nope + val, kv_lora)
            tensors[name.replace('attn_kv_b', 'attn_k_b')] = np.ascontiguousarray(kv[:, :nope].transpose(0, 2, 1))
            tensors[name.replace('attn_kv_b', 'attn_v_b')] = np.ascontiguousarray(kv[:, nope:])
        else:
            tensors[name] = a
    gguf_write.write_gguf(dst, meta, tensors)


def _read_safetensors(path):
    raw = open(path, 'rb').read()
    n = int.from_bytes(raw[:8], 'little')
    header = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]], dtype=np.float32)
            .reshape(v['shape']) for k, v in header.items() if k != '__metadata__'}


def _write_safetensors(path, tensors):
    """tensors: {name: array}; uint8 arrays are written as F8_E4M3 codes, the rest as F32."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = tensors[name]
        fp8 = a.dtype == np.uint8
        b = np.ascontiguousarray(a, dtype=np.uint8 if fp8 else np.float32).tobytes()
        header[name] = {'dtype': 'F8_E4M3' if fp8 else 'F32', 'shape': list(a.shape),
                        'data_offsets': [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h)
        for b in blobs:
            f.write(b)


# (HF name within a layer, GGUF name within a block)
_LAYER = [('input_layernorm', 'attn_norm'), ('post_attention_layernorm', 'ffn_norm'),
          ('self_attn.q_a_proj', 'attn_q_a'), ('self_attn.q_a_layernorm', 'attn_q_a_norm'),
          ('self_attn.q_b_proj', 'attn_q_b'), ('self_attn.kv_a_proj_with_mqa', 'attn_kv_a_mqa'),
          ('self_attn.kv_a_layernorm', 'attn_kv_a_norm'), ('self_attn.kv_b_proj', 'attn_kv_b'),
          ('self_attn.o_proj', 'attn_output'), ('mlp.gate_proj', 'ffn_gate'), ('mlp.up_proj', 'ffn_up'),
          ('mlp.down_proj', 'ffn_down'), ('mlp.gate', 'ffn_gate_inp'), ('mlp.shared_experts.gate_proj', 'ffn_gate_shexp'),
          ('mlp.shared_experts.up_proj', 'ffn_up_shexp'), ('mlp.shared_experts.down_proj', 'ffn_down_shexp')]

# The MTP (NextN) layer's own tensors, as llama.cpp names them.
_NEXTN = [('eh_proj', 'nextn.eh_proj'), ('enorm', 'nextn.enorm'), ('hnorm', 'nextn.hnorm'),
          ('embed_tokens', 'nextn.embed_tokens'), ('shared_head.norm', 'nextn.shared_head_norm'),
          ('shared_head.head', 'nextn.shared_head_head')]


def with_mtp_layer(src_dir, dst_dir, seed=15):
    """src_dir's checkpoint plus one MTP layer as DeepSeek-V3 / R1 carry it: layer
    num_hidden_layers, a whole MoE decoder layer (random, shaped as the last layer) with
    eh_proj [H, 2H], enorm, hnorm, embed_tokens, shared_head.norm / .head;
    num_nextn_predict_layers 1."""
    with open(os.path.join(src_dir, 'config.json')) as f:
        cfg = json.load(f)
    w = _read_safetensors(os.path.join(src_dir, 'model.safetensors'))
    n, H, V = cfg['num_hidden_layers'], cfg['hidden_size'], cfg['vocab_size']
    rng = np.random.default_rng(seed)
    last, mtp = f'model.layers.{n - 1}.', f'model.layers.{n}.'
    for name in [k for k in w if k.startswith(last)]:
        w[mtp + name[len(last):]] = rng.standard_normal(w[name].shape).astype(np.float32) * 0.1
    for name, shape in (('eh_proj.weight', (H, 2 * H)), ('enorm.weight', (H,)), ('hnorm.weight', (H,)),
                        ('embed_tokens.weight', (V, H)), ('shared_head.norm.weight', (H,)),
                        ('shared_head.head.weight', (V, H))):
        w[mtp + name] = rng.standard_normal(shape).astype(np.float32) * 0.1
    cfg['num_nextn_predict_layers'] = 1
    os.makedirs(dst_dir, exist_ok=True)
    with open(os.path.join(dst_dir, 'config.json'), 'w') as f:
        json.dump(cfg, f, indent=1)
    _write_safetensors(os.path.join(dst_dir, 'model.safetensors'), w)


def hf_to_gguf(hf_dir, dst):
    cfg = json.load(open(os.path.join(hf_dir, 'config.json')))
    w = _read_safetensors(os.path.join(hf_dir, 'model.safetensors'))
    rs = cfg['rope_scaling']
    meta = {'general.architecture': A, f'{A}.block_count': cfg['num_hidden_layers'],
            f'{A}.context_length': cfg['max_position_embeddings'], f'{A}.embedding_length': cfg['hidden_size'],
            f'{A}.feed_forward_length': cfg['intermediate_size'],
            f'{A}.attention.head_count': cfg['num_attention_heads'],
            f'{A}.attention.head_count_kv': cfg['num_key_value_heads'],
            f'{A}.rope.freq_base': float(cfg['rope_theta']),
            f'{A}.attention.layer_norm_rms_epsilon': float(cfg['rms_norm_eps']),
            f'{A}.expert_used_count': cfg['num_experts_per_tok'],
            f'{A}.leading_dense_block_count': cfg['first_k_dense_replace'], f'{A}.vocab_size': cfg['vocab_size'],
            f'{A}.attention.q_lora_rank': cfg['q_lora_rank'], f'{A}.attention.kv_lora_rank': cfg['kv_lora_rank'],
            f'{A}.attention.key_length': cfg['qk_nope_head_dim'] + cfg['qk_rope_head_dim'],
            f'{A}.attention.value_length': cfg['v_head_dim'],
            f'{A}.expert_feed_forward_length': cfg['moe_intermediate_size'],
            f'{A}.expert_count': cfg['n_routed_experts'], f'{A}.expert_shared_count': cfg['n_shared_experts'],
            f'{A}.expert_weights_scale': float(cfg['routed_scaling_factor']),
            f'{A}.expert_weights_norm': bool(cfg['norm_topk_prob']),
            f'{A}.expert_gating_func': 2 if cfg['scoring_func'] == 'sigmoid' else 1,
            f'{A}.expert_group_count': cfg['n_group'], f'{A}.expert_group_used_count': cfg['topk_group'],
            f'{A}.rope.dimension_count': cfg['qk_rope_head_dim'], f'{A}.rope.scaling.type': 'yarn',
            f'{A}.rope.scaling.factor': float(rs['factor']),
            f'{A}.rope.scaling.original_context_length': rs['original_max_position_embeddings'],
            f'{A}.rope.scaling.yarn_log_multiplier': 0.1 * float(rs['mscale_all_dim']),
            'tokenizer.ggml.bos_token_id': cfg['bos_token_id'], 'tokenizer.ggml.eos_token_id': cfg['eos_token_id']}
    t = {'token_embd.weight': w['model.embed_tokens.weight'], 'output_norm.weight': w['model.norm.weight'],
         'output.weight': w['lm_head.weight']}
    nextn = cfg.get('num_nextn_predict_layers', 0)
    if nextn:
        meta[f'{A}.block_count'] += nextn
        meta[f'{A}.nextn_predict_layers'] = nextn
    for i in range(cfg['num_hidden_layers'] + nextn):
        p, b = f'model.layers.{i}.', f'blk.{i}.'
        for hf, gg in _LAYER + (_NEXTN if i >= cfg['num_hidden_layers'] else []):
            if p + hf + '.weight' in w:
                t[b + gg + '.weight'] = w[p + hf + '.weight']
        if p + 'mlp.gate.e_score_correction_bias' in w:
            t[b + 'exp_probs_b.bias'] = w[p + 'mlp.gate.e_score_correction_bias']
        if p + 'mlp.experts.0.gate_proj.weight' in w:
            for proj, gg in (('gate_proj', 'ffn_gate_exps'), ('up_proj', 'ffn_up_exps'), ('down_proj', 'ffn_down_exps')):
                t[b + gg + '.weight'] = np.stack([w[f'{p}mlp.experts.{e}.{proj}.weight']
                                                  for e in range(cfg['n_routed_experts'])])
    gguf_write.write_gguf(dst, meta, t)


def gguf_to_hf(src, dst_dir):
    g = GGUFFile(src)
    m = lambda k: g.metadata[f'{A}.{k}']
    key, rope = m('attention.key_length'), m('rope.dimension_count')
    n_layers, dense = m('block_count'), m('leading_dense_block_count')
    cfg = {'architectures': ['DeepseekV3ForCausalLM'], 'model_type': 'deepseek_v3', 'hidden_size': m('embedding_length'),
           'num_hidden_layers': n_layers, 'num_attention_heads': m('attention.head_count'),
           'num_key_value_heads': m('attention.head_count_kv'), 'intermediate_size': m('feed_forward_length'),
           'moe_intermediate_size': m('expert_feed_forward_length'), 'n_routed_experts': m('expert_count'),
           'num_experts_per_tok': m('expert_used_count'), 'n_shared_experts': m('expert_shared_count'),
           'first_k_dense_replace': dense, 'moe_layer_freq': 1, 'q_lora_rank': m('attention.q_lora_rank'),
           'kv_lora_rank': m('attention.kv_lora_rank'), 'qk_nope_head_dim': key - rope, 'qk_rope_head_dim': rope,
           'v_head_dim': m('attention.value_length'), 'rms_norm_eps': float(m('attention.layer_norm_rms_epsilon')),
           'rope_theta': float(m('rope.freq_base')), 'max_position_embeddings': m('context_length'),
           'scoring_func': 'sigmoid' if m('expert_gating_func') == 2 else 'softmax', 'topk_method': 'noaux_tc',
           'n_group': 1, 'topk_group': 1, 'norm_topk_prob': bool(m('expert_weights_norm')),
           'routed_scaling_factor': float(m('expert_weights_scale')), 'vocab_size': g.tensors['token_embd.weight'][1][0],
           'tie_word_embeddings': False, 'bos_token_id': 1, 'eos_token_id': 2,
           'rope_scaling': {'type': 'yarn', 'factor': float(m('rope.scaling.factor')),
                            'original_max_position_embeddings': m('rope.scaling.original_context_length'),
                            'beta_fast': 32, 'beta_slow': 1,
                            'mscale': float(m('rope.scaling.yarn_log_multiplier')) / 0.1,
                            'mscale_all_dim': float(m('rope.scaling.yarn_log_multiplier')) / 0.1}}
    w = {'model.embed_tokens.weight': g.tensor('token_embd.weight'), 'model.norm.weight': g.tensor('output_norm.weight'),
         'lm_head.weight': g.tensor('output.weight')}
    for i in range(n_layers):
        p, b = f'model.layers.{i}.', f'blk.{i}.'
        for hf, gg in _LAYER:
            if g.has(b + gg + '.weight'):
                w[p + hf + '.weight'] = g.tensor(b + gg + '.weight')
        if g.has(b + 'exp_probs_b.bias'):
            w[p + 'mlp.gate.e_score_correction_bias'] = g.tensor(b + 'exp_probs_b.bias')
        if g.has(b + 'ffn_gate_exps.weight'):
            for proj, gg in (('gate_proj', 'ffn_gate_exps'), ('up_proj', 'ffn_up_exps'), ('down_proj', 'ffn_down_exps')):
                stacked = g.tensor(b + gg + '.weight')
                for e in range(stacked.shape[0]):
                    w[f'{p}mlp.experts.{e}.{proj}.weight'] = stacked[e]
    os.makedirs(dst_dir, exist_ok=True)
    with open(os.path.join(dst_dir, 'config.json'), 'w') as f:
        json.dump(cfg, f, indent=1)
    _write_safetensors(os.path.join(dst_dir, 'model.safetensors'), w)


FP8_MAX = 448.0


def fp8_e4m3_encode(x):
    """Nearest FP8 e4m3 code (uint8) of each value of x, |x| <= 448."""
    values = moe_ref.fp8_e4m3_values()[:127]  # codes 0..126: 0 .. 448, increasing
    mag = np.abs(x)
    hi = np.clip(np.searchsorted(values, mag), 1, 126)
    code = np.where(mag - values[hi - 1] <= values[hi] - mag, hi - 1, hi)
    return (code | np.where(x < 0, 0x80, 0)).astype(np.uint8)


def hf_to_fp8(src_dir, dst_dir, scale_shape=None, omit_scale=()):
    """src_dir's F32 checkpoint with its layers' linear weights as FP8 with 128x128 block scales
    (the scale of a block: its max |w| / 448). scale_shape: {weight name: shape} to write a
    wrong-shaped scale tensor for, omit_scale: weight names written without one (bad-input tests)."""
    b = moe_ref.FP8_BLOCK
    w = _read_safetensors(os.path.join(src_dir, 'model.safetensors'))
    out = {}
    for name, a in w.items():
        if not (name.startswith('model.layers.') and name.endswith('_proj.weight')):
            out[name] = a
            continue
        rows, cols = a.shape
        br, bc = -(-rows // b), -(-cols // b)
        scale = np.zeros((br, bc), dtype=np.float32)
        for i in range(br):
            for j in range(bc):
                scale[i, j] = max(np.abs(a[i * b:(i + 1) * b, j * b:(j + 1) * b]).max(), 1e-12) / FP8_MAX
        full = np.repeat(np.repeat(scale, b, 0), b, 1)[:rows, :cols]
        out[name] = fp8_e4m3_encode(np.clip(a / full, -FP8_MAX, FP8_MAX))
        shape = (scale_shape or {}).get(name)
        if name not in omit_scale:
            out[name + '_scale_inv'] = scale if shape is None else np.ones(shape, dtype=np.float32)
    with open(os.path.join(src_dir, 'config.json')) as f:
        cfg = json.load(f)
    cfg['quantization_config'] = {'activation_scheme': 'dynamic', 'fmt': 'e4m3', 'quant_method': 'fp8',
                                  'weight_block_size': [b, b]}
    os.makedirs(dst_dir, exist_ok=True)
    with open(os.path.join(dst_dir, 'config.json'), 'w') as f:
        json.dump(cfg, f, indent=1)
    _write_safetensors(os.path.join(dst_dir, 'model.safetensors'), out)


def write_f32_hf(src_dir, dst_dir, tensors):
    """A copy of src_dir's config.json with `tensors` ({name: array}) as its F32 weights."""
    os.makedirs(dst_dir, exist_ok=True)
    with open(os.path.join(src_dir, 'config.json')) as f:
        cfg = json.load(f)
    cfg.pop('quantization_config', None)
    with open(os.path.join(dst_dir, 'config.json'), 'w') as f:
        json.dump(cfg, f, indent=1)
    _write_safetensors(os.path.join(dst_dir, 'model.safetensors'), tensors)
