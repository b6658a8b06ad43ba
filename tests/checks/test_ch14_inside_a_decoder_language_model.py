"""The checks of chapter 14's exercises (the half-split rows of W_Q and W_K, induction targets)
accept correct answers written independently and name the usual slips."""

import pytest
import torch

import attention_course
from attention_course import checks
from attention_course.checks import CheckFailed


def half_split_by_loops(weight, num_heads):
    """Within each head, GGUF row 2i + p holds the half-split row p * head_dim / 2 + i."""
    head_dim = weight.shape[0] // num_heads
    out = torch.empty_like(weight)
    for head in range(num_heads):
        for i in range(head_dim // 2):
            for member in range(2):
                out[head * head_dim + member * head_dim // 2 + i] = weight[
                    head * head_dim + 2 * i + member
                ]
    return out


def test_half_split_rows_check_accepts_a_loop_and_names_the_usual_slips():
    checks.check_half_split_rows(half_split_by_loops)

    def converter_again(weight, num_heads):
        rows, columns = weight.shape
        return (
            weight.reshape(num_heads, 2, rows // num_heads // 2, columns)
            .transpose(1, 2)
            .reshape(rows, columns)
        )

    def all_heads_together(weight, num_heads):
        return half_split_by_loops(weight, 1)

    with pytest.raises(CheckFailed, match="converter's reordering again"):
        checks.check_half_split_rows(converter_again)
    with pytest.raises(CheckFailed, match="each head's rows are reordered on their own"):
        checks.check_half_split_rows(all_heads_together)
    with pytest.raises(CheckFailed, match="interleaved_to_half_split"):
        checks.check_half_split_rows(attention_course.pretrained.interleaved_to_half_split)


def induction_targets_by_loops(ids):
    """Key s follows an earlier occurrence of query t's token, by loops."""
    length = len(ids)
    targets = torch.zeros(length, length, dtype=torch.bool)
    for t in range(length):
        for s in range(1, t + 1):
            targets[t, s] = bool(ids[s - 1] == ids[t])
    return targets


def test_induction_targets_check_accepts_loops_and_names_the_usual_slips():
    for seed in (0, 1, 2):
        checks.check_induction_targets(induction_targets_by_loops, seed=seed)

    def duplicate_token(ids):
        same = ids[None, :] == ids[:, None]
        return same & torch.ones_like(same).tril(-1)

    def not_causal(ids):
        targets = torch.zeros(len(ids), len(ids), dtype=torch.bool)
        targets[:, 1:] = ids[None, :-1] == ids[:, None]
        return targets

    with pytest.raises(CheckFailed, match="duplicate-token"):
        checks.check_induction_targets(duplicate_token)
    with pytest.raises(CheckFailed, match="after its query"):
        checks.check_induction_targets(not_causal)
    with pytest.raises(CheckFailed, match="bool"):
        checks.check_induction_targets(lambda ids: induction_targets_by_loops(ids).int())


def test_induction_targets_check_names_the_cause_of_each_slip():
    def key_before(ids):  # the key before the earlier occurrence
        length = len(ids)
        return torch.tensor(
            [[s < t and bool(ids[s + 1] == ids[t]) for s in range(length)] for t in range(length)]
        )

    def strictly_before(ids):  # s < t instead of s <= t
        return induction_targets_by_loops(ids) & torch.ones(len(ids), len(ids)).tril(-1).bool()

    def rolled(ids):  # previous tokens by roll: key 0 sees the last token
        previous = torch.roll(ids, 1)
        return (previous[None, :] == ids[:, None]).tril()

    for answer, message in (
        (key_before, r"the key before the earlier occurrence, ids\[s \+ 1\]"),
        (strictly_before, "you left out key s = t"),
        (rolled, "key 0 follows no token"),
    ):
        with pytest.raises(CheckFailed, match=message):
            checks.check_induction_targets(answer)


def key_patched_with_the_package(x, source, w_q, w_k, base):
    """Queries from x, keys from source, both rotated by the package's RoPE, causal softmax."""
    positions = torch.arange(len(x))
    q = attention_course.apply_rotary(x @ w_q.T, positions, base)
    k = attention_course.apply_rotary(source @ w_k.T, positions, base)
    scores = q @ k.T / w_q.shape[0] ** 0.5
    causal = torch.ones(len(x), len(x), dtype=torch.bool).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1)


def test_key_patched_weights_check_accepts_the_package_rope_and_names_the_slips():
    checks.check_key_patched_weights(key_patched_with_the_package)
    slips = {
        "keys from source, queries from x": lambda x, s, q, k, b: key_patched_with_the_package(
            s, x, q, k, b
        ),
        "not rotated": lambda x, s, q, k, b: (
            ((x @ q.T) @ (s @ k.T).T / q.shape[0] ** 0.5)
            .masked_fill(~torch.ones(len(x), len(x), dtype=torch.bool).tril(), float("-inf"))
            .softmax(-1)
        ),
        "mask keys s > t": lambda x, s, q, k, b: (
            attention_course.apply_rotary(x @ q.T, torch.arange(len(x)), b)
            @ attention_course.apply_rotary(s @ k.T, torch.arange(len(x)), b).T
            / q.shape[0] ** 0.5
        ).softmax(-1),
    }
    for message, wrong in slips.items():
        with pytest.raises(CheckFailed, match=message):
            checks.check_key_patched_weights(wrong)


def attribution_with_rms_norm(write, final, gain, unembedding, eps):
    """PyTorch's RMSNorm of the final stream gives the scale 1 / rms; applied to the write."""
    norm = torch.nn.RMSNorm(final.shape[1], eps=eps, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(gain)
        scale = norm(final) / (final * gain)  # 1 / rms, per position
    return (write * gain * scale[:, :1]) @ unembedding.T


def test_logit_attribution_check_accepts_rms_norm_and_names_the_slips():
    checks.check_logit_attribution(attribution_with_rms_norm)

    def own_norm(write, final, gain, unembedding, eps):
        return attribution_with_rms_norm(write, write, gain, unembedding, eps)

    def no_gain(write, final, gain, unembedding, eps):
        return attribution_with_rms_norm(write, final, torch.ones_like(gain), unembedding, eps)

    with pytest.raises(CheckFailed, match="its own root mean square"):
        checks.check_logit_attribution(own_norm)
    with pytest.raises(CheckFailed, match="scale g"):
        checks.check_logit_attribution(no_gain)


def streaming_positions_from_the_package(t, window, sinks):
    """The course's KVCache(window, sinks, renumber=True), fed one token at a time."""
    cache = attention_course.KVCache(window, sinks, renumber=True)
    for _ in range(t + 1):
        piece = torch.zeros(1, 1, 1, 1)
        cache.update(piece, piece)
    # what it holds once the token that left the window is dropped (the last update
    # returned it too, masked), and where those keys sit inside the cache
    return cache.positions, cache.renumbered(cache.positions)


def streaming_positions_with_a_mask(t, window, sinks):
    positions = torch.arange(t + 1)
    held = positions[(positions < sinks) | (positions > t - window)]
    return held, torch.arange(len(held))


def test_streaming_positions_check_accepts_two_answers_and_names_the_usual_slips():
    checks.check_streaming_positions(streaming_positions_from_the_package)
    checks.check_streaming_positions(streaming_positions_with_a_mask, seed=3)

    def one_too_many(t, window, sinks):
        positions = torch.arange(t + 1)
        held = positions[(positions < sinks) | (positions >= t - window)]
        return held, torch.arange(len(held))

    def no_sinks(t, window, sinks):
        held = torch.arange(max(0, t - window + 1), t + 1)
        return held, torch.arange(len(held))

    def twice(t, window, sinks):
        held = torch.cat(
            [torch.arange(min(sinks, t + 1)), torch.arange(max(0, t - window + 1), t + 1)]
        )
        return held, torch.arange(len(held))

    def text_positions(t, window, sinks):
        held = streaming_positions_with_a_mask(t, window, sinks)[0]
        return held, held

    for wrong, hint in [
        (one_too_many, "window \\+ 1 keys"),
        (no_sinks, "left out the sinks"),
        (twice, "held once"),
        (text_positions, "text's positions again"),
    ]:
        with pytest.raises(CheckFailed, match=hint):
            checks.check_streaming_positions(wrong)
    with pytest.raises(CheckFailed, match="tuple"):
        checks.check_streaming_positions(lambda t, window, sinks: torch.arange(3))


def test_streaming_positions_check_waits_for_an_answer(capsys):
    def stub(t, window, sinks):
        raise NotImplementedError()

    checks.check_streaming_positions(stub)
    assert "Not yet answered" in capsys.readouterr().out
