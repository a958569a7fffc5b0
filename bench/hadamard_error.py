#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""When a random Hadamard rotation helps (docs/scaling.md, "Random Hadamard rotations"): the
relative L2 error ||Q(x) - x|| / ||x|| of NVFP4, MXFP4 and MXFP8 (E4M3) on 2^20 float32 values
of three distributions, without a rotation and with one (rotate in blocks of the format's
size, quantize, rotate back), printed as a markdown table. Run: python3 bench/hadamard_error.py"""

import numpy as np

import cpd


def main():
    rng = np.random.default_rng(0)
    n = 1 << 20
    data = {
        "Gaussian": rng.standard_normal(n),
        "heavy-tailed (N · e^N)": rng.standard_normal(n) * np.exp(rng.standard_normal(n)),
        "Gaussian, 0.1 % of values ×100": np.where(rng.random(n) < 0.001, 100.0, 1.0) * rng.standard_normal(n),
    }
    formats = [("NVFP4", cpd.nvfp4_quantize, 16), ("MXFP4", lambda v: cpd.mx_quantize(v, "e2m1fn"), 32),
               ("MXFP8 (E4M3)", lambda v: cpd.mx_quantize(v, "e4m3fn"), 32)]
    print("| data | " + " | ".join(f"{f} | {f} rotated" for f, _, _ in formats) + " |")
    print("|---|" + "---|---|" * len(formats))
    for name, x in data.items():
        x = x.astype(np.float32)
        row = [name]
        for _, q, b in formats:
            rotated = cpd.hadamard(q(cpd.hadamard(x, b, seed=1)), b, seed=1, inverse=True)
            row += [f"{np.linalg.norm(q(x) - x) / np.linalg.norm(x):.4f}",
                    f"{np.linalg.norm(rotated - x) / np.linalg.norm(x):.4f}"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
