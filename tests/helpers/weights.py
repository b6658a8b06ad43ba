"""Random weights for `transformers` layers that the tests compare with the course's: the
data maker's own rule (tools/data/deepseek_reference.py), so that both draw alike."""

from tools.data.deepseek_reference import randomized

__all__ = ["randomized"]
