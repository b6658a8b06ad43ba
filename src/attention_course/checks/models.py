"""Checks of Part III (chapters 6-9): encoder-decoder steps, self-, multi-head and grouped-query
attention."""

import torch

from .. import attention, masking, multihead, positions
from .core import (CheckFailed, passed, self_check, run, compare, random, integers)


def _decoder_step_cases(seed):
    """(name, batch, n_k, d, d_v, valid_lens) for the one-decoder-step check."""
    cases = [("batch of 3, lengths 4, 2, 5", 3, 5, 4, 3, [4, 2, 5]),
             ("one sequence, no padding", 1, 6, 8, 2, [6]),
             ("a sequence of length 1", 2, 4, 2, 5, [1, 3])]
    if seed:
        sizes = integers(seed, 3, 1, 7, 20)
        cases = [(f"random case {number}", batch, n_k, d, d_v,
                  integers(seed, batch, 1, n_k + 1, 30 + number))
                 for number, (batch, n_k, d, d_v) in enumerate(zip(
                     sizes, integers(seed, 3, 2, 9, 21), integers(seed, 3, 1, 9, 22),
                     integers(seed, 3, 1, 6, 23)))]
    return cases


def _reference_context(scores, values, lengths):
    """float64 softmax over the first lengths[b] scores of each row, then the weighted sum."""
    weights = torch.zeros_like(scores, dtype=torch.float64)
    for b, length in enumerate(lengths):
        weights[b, :length] = torch.softmax(scores[b, :length].double(), dim=0)
    return (weights[:, :, None] * values.double()).sum(dim=1), weights


@self_check
def check_dot_product_step(fn, seed=0):
    """Check fn(query (batch, d), keys (batch, n_k, d), values (batch, n_k, d_v), valid_lens
    (batch,)) -> context (batch, d_v), with scores q . k_i / sqrt(d) over the first valid_len
    keys."""
    cases = _decoder_step_cases(seed)
    answers = (masking.masked_softmax, masking.softmax_with_mask,
               attention.scaled_dot_product_attention,
               torch.nn.functional.scaled_dot_product_attention)
    for number, (case, batch, n_k, d, d_v, lengths) in enumerate(cases):
        query = random((batch, d), seed, 60 + number)
        keys = random((batch, n_k, d), seed, 70 + number)
        values = random((batch, n_k, d_v), seed, 80 + number)
        scores = (keys.double() @ query.double()[:, :, None]).squeeze(-1) / d**0.5
        expected, _ = _reference_context(scores, values, lengths)
        got = run(fn, (query, keys, values, torch.tensor(lengths)), case, forbidden=answers)
        if isinstance(got, torch.Tensor):
            got = got.double()
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape and d > 1
                and torch.allclose(got, _reference_context(scores * d**0.5, values,
                                                           lengths)[0], atol=1e-5)):
            raise CheckFailed(f"case '{case}': your context is that of unscaled scores "
                              "q . k_i; divide them by sqrt(d)")
        compare(got, expected, case, "context vector")
    passed("your dot-product attention step", len(cases))


@self_check
def check_self_attention(fn, seed=0):
    """Check fn(x (n, d_in), W_q (d_in, d_k), W_k (d_in, d_k), W_v (d_in, d_v)) -> (n, d_v):
    single-head self-attention softmax(X W_q (X W_k)^T / sqrt(d_k)) X W_v, stable for large
    scores."""
    cases = [("4 tokens, d_in 3 -> d_k 2", 4, 3, 2, 2, 1.0),
             ("6 tokens, d_k 8, d_v 5", 6, 4, 8, 5, 1.0), ("1 token", 1, 3, 4, 2, 1.0),
             ("scores around 1e3", 5, 4, 4, 3, 30.0)]
    answers = (attention.scaled_dot_product_attention,
               torch.nn.functional.scaled_dot_product_attention)
    for number, (case, n, d_in, d_k, d_v, scale) in enumerate(cases):
        x = random((n, d_in), seed, number) * scale
        w_q, w_k, w_v = (random(shape, seed, 10 * number + i) * (scale if i < 2 else 1)
                         for i, shape in enumerate([(d_in, d_k), (d_in, d_k), (d_in, d_v)]))
        q, k, v = (x @ w_q).double(), (x @ w_k).double(), (x @ w_v).double()
        weights = torch.softmax(q @ k.T / d_k**0.5, dim=-1)      # float64: no overflow
        expected = (weights @ v).float()

        def explain(index, big=scale > 1):
            return ("these scores are around 1e3 and exp(1e3) overflows to inf, so the softmax "
                    "is inf/inf = NaN; subtract each row's largest score first" if big else None)
        got = run(fn, (x, w_q, w_k, w_v), case, forbidden=answers)
        compare(got, expected, case, explain_nan=explain, atol=1e-4)
    passed("your self-attention", len(cases))


@self_check
def check_positional_encoding(fn, seed=0):
    """Check fn(num_positions, dim) -> (num_positions, dim), the sinusoidal encoding."""
    cases = [(4, 2), (10, 8), (50, 16)]
    if seed:
        cases = [(n, 2 * d) for n, d in zip(integers(seed, 3, 1, 60), integers(seed, 3, 1, 20, 1))]
    for num_positions, dim in cases:
        case = f"{num_positions} positions, dim {dim}"
        position = torch.arange(num_positions, dtype=torch.float64)[:, None]
        frequency = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        expected = torch.stack([torch.sin(position * frequency),
                                torch.cos(position * frequency)], dim=-1).flatten(1).float()
        got = run(fn, (num_positions, dim), case,
                  forbidden=(positions.sinusoidal_positional_encoding,))
        compare(got.to(expected.dtype) if isinstance(got, torch.Tensor) else got, expected, case,
                "encoding", atol=1e-4)
    passed("your positional encoding", len(cases))


@self_check
def check_split_heads(fn, seed=0):
    """Check fn(x (batch, seq, num_heads * head_dim), num_heads) -> (batch, num_heads, seq,
    head_dim), where head h holds features h * head_dim ... (h + 1) * head_dim - 1."""
    cases = [("2 heads", (1, 3, 4), 2), ("4 heads, batch 2", (2, 5, 8), 4), ("1 head", (2, 2, 6), 1)]
    for number, (case, shape, num_heads) in enumerate(cases):
        x = random(shape, seed, number)
        head_dim = shape[-1] // num_heads
        expected = torch.stack([x[..., h * head_dim:(h + 1) * head_dim]
                                for h in range(num_heads)], dim=1)
        got = run(fn, (x, num_heads), case, forbidden=(multihead.split_heads,))
        compare(got, expected, case, "heads")
    passed("your split_heads", len(cases))


@self_check
def check_mha_parameter_count(fn, seed=0):
    """Check fn(embed_dim, num_heads, bias) -> the number of parameters of multi-head attention,
    against torch.nn.MultiheadAttention."""
    cases = [(8, 2, True), (64, 8, False), (512, 8, True), (12, 3, False)]
    if seed:
        heads, widths, biases = integers(seed, 4, 1, 9), integers(seed, 4, 1, 33, 1), \
            integers(seed, 4, 0, 2, 2)
        cases = [(h * w, h, bool(b)) for h, w, b in zip(heads, widths, biases)]
    for embed_dim, num_heads, bias in cases:
        case = f"embed_dim {embed_dim}, {num_heads} heads, bias {bias}"
        module = torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias)
        expected = sum(p.numel() for p in module.parameters())
        got = run(fn, (embed_dim, num_heads, bias), case)
        if got != expected:
            raise CheckFailed(f"case '{case}': you count {got}, PyTorch's module has {expected}")
    passed("your parameter count", len(cases))


@self_check
def check_kv_cache_bytes(fn, seed=0):
    """Check fn(batch_size, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_element) -> the
    size of a KV cache in bytes."""
    cases = [(1, 1, 1, 1, 1, 2), (1, 4096, 32, 32, 128, 2), (8, 2048, 32, 8, 128, 2),
             (2, 100, 8, 2, 64, 4)]
    if seed:
        cases = list(zip(*(integers(seed, 4, 1, 300, offset) for offset in range(6))))
    names = ["batch_size", "seq_len", "num_layers", "num_kv_heads", "head_dim", "bytes_per_element"]
    for arguments in cases:
        case = ", ".join(f"{n}={a}" for n, a in zip(names, arguments))
        expected = 2  # keys and values
        for argument in arguments:
            expected *= argument
        got = run(fn, arguments, case, forbidden=(multihead.kv_cache_bytes,))
        if got != expected:
            hint = " (did you forget that keys AND values are cached?)" if got * 2 == expected else ""
            raise CheckFailed(f"case '{case}': you say {got} bytes, expected {expected}{hint}")
    passed("your KV-cache size", len(cases))


@self_check
def check_repeat_kv(fn, seed=0):
    """Check fn(kv (batch, num_kv_heads, seq, head_dim), group_size) -> (batch, num_kv_heads *
    group_size, seq, head_dim) in which query head h gets KV head h // group_size."""
    cases = [("2 KV heads, groups of 2", (1, 2, 3, 4), 2), ("4 KV heads, groups of 3", (2, 4, 2, 2), 3),
             ("groups of 1 (MHA)", (1, 3, 2, 2), 1)]
    for number, (case, shape, group_size) in enumerate(cases):
        kv = random(shape, seed, number)
        expected = torch.stack([kv[:, h // group_size] for h in range(shape[1] * group_size)], 1)
        got = run(fn, (kv, group_size), case)
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape and group_size > 1
                and torch.equal(got, kv.repeat(1, group_size, 1, 1))):
            raise CheckFailed(f"case '{case}': your heads are in the order 0, 1, ..., 0, 1, ... "
                              "(torch.repeat); query head h must read KV head h // group_size, "
                              "as enable_gqa does (torch.repeat_interleave)")
        compare(got, expected, case, "repeated heads")
    passed("your KV-head repetition", len(cases))


def _gru_pair(seed, embed_dim, hidden):
    """Two float64 nn.GRU(embed_dim, hidden, batch_first=True), drawn from the seed without
    touching the global random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4321 + seed)
        return tuple(torch.nn.GRU(embed_dim, hidden, batch_first=True).double()
                     for _ in range(2))


def _bidirectional_by_loops(embedded, lengths, forward, backward, mistake=None):
    """Each sequence alone, its own n tokens read both ways -> (batch, n_max, 2 hidden), zero at
    the pads. mistake: "flip" reverses the padded sequence, "unflipped" leaves the backward
    states in reading order, "swapped" stacks [backward; forward]."""
    hidden = forward.hidden_size
    out = torch.zeros(*embedded.shape[:2], 2 * hidden, dtype=torch.float64)
    with torch.no_grad():
        for b, n in enumerate(lengths):
            x = embedded[b:b + 1].double()
            ahead = forward(x)[0][0, :n]
            read = x.flip(1) if mistake == "flip" else x[:, :n].flip(1)
            behind = backward(read)[0][0]
            behind = behind[:n] if mistake == "unflipped" else behind.flip(0)[:n]
            pair = (behind, ahead) if mistake == "swapped" else (ahead, behind)
            out[b, :n] = torch.cat(pair, dim=-1)
    return out


@self_check
def check_bidirectional_states(fn, seed=0):
    """Check fn(embedded (batch, n_max, e), valid_lens (batch,), forward, backward) -> (batch,
    n_max, 2 d): at each real position i of a sequence of length n, the forward GRU's state after
    x_1..x_i stacked on the backward GRU's state after x_n..x_i (pads ignored)."""
    cases = [("lengths 3, 1, 5 in a batch of 5 positions", 5, 4, 3, [3, 1, 5]),
             ("no padding", 4, 3, 2, [4, 4]), ("one sequence and 3 pads", 6, 2, 4, [3])]
    if seed:
        sizes = integers(seed, 3, 2, 8, 90)
        cases = [(f"random case {k}", n_max, e, d, integers(seed, 3, 1, n_max + 1, 91 + k))
                 for k, (n_max, e, d) in enumerate(zip(sizes, integers(seed, 3, 1, 6, 92),
                                                       integers(seed, 3, 1, 6, 93)))]
        cases[0] = cases[0][:4] + ([cases[0][1]] + cases[0][4][1:],)   # a full-length one
    hints = {"flip": "your backward GRU reads the padding first: reverse each sequence within "
                     "its own length, so that it starts at that sequence's last real token",
             "unflipped": "your backward states are in reading order: position i must hold the "
                          "state that has read x_n, ..., x_i, so put them back in place",
             "swapped": "your halves are swapped: stack [forward; backward]"}
    for number, (case, n_max, embed_dim, hidden, lengths) in enumerate(cases):
        forward, backward = _gru_pair(seed + number, embed_dim, hidden)
        embedded = random((len(lengths), n_max, embed_dim), seed, 95 + number).double()
        valid_lens = torch.tensor(lengths)
        expected = _bidirectional_by_loops(embedded, lengths, forward, backward)
        with torch.no_grad():
            got = run(fn, (embedded.clone(), valid_lens, forward, backward), case)
        real = torch.arange(n_max)[None, :] < valid_lens[:, None]         # (batch, n_max)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            got = got.detach().double().masked_fill(~real[:, :, None], 0.0)
            for mistake, hint in hints.items():
                wrong = _bidirectional_by_loops(embedded, lengths, forward, backward, mistake)
                if (not torch.allclose(wrong, expected, atol=1e-6)
                        and torch.allclose(got, wrong, atol=1e-6)):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "states")
    passed("your bidirectional encoder", len(cases))
