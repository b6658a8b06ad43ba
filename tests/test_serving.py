"""Chapter 19's serving engine: the paged KV cache's bookkeeping against a brute-force model,
paged attention against torch's scaled_dot_product_attention over contiguous keys, and
continuous batching against TinyDecoder.generate run on each request alone (float64: the
same tokens; float32: the same tokens wherever the reference's own top-two margin is not
within rounding), under budgets small enough that requests wait, are preempted and share
prefixes; SmolLM2-135M at the end."""

import collections
import math
import random

import pytest
import torch
import torch.nn.functional as F

from attention_course import (
    ContinuousBatcher,
    DecoderConfig,
    PagedKVCache,
    TinyDecoder,
    generate_continuous,
    paged_attention,
    pretrained,
)


def random_decoder(seed, dtype=torch.float64, **options):
    """A small random TinyDecoder: vocabulary 40, 16 wide, 4 query heads over 1, 2 or 4 KV
    heads, 2 layers."""
    torch.manual_seed(seed)
    kv_heads = (1, 2, 4)[seed % 3]
    model = TinyDecoder(40, 16, 4, kv_heads, 2, hidden_dim=32, **options)
    return model.to(dtype).eval()


def random_prompts(seed, lengths, vocab=40):
    generator = torch.Generator().manual_seed(100 + seed)
    return [torch.randint(0, vocab, (n,), generator=generator) for n in lengths]


def reference(model, prompt, max_new_tokens, stop_id=None):
    return model.generate(prompt[None], max_new_tokens, stop_id=stop_id)[0]


def run(batcher, arrivals=()):
    """Step a batcher until it is done; arrivals: (step, prompt, max_new_tokens) added before
    that step -> its StepRecords."""
    pending, records = sorted(arrivals, key=lambda arrival: arrival[0]), []
    while pending or not batcher.done:
        while pending and pending[0][0] <= len(records):
            _, prompt, count = pending.pop(0)
            batcher.add_request(prompt, count)
        records.append(batcher.step())
    return records


# ------------------------------------------------------------------ equal to generate, float64


@pytest.mark.parametrize("seed", range(4))
def test_tokens_equal_generate_alone_under_a_tight_budget_with_a_stop_token(seed):
    options = dict(tie_embeddings=seed % 2 == 1)
    if seed == 3:  # RoPE scaling that depends on positions only
        options["scaling"] = {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 8,
        }
    model = random_decoder(seed, **options)
    prompts = random_prompts(seed, [3, 9, 1, 14, 6, 5])
    counts = [7, 3, 10, 5, 8, 6]
    # a stop token the first request produces on its way, so that it stops early
    stop_id = int(reference(model, prompts[0], 7)[len(prompts[0]) + 2])
    block_size = 4
    # the smallest budget allowed: the longest request alone
    budget = max(math.ceil((len(p) + n - 1) / block_size) for p, n in zip(prompts, counts))
    outputs = generate_continuous(
        model, prompts, counts, block_size=block_size, stop_id=stop_id, num_blocks=budget
    )
    for prompt, count, output in zip(prompts, counts, outputs):
        assert torch.equal(output, reference(model, prompt, count, stop_id))
    assert len(outputs[0]) <= len(prompts[0]) + 3  # it stopped at the stop token

    # the same schedule, recorded: requests waited, were preempted, ran together
    batcher = ContinuousBatcher(model, budget, block_size, stop_id)
    for prompt, count in zip(prompts, counts):
        batcher.add_request(prompt, count)
    records = run(batcher)
    admitted_late = [r for step, record in enumerate(records) if step for r in record.admitted]
    assert admitted_late and any(len(record.running) > 1 for record in records)
    assert any(record.preempted for record in records) or seed != 0
    assert [torch.equal(batcher.output(i), o) for i, o in enumerate(outputs)] == [True] * 6
    assert batcher.cache.free_blocks == budget and set(batcher.cache.refcounts) == {0}


@pytest.mark.parametrize("seed", range(3))
def test_requests_arriving_mid_stream_and_sharing_prefixes_equal_generate_alone(seed):
    model = random_decoder(seed)
    base = random_prompts(seed, [11])[0]
    extra = random_prompts(seed + 10, [3, 2])
    arrivals = [
        (0, base, 12),
        (2, base.clone(), 5),  # the whole prompt in common: all but its last token shared
        (2, torch.cat([base, extra[0]]), 6),  # longer: the first 11 shared
        (3, torch.cat([base[:6], extra[1]]), 4),  # 6 shared: copy-on-write inside a block
        (5, random_prompts(seed + 20, [4])[0], 3),  # nothing shared
    ]
    batcher = ContinuousBatcher(model, 40, block_size=4)
    shared_seen, records = [], []
    pending = list(arrivals)
    while pending or not batcher.done:
        while pending and pending[0][0] <= len(records):
            _, prompt, count = pending.pop(0)
            batcher.add_request(prompt, count)
        records.append(batcher.step())
        shared_seen.append(max(batcher.cache.refcounts))
    for index, (_, prompt, count) in enumerate(arrivals):
        assert torch.equal(batcher.output(index), reference(model, prompt, count))
    # the newcomers at step 2 forked request 0's blocks: their prefill read only what they
    # did not share (1 + 3 tokens), and blocks were held by several sequences
    assert records[2].admitted == [1, 2] and records[2].tokens == 1 + 1 + 3
    assert records[3].tokens == 3 + 2 and max(shared_seen) >= 3
    assert batcher.cache.free_blocks == 40


def test_one_request_and_no_request_and_no_new_tokens():
    model = random_decoder(0)
    prompt = random_prompts(0, [5])[0]
    assert generate_continuous(model, [], 4) == []
    (output,) = generate_continuous(model, [prompt], 0)
    assert torch.equal(output, prompt) and output is not prompt
    (output,) = generate_continuous(model, [prompt.int()], 6, block_size=1, num_blocks=10)
    assert torch.equal(output, reference(model, prompt.int(), 6))
    assert output.dtype == reference(model, prompt.int(), 6).dtype


# ------------------------------------------------------------------- float32: what holds


def top_two_margin(model, ids):
    """The reference's margin between its two best logits for the token after ids."""
    with torch.no_grad():
        best = model(ids[None])[0, -1].topk(2).values
    return float(best[0] - best[1])


@pytest.mark.parametrize("seed", range(3))
def test_float32_tokens_equal_generate_unless_its_own_margin_is_within_rounding(seed):
    """float32: the ragged batch rounds differently from one request alone (other matrix
    shapes), by about 1e-6 on these logits; greedy tokens agree except where the
    reference's two best logits are within 1e-4 of each other (a tie at that precision).
    On these seeds every token agrees."""
    model = random_decoder(seed, torch.float32)
    prompts = random_prompts(seed, [2, 8, 13, 5])
    outputs = generate_continuous(model, prompts, 12, block_size=4, num_blocks=7)
    for prompt, output in zip(prompts, outputs):
        expected = reference(model, prompt, 12)
        differ = (output != expected).nonzero()
        if len(differ):
            first = int(differ[0])
            assert torch.equal(output[:first], expected[:first])
            assert top_two_margin(model, expected[:first]) < 1e-4


# ----------------------------------------------------------- block bookkeeping, brute force


def check_against_the_model(cache, contents):
    """Every sequence's tokens read back through its block table; reference counts equal
    the number of tables holding each block; free and held blocks add up."""
    size = cache.block_size
    assert cache.sequences == sorted(contents)
    holders = collections.Counter()
    for sequence, tags in contents.items():
        table = cache.block_table(sequence)
        assert cache.length(sequence) == len(tags)
        assert len(table) == math.ceil(len(tags) / size)
        assert len(set(table)) == len(table)  # no block twice in one table
        holders.update(table)
        slots = [table[p // size] * size + p % size for p in range(len(tags))]
        expected = torch.tensor(tags, dtype=torch.float64)
        for keys, values in zip(cache.keys, cache.values):
            assert torch.equal(keys.flatten(0, 1)[slots][:, 0, 0], expected)
            assert torch.equal(values.flatten(0, 1)[slots][:, 0, 0], -expected)
    counts = cache.refcounts
    assert counts == [holders[block] for block in range(cache.num_blocks)]
    assert cache.free_blocks == counts.count(0)  # none leaked, none freed twice


@pytest.mark.parametrize("seed", range(6))
def test_admissions_appends_forks_and_retirements_keep_the_books(seed):
    rng = random.Random(seed)
    config = DecoderConfig(10, 8, 2, 2, 1, 16)
    cache = PagedKVCache(
        config, num_blocks=12, block_size=rng.choice([1, 3, 4]), dtype=torch.float64
    )
    contents, tag, released = {}, 0, []
    for _ in range(300):
        action = rng.choice(["admit", "append", "append", "append", "fork", "retire"])
        held = sorted(contents)
        if action == "admit" or not held:
            contents[cache.new_sequence()] = []
        elif action == "append":
            sequence, count = rng.choice(held), rng.randint(0, 7)
            needed, free = cache.blocks_needed(sequence, count), cache.free_blocks
            if needed > free:
                with pytest.raises(ValueError, match="need"):
                    cache.reserve(sequence, count)
            else:
                slots = cache.reserve(sequence, count)
                assert free - cache.free_blocks == needed
                tags = [float(tag + i + 1) for i in range(count)]
                tag += count
                key = torch.tensor(tags, dtype=torch.float64)[:, None, None].expand(-1, 1, 4)
                for layer in range(config.num_layers):
                    cache.write(layer, slots, key.contiguous(), -key.contiguous())
                contents[sequence] += tags
        elif action == "fork":
            sequence = rng.choice(held)
            length = rng.randint(0, len(contents[sequence]))
            contents[cache.fork(sequence, length)] = contents[sequence][:length]
        else:
            sequence = rng.choice(held)
            cache.release(sequence)
            del contents[sequence]
            released.append(sequence)
        check_against_the_model(cache, contents)
    for sequence in released[:3]:  # a retired sequence cannot be released again
        with pytest.raises(ValueError, match="not held"):
            cache.release(sequence)
    for sequence in sorted(contents):
        cache.release(sequence)
    assert cache.free_blocks == 12 and set(cache.refcounts) == {0}


def test_copy_on_write_copies_a_shared_partial_block_once():
    cache = PagedKVCache(DecoderConfig(10, 8, 1, 2, 1, 16), num_blocks=4, block_size=4)
    parent = cache.new_sequence()
    slots = cache.reserve(parent, 6)
    cache.write(
        0,
        slots,
        torch.arange(6.0)[:, None, None].expand(6, 1, 4).contiguous(),
        torch.zeros(6, 1, 4),
    )
    child = cache.fork(parent, 5)
    assert cache.block_table(child) == cache.block_table(parent)
    assert cache.refcounts[:2] == [2, 2] and cache.blocks_needed(child, 1) == 1
    cache.write(0, cache.reserve(child, 1), torch.full((1, 1, 4), 50.0), torch.zeros(1, 1, 4))
    # the child's second block is now its own copy; the parent's keys are untouched
    assert cache.block_table(child)[0] == cache.block_table(parent)[0]
    assert cache.block_table(child)[1] != cache.block_table(parent)[1]
    keys = cache.keys[0].flatten(0, 1)[:, 0, 0]
    table = cache.block_table(child)
    assert keys[table[1] * 4 : table[1] * 4 + 2].tolist() == [4.0, 50.0]
    assert keys[4:6].tolist() == [4.0, 5.0]
    assert cache.refcounts[:2] == [2, 1] and cache.blocks_needed(parent, 1) == 0


# ---------------------------------------------------------------------------- paged attention


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_paged_attention_equals_sdpa_over_the_contiguous_keys(dtype, tolerance, heads, kv_heads):
    generator = torch.Generator().manual_seed(heads * 10 + kv_heads)
    block_size, num_blocks, d, d_v = 3, 20, 8, 5
    key_lens = torch.tensor([7, 1, 12, 4, 9])
    query_lens = torch.tensor([7, 1, 1, 0, 3])  # a prefill, decodes, an idle one, a chunk
    key_pool = torch.randn(num_blocks, block_size, kv_heads, d, generator=generator, dtype=dtype)
    value_pool = torch.randn(num_blocks, block_size, kv_heads, d_v, generator=generator)
    value_pool = value_pool.to(dtype)
    # each sequence's blocks: distinct, scattered over the pool
    order = torch.randperm(num_blocks, generator=generator).tolist()
    width = max(math.ceil(n / block_size) for n in key_lens.tolist())
    tables = torch.zeros(len(key_lens), width, dtype=torch.long)
    for b, n in enumerate(key_lens.tolist()):
        for column in range(math.ceil(n / block_size)):
            tables[b, column] = order.pop()
    query = torch.randn(int(query_lens.sum()), heads, d, generator=generator, dtype=dtype)
    output = paged_attention(query, key_pool, value_pool, tables, query_lens, key_lens)
    assert output.shape == (len(query), heads, d_v) and output.dtype == dtype
    start = 0
    for b, (n_q, n_k) in enumerate(zip(query_lens.tolist(), key_lens.tolist())):
        # the contiguous cache of sequence b, token by token
        keys = torch.stack(
            [key_pool[tables[b, p // block_size], p % block_size] for p in range(n_k)]
        )
        values = torch.stack(
            [value_pool[tables[b, p // block_size], p % block_size] for p in range(n_k)]
        )
        if n_q == 0:
            continue  # an idle sequence: no query, no output row
        q = query[start : start + n_q].transpose(0, 1)  # (H, n_q, d)
        mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
        expected = F.scaled_dot_product_attention(
            q, keys.transpose(0, 1), values.transpose(0, 1), attn_mask=mask, enable_gqa=True
        )
        torch.testing.assert_close(
            output[start : start + n_q], expected.transpose(0, 1), atol=tolerance, rtol=tolerance
        )
        start += n_q


# ------------------------------------------------------------------------------- door checks


def test_windows_sinks_and_dynamic_rope_are_refused():
    prompt = torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="sliding window"):
        generate_continuous(random_decoder(0, window=4), [prompt], 2)
    model = random_decoder(0)
    with model.windowed(4, sinks=1), pytest.raises(ValueError, match="sliding window"):
        ContinuousBatcher(model, 4)
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
    with pytest.raises(ValueError, match="dynamic"):
        generate_continuous(random_decoder(0, scaling=dynamic), [prompt], 2)


def test_a_budget_too_small_for_one_request_and_other_bad_input_are_named():
    model = random_decoder(0)
    prompts = [torch.tensor([1, 2, 3]), torch.arange(10)]
    with pytest.raises(ValueError, match=r"prompts\[1\] \(10,\) .* 3 blocks .* num_blocks=2"):
        generate_continuous(model, prompts, 3, block_size=4, num_blocks=2)
    with pytest.raises(ValueError, match="max_new_tokens holds 1 counts for 2 prompts"):
        generate_continuous(model, prompts, [3])
    with pytest.raises(ValueError, match=r"prompts\[0\]"):
        generate_continuous(model, [prompts[0][None]], 3)
    with pytest.raises(ValueError, match="stop_id=40"):
        generate_continuous(model, prompts, 3, stop_id=40)
    batcher = ContinuousBatcher(model, 2, block_size=4)
    with pytest.raises(ValueError, match="num_blocks=2"):
        batcher.add_request(torch.arange(10), 3)
    with pytest.raises(ValueError, match="only 0 were added"):
        batcher.output(0)
    cache = PagedKVCache(model.config, 2, 4, dtype=torch.float64)
    sequence = cache.new_sequence()
    with pytest.raises(ValueError, match="need 3 blocks; 2 are free"):
        cache.reserve(sequence, 9)
    with pytest.raises(ValueError, match="length=1 exceeds"):
        cache.fork(sequence, 1)
    with pytest.raises(ValueError, match="key"):
        cache.write(0, cache.reserve(sequence, 1), torch.zeros(1, 1, 4), torch.zeros(1, 1, 4))


def test_paged_attention_refuses_lengths_that_disagree():
    query, pool = torch.randn(3, 2, 4), torch.randn(2, 2, 1, 4)
    tables = torch.tensor([[0, 1]])
    with pytest.raises(ValueError, match="sum\\(query_lens\\) = 2"):
        paged_attention(query, pool, pool, tables, torch.tensor([2]), torch.tensor([3]))
    with pytest.raises(ValueError, match="key_lens"):
        paged_attention(query, pool, pool, tables, torch.tensor([3]), torch.tensor([5]))
    with pytest.raises(ValueError, match="H a multiple of H_kv"):
        paged_attention(
            query, pool.expand(2, 2, 3, 4), pool, tables, torch.tensor([3]), torch.tensor([3])
        )


# ---------------------------------------------------------------------------- a real model


@pytest.fixture(scope="module")
def smollm2():
    return pretrained.load_smollm2()  # float32; loading is most of the cost (about 15 s)


def test_smollm2_serves_prompts_as_generate_does_alone(smollm2):
    """SmolLM2-135M (30 layers, GQA 9/3), float32: three short prompts, two with a prefix in
    common, four new tokens each under a budget of 3 blocks of 4: about 6 s on one thread,
    after the model's load."""
    model, tokenizer = smollm2
    texts = ["The capital of France is", "The capital of France is a", "def fibonacci(n):"]
    prompts = [torch.tensor(tokenizer.encode(text).ids) for text in texts]
    batcher = ContinuousBatcher(model, 3, block_size=4)
    records = run(batcher, [(0, prompts[0], 4), (1, prompts[1], 4), (1, prompts[2], 4)])
    assert records[1].tokens < len(prompts[1]) + len(prompts[2]) + 1  # a prefix was shared
    for index, prompt in enumerate(prompts):
        output, expected = batcher.output(index), reference(model, prompt, 4)
        differ = (output != expected).nonzero()
        if len(differ):  # float32: only where the model itself is torn between two tokens
            first = int(differ[0])
            assert top_two_margin(model, expected[:first]) < 1e-4
