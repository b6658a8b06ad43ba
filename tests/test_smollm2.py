"""SmolLM2-135M-Instruct in the course's TinyDecoder (chapter 14) against `transformers`'
LlamaForCausalLM loaded from the same GGUF file: tokens, logits (one prompt at a time and
batched, float32 and float64), greedy generation with the course's cache, the chat template."""

import math

import pytest
import torch

from attention_course import apply_rotary, pretrained

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Attention lets every token look at",
    "Zoë's café serves 12 crêpes 🥞 at 3.50 € each;",
]
TEXTS = PROMPTS + [
    " leading space",
    "  two  spaces\t tab\n\nnew lines",
    "x = 12345 + 678",
    "emoji 🤖🚀 and 中文 and العربية",
    "<|im_start|>user\nhi<|im_end|>",
    "naïve résumé – Ångström",
    'print(f"{value!r:>10}")  # 0.1 + 0.2',
]


@pytest.fixture(scope="module")
def course():
    return pretrained.load_smollm2()


@pytest.fixture(scope="module")
def reference():
    """transformers' own reading of the GGUF file (its dequantizer, its permutation)."""
    from tools.data.serving_reference import load_reference_model

    return load_reference_model()


def ids_of(tokenizer, text):
    return torch.tensor([tokenizer.encode(text).ids])


def test_config_is_the_files(course, reference):
    ours, theirs = course[0].config, reference[0].config
    assert (
        ours.vocab_size,
        ours.embed_dim,
        ours.num_layers,
        ours.num_heads,
        ours.num_kv_heads,
        ours.hidden_dim,
    ) == (
        theirs.vocab_size,
        theirs.hidden_size,
        theirs.num_hidden_layers,
        theirs.num_attention_heads,
        theirs.num_key_value_heads,
        theirs.intermediate_size,
    )
    assert ours.rope_base == theirs.rope_parameters["rope_theta"] == 100_000
    assert ours.norm_eps == pytest.approx(theirs.rms_norm_eps) and theirs.tie_word_embeddings
    model = course[0]
    assert model.lm_head.weight is model.embed.weight  # tied, as the file has no output matrix
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in reference[0].parameters()
    )


@pytest.mark.parametrize("text", TEXTS)
def test_token_ids_equal_transformers(text, course, reference):
    assert course[1].encode(text).ids == reference[1](text)["input_ids"]
    assert course[1].decode(course[1].encode(text).ids, skip_special_tokens=False) == text


def test_chat_prompt_is_the_files_template(reference):
    message = "What is the capital of France?"
    assert pretrained.chat_prompt(message) == reference[1].apply_chat_template(
        [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
    )


def test_logits_equal_transformers_one_prompt_at_a_time_and_batched(course, reference):
    model, tokenizer = course
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = ids_of(tokenizer, prompt)
            torch.testing.assert_close(model(ids), reference[0](ids).logits, rtol=0, atol=1e-4)
        batch = torch.cat([ids_of(tokenizer, p)[:, :5] for p in PROMPTS])  # no padding
        torch.testing.assert_close(model(batch), reference[0](batch).logits, rtol=0, atol=1e-4)


def float64_rotary(base, head_dim):
    """RoPE's cos and sin from float64 angles. (transformers' LlamaRotaryEmbedding computes
    them in float32 whatever the model's dtype, which alone leaves differences of 1e-5.)"""
    inverse = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)

    def forward(x, position_ids):
        angles = position_ids[..., None].to(torch.float64) * inverse  # (batch, seq, d/2)
        angles = torch.cat([angles, angles], dim=-1)  # half-split layout
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    return forward


def rms_norm_in_its_dtype(self, x):
    """LlamaRMSNorm's formula without its cast to float32."""
    return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


def test_logits_equal_transformers_in_float64(course, reference, monkeypatch):
    """Both read the same 4-bit numbers. transformers' Llama computes RoPE's angles and its
    RMSNorms in float32 whatever the model's dtype (1e-5 apart from float64 on this model):
    with those two formulas in float64, the rest (weights and their permutation, grouped
    attention, SwiGLU, the tied output) agrees with the course's decoder to 1e-10."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    ids = ids_of(course[1], PROMPTS[0] + " " + PROMPTS[2])
    ours = pretrained.load_smollm2(dtype=torch.float64)[0]
    theirs = reference[0].to(torch.float64)
    monkeypatch.setattr(theirs.model.rotary_emb, "forward", float64_rotary(100_000.0, 64))
    monkeypatch.setattr(LlamaRMSNorm, "forward", rms_norm_in_its_dtype)
    try:
        with torch.no_grad():
            torch.testing.assert_close(ours(ids), theirs(ids).logits, rtol=0, atol=1e-10)
    finally:
        reference[0].to(torch.float32)


def test_greedy_generation_with_the_course_cache_equals_transformers_generate(course, reference):
    model, tokenizer = course
    for prompt in (PROMPTS[0], pretrained.chat_prompt("Name three colours.")):
        ids = ids_of(tokenizer, prompt)
        ours = model.generate(ids, 24)
        theirs = reference[0].generate(
            ids, max_new_tokens=24, do_sample=False, min_new_tokens=24, pad_token_id=0
        )
        assert ours.tolist() == theirs.tolist()
        assert model.generate(ids, 24, use_cache=False).tolist() == ours.tolist()


def test_generation_stops_at_the_end_of_a_turn(course):
    model, tokenizer = course
    ids = ids_of(tokenizer, pretrained.chat_prompt("What is the capital of France?"))
    out = model.generate(ids, 40, stop_id=2)
    answer = tokenizer.decode(out[0, ids.shape[1] :].tolist(), skip_special_tokens=True)
    assert out[0, -1].item() == 2 and out.shape[1] < ids.shape[1] + 40
    assert "Paris" in answer


def interleaved_rope(x, positions, base):
    """RoPE as the original Llama code and llama.cpp apply it: dimensions (2i, 2i + 1) of
    each head rotate together, as one complex number, by positions * base^(-2i/d)."""
    d = x.shape[-1]
    angles = positions[:, None] * base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def llama_cpp_permute(weight, num_heads):
    """convert_hf_to_gguf.py's reordering of W_Q and W_K rows (half-split -> interleaved)."""
    rows, columns = weight.shape
    return (
        weight.reshape(num_heads, 2, rows // num_heads // 2, columns)
        .swapaxes(1, 2)
        .reshape(rows, columns)
    )


@pytest.mark.parametrize("num_heads, head_dim", [(9, 64), (3, 8), (1, 2)])
def test_interleaved_to_half_split_undoes_the_converter(num_heads, head_dim):
    generator = torch.Generator().manual_seed(num_heads)
    weight = torch.randn(num_heads * head_dim, 5, generator=generator, dtype=torch.float64)
    gguf_rows = llama_cpp_permute(weight, num_heads)
    assert torch.equal(pretrained.interleaved_to_half_split(gguf_rows, num_heads), weight)
    # the same scores: interleaved RoPE on GGUF's rows = half-split RoPE on the course's rows
    x = torch.randn(7, 5, generator=generator, dtype=torch.float64)
    positions = torch.arange(7, dtype=torch.float64) * 3
    ours = apply_rotary(
        (x @ weight.T).reshape(7, num_heads, head_dim).transpose(0, 1), positions.long(), base=100.0
    )
    theirs = interleaved_rope(
        (x @ gguf_rows.T).reshape(7, num_heads, head_dim).transpose(0, 1), positions, base=100.0
    )
    permuted = theirs.reshape(num_heads, 7, head_dim // 2, 2).transpose(-1, -2).flatten(-2)
    torch.testing.assert_close(ours, permuted, rtol=0, atol=1e-12)


def test_interleaved_to_half_split_refuses_bad_shapes():
    with pytest.raises(ValueError, match=r"\(10, 4\).*3 heads"):
        pretrained.interleaved_to_half_split(torch.zeros(10, 4), 3)
    with pytest.raises(ValueError, match="weight"):
        pretrained.interleaved_to_half_split(torch.zeros(10), 1)


def test_ablated_heads_silence_a_decoder_head(course):
    model, tokenizer = course
    ids = ids_of(tokenizer, PROMPTS[2])
    with torch.no_grad():
        before = model(ids)
        with pretrained.ablated_heads(model, [(3, 4)]):
            during = model(ids)
            block = model.blocks[3].attention
            assert block.out_proj.weight[:, 4 * 64 : 5 * 64].abs().sum() == 0
        assert torch.equal(model(ids), before)
    assert not torch.allclose(during, before)
    with pytest.raises(ValueError, match=r"\(30, 0\) outside .* 30 layers of 9 heads"):
        with pretrained.ablated_heads(model, [(30, 0)]):
            pass


def test_the_4_bit_blocks_are_what_gguf_dequantizes():
    """GGUF's Q4_1 by hand: each block of 32 weights stores a float16 scale d and minimum m,
    then 16 bytes of two 4-bit codes q (low nibbles are weights 0-15, high 16-31): w = d q + m."""
    import numpy as np
    from gguf.quants import dequantize

    reader = pretrained.read_gguf()
    tensor = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    row = np.asarray(tensor.data[0])  # 20 bytes per block
    blocks = row.reshape(-1, 20)
    scale = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)  # (blocks, 1)
    minimum = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    codes = blocks[:, 4:]
    q = np.concatenate([codes & 0x0F, codes >> 4], axis=1).astype(np.float32)  # (blocks, 32)
    by_hand = (scale * q + minimum).reshape(-1)
    assert math.prod(tensor.shape) // len(tensor.data) == by_hand.size == 576
    np.testing.assert_array_equal(by_hand, dequantize(tensor.data, tensor.tensor_type)[0])


def test_the_reader_parses_the_file_as_gguf_does_over_plain_arrays():
    """read_gguf's reader (a GGUFReader over a plain ndarray view of the memory map) finds the
    same metadata and tensors as gguf's own GGUFReader, and its arrays are no memmaps."""
    import numpy as np
    from gguf import GGUFReader

    ours, theirs = pretrained.read_gguf(), GGUFReader(str(pretrained.gguf_path()))
    assert isinstance(ours, GGUFReader) and type(ours.data) is np.ndarray
    assert list(ours.fields) == list(theirs.fields)
    for key, field in theirs.fields.items():
        assert ours.fields[key].contents() == field.contents(), key
    assert len(ours.tensors) == len(theirs.tensors) == 272
    for mine, file_tensor in zip(ours.tensors, theirs.tensors):
        assert type(mine.data) is np.ndarray
        assert (mine.name, mine.tensor_type, mine.n_bytes) == (
            file_tensor.name,
            file_tensor.tensor_type,
            file_tensor.n_bytes,
        )
        assert np.array_equal(mine.data, file_tensor.data), mine.name


def test_the_course_dequantizes_every_tensor_as_gguf_does_bit_for_bit():
    """dequantized (PyTorch, in place) against gguf.quants.dequantize (numpy) on every tensor
    of the real file: F32 norms, the Q8_0 embedding and the Q4_1 matrices, bit for bit."""
    import numpy as np
    from gguf.quants import dequantize

    reader = pretrained.read_gguf()
    weights = pretrained.dequantized(reader)
    assert list(weights) == [tensor.name for tensor in reader.tensors]
    kinds = set()
    for tensor in reader.tensors:
        expected = dequantize(tensor.data, tensor.tensor_type)
        ours = weights[tensor.name]
        assert ours.dtype == torch.float32 and tuple(ours.shape) == expected.shape, tensor.name
        assert np.array_equal(ours.numpy().view(np.uint32), expected.view(np.uint32)), tensor.name
        kinds.add(tensor.tensor_type.name)
    assert kinds == {"F32", "Q8_0", "Q4_1"}


def test_dequantized_refuses_a_block_format_it_does_not_read():
    from collections import namedtuple

    import numpy as np
    from gguf import GGMLQuantizationType

    Tensor = namedtuple("Tensor", "name tensor_type data")
    Reader = namedtuple("Reader", "tensors")
    q4_0 = Tensor("blk.0.attn_q.weight", GGMLQuantizationType.Q4_0, np.zeros((1, 18), np.uint8))
    with pytest.raises(NotImplementedError, match=r"blk\.0\.attn_q\.weight is Q4_0: only F32"):
        pretrained.dequantized(Reader([q4_0]))


def test_stored_reference_is_what_transformers_computes_and_what_the_course_computes(
    course, reference
):
    """data/smollm2_reference.json, which chapter 14 checks itself against, holds
    transformers' numbers; the course's decoder gives them too."""
    from attention_course.data import load_smollm2_reference

    for stored in load_smollm2_reference():
        ids = torch.tensor([stored["ids"]])
        assert reference[1](stored["text"])["input_ids"] == stored["ids"]
        assert course[1].encode(stored["text"]).ids == stored["ids"]
        with torch.no_grad():
            for model_logits in (reference[0](ids).logits, course[0](ids)):
                top = model_logits[0, -1].topk(10)
                assert top.indices.tolist() == stored["top_ids"]
                torch.testing.assert_close(
                    top.values, torch.tensor(stored["top_logits"]), rtol=0, atol=1e-4
                )
        assert course[0].generate(ids, 24)[0, len(stored["ids"]) :].tolist() == stored["greedy"]


def test_load_smollm2_reuses_an_open_reader_and_refuses_anything_else(course):
    model, _ = pretrained.load_smollm2(reader=pretrained.read_gguf())
    assert model.lm_head.weight is model.embed.weight  # still tied
    for ours, theirs in zip(model.parameters(), course[0].parameters()):
        assert torch.equal(ours, theirs)
    with pytest.raises(TypeError, match="reader must be a gguf.GGUFReader"):
        pretrained.load_smollm2(reader="SmolLM2.gguf")


def test_continuous_batching_equals_transformers_generate_batch(course, reference):
    """transformers' own continuous batching (generate_batch over its PagedAttentionCache) on
    three of chapter 19's requests, 8 new tokens or the end of the turn: its tokens are the
    stored reference's first ones and the course's generate_continuous's."""
    from attention_course import generate_continuous
    from attention_course.data import load_serving_reference
    from tools.data.serving_reference import batch_and_alone

    record = load_serving_reference()
    requests = record["requests"][:3]
    ids = [request["ids"] for request in requests]
    assert ids == [reference[1](request["text"])["input_ids"] for request in requests]
    batched, alone = batch_and_alone(reference[0], ids, 8, record["stop_id"])
    assert batched == alone == [request["generate_batch"][:8] for request in requests]
    prompts = [torch.tensor(row) for row in ids]
    ours = generate_continuous(course[0], prompts, 8, stop_id=record["stop_id"])
    assert [row[len(prompt) :].tolist() for row, prompt in zip(ours, prompts)] == batched
