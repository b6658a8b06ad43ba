"""Multi-head latent attention computed query by query and head by head from the paper's
formulas (DeepSeek-AI 2024), the reference of tests/test_latent.py and tests/test_sparse.py."""

import math

import torch

from helpers.rotary_reference import rotation_matrix


def rms_norm(x, gain, eps=1e-6):
    return gain * x / math.sqrt(float((x * x).mean()) + eps)


def mla_by_loops(layer, x, allowed=None):
    """MLA of one sequence x (n, d) by a MultiHeadLatentAttention's weights, with RoPE as an
    explicit rotation matrix per position (pairs i, i + d_R / 2): query t of head i reads key
    j when j <= t and, with a bool `allowed` (H, n, n), allowed[i, t, j]; no key gives 0."""
    H, d_h, d_R, d_v = layer.num_heads, layer.head_dim, layer.rope_dim, layer.value_dim
    W = {name: p.detach().double() for name, p in layer.state_dict().items()}
    n = len(x)
    latent = [rms_norm(W["kv_down.weight"] @ x[j], W["kv_norm.weight"]) for j in range(n)]
    rope_key = [rotation_matrix(j, d_R) @ (W["k_rope.weight"] @ x[j]) for j in range(n)]
    outputs = []
    for t in range(n):
        c_q = rms_norm(W["q_down.weight"] @ x[t], W["q_norm.weight"])
        heads = []
        for i in range(H):
            q_c = W["q_up.weight"][i * d_h : (i + 1) * d_h] @ c_q
            q_r = rotation_matrix(t, d_R) @ (W["q_rope.weight"][i * d_R : (i + 1) * d_R] @ c_q)
            w_uk = W["k_up.weight"][i * d_h : (i + 1) * d_h]
            w_uv = W["v_up.weight"][i * d_v : (i + 1) * d_v]
            keys = [j for j in range(t + 1) if allowed is None or allowed[i, t, j]]
            head = torch.zeros(d_v, dtype=torch.float64)
            if keys:
                scores = torch.stack(
                    [
                        (q_c @ (w_uk @ latent[j]) + q_r @ rope_key[j]) / math.sqrt(d_h + d_R)
                        for j in keys
                    ]
                )
                weights = torch.softmax(scores, dim=0)
                head = sum(weights[a] * (w_uv @ latent[j]) for a, j in enumerate(keys))
            heads.append(head)
        outputs.append(W["out_proj.weight"] @ torch.cat(heads))
    return torch.stack(outputs)
