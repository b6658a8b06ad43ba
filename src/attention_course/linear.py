"""Linear attention and the (gated) delta rule (chapter 16).

Notable:
- linear attention (Katharopoulos et al. 2020) weighs key j for query i by phi(q_i) . phi(k_j),
  so the causal form is a recurrence over a state of fixed size, S_t = S_(t-1) + phi(k_t) v_t^T;
- the delta rule (Schlag et al. 2021; DeltaNet) writes only what the state does not predict,
  S_t = S_(t-1) + beta_t k_t (v_t - S_(t-1)^T k_t)^T; the gated delta rule (Yang, Kautz and
  Hatamizadeh 2025; Qwen3-Next, Kimi Linear) first lets it fade, S_(t-1) -> exp(g_t) S_(t-1);
- every causal form comes three ways: parallel (an (n, n) matrix), chunkwise (chunks of C tokens
  in the parallel form, the state passed on) and recurrent, all equal up to rounding;
- shapes: query, key (..., n, d_k), value (..., n, d_v), beta and log_decay (..., n) (or
  (..., n, d_k), one decay per key channel as Kimi Delta Attention); a state (..., d_k, d_v),
  as transformers lays it out (token t reads S_t^T q_t). Decays are given as logarithms g_t.
  Neither function scales nor normalises q and k; half precision is computed in float32.
"""

import math

import torch
import torch.nn.functional as F

from ._shapes import (
    HALF_PRECISION,
    require_float,
    require_int,
    require_same_dtype,
    shape_of,
    type_name,
)


def _elu_plus_one(x):
    return F.elu(x) + 1


def _identity(x):
    return x


# Katharopoulos et al.'s phi(x) = elu(x) + 1 (positive), ReLU, and no map.
FEATURE_MAPS = {"elu": _elu_plus_one, "relu": F.relu, "identity": _identity}


def _check_sequence(name, tensor):
    require_float(name, tensor)
    if tensor.dim() < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions (..., n, d), got shape {shape_of(tensor)}"
        )


def _check_qkv(query, key, value, causal=True):
    """query, key (..., n, d_k) and value (..., n, d_v) of one float dtype."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        _check_sequence(name, tensor)
    require_same_dtype("query", query, "key", key, "value", value)
    same_queries = query.shape[:-2] == key.shape[:-2] and (
        query.shape[-2] == key.shape[-2] or not causal
    )
    if not same_queries or query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query {shape_of(query)} and key {shape_of(key)} must both be "
            "(..., n, d_k)" + (" with the same n" if causal else "")
        )
    if value.shape[:-1] != key.shape[:-1]:
        raise ValueError(
            f"value {shape_of(value)} must be (..., n, d_v) with key's "
            f"(..., n): key is {shape_of(key)}"
        )


def _check_per_token(name, tensor, key, channels=False):
    """beta or log_decay: (..., n) like key (..., n, d_k), or (..., n, d_k)."""
    require_float(name, tensor)
    require_same_dtype("key", key, name, tensor)
    allowed = [tuple(key.shape[:-1])] + ([tuple(key.shape)] if channels else [])
    if tuple(tensor.shape) not in allowed:
        wanted = " or ".join(str(shape) for shape in allowed)
        raise ValueError(
            f"{name} {shape_of(tensor)} must have shape {wanted} (key is {shape_of(key)})"
        )


def _check_chunk_size(chunk_size):
    if chunk_size is not None:
        require_int(
            "chunk_size",
            chunk_size,
            1,
            message=f"chunk_size must be at least 1, got {chunk_size!r}",
        )


def _feature_map(feature_map):
    if isinstance(feature_map, str):
        if feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"feature_map must be one of {sorted(FEATURE_MAPS)} or a "
                f"function, got {feature_map!r}"
            )
        return FEATURE_MAPS[feature_map]
    if not callable(feature_map):
        raise TypeError(
            f"feature_map must be a name in {sorted(FEATURE_MAPS)} or a "
            f"function, got {type_name(feature_map)}"
        )
    return feature_map


def _wide(*tensors):
    """Half-precision tensors in float32 (None stays None)."""
    return [t.float() if t is not None and t.dtype in HALF_PRECISION else t for t in tensors]


def _finite_log_decay(log_decay):
    """log_decay with its entries below a floor raised to it: exp of the floor (and of any sum
    holding it) is 0 in the dtype, as exp(-inf) is, but sums of floors never reach -inf, whose
    differences would be NaN. Entries above the floor are unchanged."""
    floor = 2 * math.log(torch.finfo(log_decay.dtype).tiny)  # -174.7 float32, -1416.8 float64
    return log_decay.clamp_min(floor)


def _strictly_upper(size, device):
    return torch.ones(size, size, dtype=torch.bool, device=device).triu(1)


def _decay_matrix(cumulative):
    """exp(G_i - G_j) for j <= i, 0 above the diagonal: cumulative (..., L)
    log-decays -> (..., L, L). The masked entries are -inf before exp, so a
    large positive difference never overflows."""
    difference = cumulative[..., :, None] - cumulative[..., None, :]
    above = _strictly_upper(cumulative.shape[-1], cumulative.device)
    return difference.masked_fill(above, -math.inf).exp()


def linear_attention(
    query,
    key,
    value,
    feature_map="elu",
    causal=True,
    normalize=True,
    log_decay=None,
    chunk_size=None,
):
    """Linear attention: phi(q_i) . phi(k_j) in place of exp(q_i . k_j).

    query, key (..., n, d_k), value (..., n, d_v) -> output (..., n, d_v).
    feature_map: "elu" (phi(x) = elu(x) + 1, Katharopoulos et al.'s), "relu",
    "identity", or a function applied to the last dimension of q and k.
    normalize: divide by phi(q_i) . sum_j phi(k_j), so that the weights of a
    query sum to 1 as in softmax attention (a zero normaliser gives 0).
    causal=False: every query reads every key, computed as
    phi(Q) (phi(K)^T V), in time linear in n (queries and keys may then
    differ in number). causal=True: query i reads keys j <= i; log_decay
    (..., n) multiplies key j's weight for query i by
    exp(g_(j+1) + ... + g_i). chunk_size C: the chunkwise form, chunks of C
    tokens in the parallel form, the state passed from chunk to chunk;
    C = 1 is the recurrence, one token a step. chunk_size None (default):
    one chunk holding the whole sequence, the parallel form, the masked
    (n, n) matrix of weights (what attention computes); delta_rule gives
    chunk_size the same meaning.
    Chapter 16.
    """
    _check_qkv(query, key, value, causal)
    phi = _feature_map(feature_map)
    _check_chunk_size(chunk_size)
    if log_decay is not None:
        _check_per_token("log_decay", log_decay, key)
    if not causal and (log_decay is not None or chunk_size is not None):
        raise ValueError(
            "log_decay and chunk_size need causal=True: a decay and chunks run along the sequence"
        )
    dtype = value.dtype
    query, key, value, log_decay = _wide(query, key, value, log_decay)
    if log_decay is not None:
        log_decay = _finite_log_decay(log_decay)
    q, k = phi(query), phi(key)  # (..., n, f)
    if normalize:  # carry a value of 1 along: the sums
        ones = value.new_ones(*value.shape[:-1], 1)
        value = torch.cat([value, ones], dim=-1)  # (..., n, d_v + 1)
    if not causal:
        out = q @ (k.transpose(-2, -1) @ value)  # (..., n_q, d_v[+1])
    elif chunk_size is None:
        # weights phi(q_i) . phi(k_j), times exp(G_i - G_j) (G: cumulative g), 0 for j > i
        weights = q @ k.transpose(-2, -1)  # (..., n, n)
        if log_decay is None:
            above = _strictly_upper(weights.shape[-1], weights.device)
            weights = weights.masked_fill(above, 0.0)
        else:
            weights = weights * _decay_matrix(log_decay.cumsum(-1))
        out = weights @ value
    else:
        out = _chunked_linear(q, k, value, log_decay, chunk_size)
    if normalize:
        out, total = out[..., :-1], out[..., -1:]
        out = out / total.masked_fill(total == 0, 1.0)
    return out.to(dtype)


def _chunks(tensor, chunk_size, n):
    """(..., n, x) -> (..., N, C, x), zero-padded at the end to N C tokens."""
    pad = (-n) % chunk_size
    tensor = F.pad(tensor, (0, 0, 0, pad))
    return tensor.reshape(*tensor.shape[:-2], (n + pad) // chunk_size, chunk_size, tensor.shape[-1])


def _unchunk(out, n):
    """(..., N, C, x) -> (..., n, x): the chunks side by side, the padding dropped."""
    return out.reshape(*out.shape[:-3], out.shape[-3] * out.shape[-2], out.shape[-1])[..., :n, :]


def _chunked_linear(q, k, value, log_decay, chunk_size):
    """Causal linear attention chunk by chunk: (..., n, f), (..., n, f),
    (..., n, e), log-decays (..., n) or None -> (..., n, e)."""
    n = k.shape[-2]
    if log_decay is None:
        log_decay = k.new_zeros(k.shape[:-1])
    q, k, value = (_chunks(t, chunk_size, n) for t in (q, k, value))
    g = _chunks(log_decay[..., None], chunk_size, n)[..., 0]  # (..., N, C)
    # G_r = g_1 + ... + g_r inside each chunk
    cumulative = g.cumsum(-1)  # G, in chunk
    # inside a chunk, the parallel form: (phi(q_r) . phi(k_s)) exp(G_r - G_s), s <= r
    inside = (q @ k.transpose(-2, -1)) * _decay_matrix(cumulative)  # (..., N, C, C)
    intra = inside @ value  # (..., N, C, e)
    state = k.new_zeros(*k.shape[:-3], k.shape[-1], value.shape[-1])  # (..., f, e)
    outputs = []
    for i in range(k.shape[-3]):
        to_end = (cumulative[..., i, -1:] - cumulative[..., i, :]).exp()  # (..., C)
        # o_r = intra_r + exp(G_r) phi(q_r)^T S: what the earlier chunks left in the state
        outputs.append(
            intra[..., i, :, :] + (q[..., i, :, :] * cumulative[..., i, :, None].exp()) @ state
        )
        # S <- exp(G_C) S + sum_s exp(G_C - G_s) phi(k_s) v_s^T
        state = (
            cumulative[..., i, -1, None, None].exp() * state
            + (k[..., i, :, :] * to_end[..., None]).transpose(-2, -1) @ value[..., i, :, :]
        )
    out = torch.stack(outputs, dim=-3) if outputs else intra
    return _unchunk(out, n)


def _check_delta_inputs(query, key, value, beta, log_decay, initial_state):
    _check_qkv(query, key, value)
    _check_per_token("beta", beta, key)
    if log_decay is not None:
        _check_per_token("log_decay", log_decay, key, channels=True)
    if initial_state is not None:
        require_float("initial_state", initial_state)
        require_same_dtype("value", value, "initial_state", initial_state)
        wanted = (*key.shape[:-2], key.shape[-1], value.shape[-1])
        if tuple(initial_state.shape) != wanted:
            raise ValueError(
                f"initial_state {shape_of(initial_state)} must be "
                f"(..., d_k, d_v) = {wanted} for key {shape_of(key)} "
                f"and value {shape_of(value)}"
            )


def delta_rule(query, key, value, beta, log_decay=None, chunk_size=None, initial_state=None):
    """The (gated) delta rule: (output (..., n, d_v), final state (..., d_k, d_v)).

    For each token t, with S the state (zeros, or initial_state):
    S <- exp(g_t) S (log_decay given; per key channel if it is (..., n, d_k)),
    u_t = beta_t (v_t - S^T k_t), S <- S + k_t u_t^T, output_t = S^T q_t.
    chunk_size C: the chunkwise-parallel form (Yang et al. 2024), the same
    numbers up to rounding: inside a chunk the corrections u solve one unit
    lower-triangular system (the UT transform of the WY representation), the
    outputs are attention-like matrix products, and only the state passes
    from chunk to chunk. C = 1 is that recurrence, one token at a time.
    chunk_size None (default): one chunk holding the whole sequence, the
    parallel form with an (n, n) system, as in linear_attention; it holds
    (n, n) matrices ((n, n, d_k) for per-channel decays), so long inputs
    want chunks. The final state can be passed on as the next call's
    initial_state.
    Chapter 16.
    """
    _check_delta_inputs(query, key, value, beta, log_decay, initial_state)
    _check_chunk_size(chunk_size)
    dtype = value.dtype
    query, key, value, beta, log_decay, state = _wide(
        query, key, value, beta, log_decay, initial_state
    )
    if state is None:
        state = value.new_zeros(*key.shape[:-2], key.shape[-1], value.shape[-1])
    if log_decay is not None:
        log_decay = _finite_log_decay(log_decay)
        if log_decay.dim() < key.dim():
            log_decay = log_decay[..., None]  # (..., n, 1)
    if chunk_size is None:  # one chunk: the whole sequence (at least 1 for n = 0)
        chunk_size = max(key.shape[-2], 1)
    if chunk_size == 1:  # chunks of one token: the recurrence itself
        output, state = _delta_recurrent(query, key, value, beta, log_decay, state)
    else:
        if log_decay is None:
            log_decay = key.new_zeros(*key.shape[:-1], 1)
        output, state = _delta_chunked(query, key, value, beta, log_decay, state, chunk_size)
    return output.to(dtype), state.to(dtype)


def _delta_recurrent(query, key, value, beta, log_decay, state):
    """One token at a time; log_decay (..., n, 1 or d_k) or None."""
    output = value.new_empty(value.shape)
    for t in range(key.shape[-2]):
        if log_decay is not None:
            state = state * log_decay[..., t, :, None].exp()  # rows scaled
        k_t = key[..., t, :]  # (..., d_k)
        predicted = (k_t[..., None, :] @ state)[..., 0, :]  # S^T k: (..., d_v)
        correction = beta[..., t, None] * (value[..., t, :] - predicted)
        state = state + k_t[..., :, None] * correction[..., None, :]
        output[..., t, :] = (query[..., t, None, :] @ state)[..., 0, :]
    return output, state


def _pairwise(left, right, cumulative):
    """sum_c left_rc right_sc exp(G_rc - G_sc) for s <= r, 0 above:
    (..., C, d_k) twice, cumulative log-decays (..., C, 1 or d_k) -> (..., C, C)."""
    if cumulative.shape[-1] == 1:  # one decay per token
        return (left @ right.transpose(-2, -1)) * _decay_matrix(cumulative[..., 0])
    difference = cumulative[..., :, None, :] - cumulative[..., None, :, :]
    above = _strictly_upper(cumulative.shape[-2], cumulative.device)
    ratios = difference.masked_fill(above[..., None], -math.inf).exp()
    return torch.einsum("...rc,...sc,...rsc->...rs", left, right, ratios)


def _delta_chunked(query, key, value, beta, log_decay, state, chunk_size):
    """Chunks of C tokens: log_decay (..., n, 1 or d_k)."""
    n = key.shape[-2]
    q, k, v, g = (_chunks(t, chunk_size, n) for t in (query, key, value, log_decay))
    b = _chunks(beta[..., None], chunk_size, n)  # (..., N, C, 1)
    # G_r = g_1 + ... + g_r inside each chunk (per key channel for KDA)
    cumulative = g.cumsum(-2)  # G: (..., N, C, 1 or d_k)
    k_beta = k * b
    # A_rs = beta_r k_r^T diag(exp(G_r - G_s)) k_s for s < r: how correction s
    # changes what token r's key reads from the state
    below = _pairwise(k_beta, k, cumulative).tril(-1)  # A: (..., N, C, C)
    system = below + torch.eye(chunk_size, dtype=k.dtype, device=k.device)
    # UT transform: (I + A) U = beta V - (beta K * exp(G)) S_0 gives the C corrections
    # U at once; solved for the two right-hand sides, then combined with each chunk's S_0
    from_values = torch.linalg.solve_triangular(
        system, v * b, upper=False, unitriangular=True
    )  # (..., N, C, d_v)
    from_state = torch.linalg.solve_triangular(
        system, k_beta * cumulative.exp(), upper=False, unitriangular=True
    )
    # q_r^T diag(exp(G_r - G_s)) k_s for s <= r: the attention-like scores of a chunk
    scores = _pairwise(q, k, cumulative)  # (..., N, C, C), s <= r
    outputs = []
    for i in range(k.shape[-3]):
        # U = (I + A)^-1 (beta V) - (I + A)^-1 (beta K exp(G)) S_0
        corrections = from_values[..., i, :, :] - from_state[..., i, :, :] @ state
        # o_r = (q_r exp(G_r))^T S_0 + sum_{s <= r} scores_rs u_s
        reads = (q[..., i, :, :] * cumulative[..., i, :, :].exp()) @ state
        outputs.append(reads + scores[..., i, :, :] @ corrections)
        # S <- exp(G_C) S_0 + sum_s exp(G_C - G_s) k_s u_s^T
        last = cumulative[..., i, -1:, :]  # (..., 1, 1|d_k)
        to_end = (last - cumulative[..., i, :, :]).exp()  # (..., C, 1|d_k)
        state = (
            last.transpose(-2, -1).exp() * state
            + (k[..., i, :, :] * to_end).transpose(-2, -1) @ corrections
        )
    if not outputs:
        return value.new_empty(value.shape), state
    return _unchunk(torch.stack(outputs, dim=-3), n), state
