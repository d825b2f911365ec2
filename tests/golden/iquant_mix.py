"""A Mixtral-shaped GGUF whose matrices mix the codebook i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
IQ2_S, IQ3_XXS, IQ3_S), written by gguf_write from random blocks with sane scales (colibri, like
llama.cpp without an importance matrix, has no quantizer for them). Every type takes every role
across the two layers; token_embd is IQ3_XXS and output IQ3_S."""
import numpy as np

import gguf_write

# GGML type id: (block bytes, f16 scale that makes |w| about 0.05).
BLOCKS = {16: (66, 0.0015), 17: (74, 0.0015), 18: (98, 0.0006), 19: (50, 0.01), 21: (110, 0.0005),
          22: (82, 0.0015), 29: (56, 0.01)}
NAMES = ('iq1_s', 'iq1_m', 'iq2_xxs', 'iq2_xs', 'iq2_s', 'iq3_xxs', 'iq3_s')
VOCAB = 512
SEQUENCE = [1, 275, 290, 300, 13, 350, 400, 268, 281, 450, 511, 32, 100, 269, 300, 301,
            5, 77, 301, 12, 499, 3, 250, 128]


def random_blocks(ggml_type, shape, rng):
    """A RawTensor of random `ggml_type` blocks (rows of shape[-1] elements) with sane scales."""
    block_bytes, scale = BLOCKS[ggml_type]
    n_blocks = int(np.prod(shape)) // 256
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    d = (scale * rng.uniform(0.5, 1.5, size=n_blocks)).astype(np.float16).view(np.uint16)
    if ggml_type == 29:  # IQ1_M: the f16 scale sits in the top nibbles of its last four uint16
        for k in range(4):
            top = (((d >> (4 * k)) & 0xF) << 4).astype(np.uint8)
            blocks[:, 49 + 2 * k] = (blocks[:, 49 + 2 * k] & 0x0F) | top
    else:
        blocks[:, 0:2] = d.view(np.uint8).reshape(n_blocks, 2)
    return gguf_write.RawTensor(ggml_type, shape, blocks.tobytes())


def write(path, seed=16):
    rng = np.random.default_rng(seed)
    H, F, E, L, heads, kv, hd = 256, 512, 4, 2, 4, 2, 64
    a = 'llama'
    meta = {'general.architecture': a, f'{a}.block_count': L, f'{a}.context_length': 4096,
            f'{a}.embedding_length': H, f'{a}.feed_forward_length': F, f'{a}.attention.head_count': heads,
            f'{a}.attention.head_count_kv': kv, f'{a}.rope.freq_base': 1e6,
            f'{a}.attention.layer_norm_rms_epsilon': 1e-5, f'{a}.expert_count': E,
            f'{a}.expert_used_count': 2, 'tokenizer.ggml.bos_token_id': 1, 'tokenizer.ggml.eos_token_id': 2}
    kinds = [16, 17, 18, 19, 21, 22, 29]
    t = {'token_embd.weight': random_blocks(18, (VOCAB, H), rng),
         'output_norm.weight': np.ones(H, np.float32),
         'output.weight': random_blocks(21, (VOCAB, H), rng)}
    for i in range(L):
        b = f'blk.{i}.'
        k = kinds[i:] + kinds[:i]
        t[b + 'attn_norm.weight'] = np.ones(H, np.float32)
        t[b + 'ffn_norm.weight'] = np.ones(H, np.float32)
        t[b + 'attn_q.weight'] = random_blocks(k[0], (heads * hd, H), rng)
        t[b + 'attn_k.weight'] = random_blocks(k[1], (kv * hd, H), rng)
        t[b + 'attn_v.weight'] = random_blocks(k[2], (kv * hd, H), rng)
        t[b + 'attn_output.weight'] = random_blocks(k[3], (H, heads * hd), rng)
        t[b + 'ffn_gate_inp.weight'] = rng.normal(0, 0.1, (E, H)).astype(np.float32)
        t[b + 'ffn_gate_exps.weight'] = random_blocks(k[4], (E, F, H), rng)
        t[b + 'ffn_up_exps.weight'] = random_blocks(k[5], (E, F, H), rng)
        t[b + 'ffn_down_exps.weight'] = random_blocks(k[6], (E, H, F), rng)
    gguf_write.write_gguf(path, meta, t)
    return path
