# SPDX-License-Identifier: MIT
"""What scripts/plot_scalers.py and scripts/plot_formats.py share: matplotlib (Agg), the rows
of cpd-train's result table, and the figure's legend and files."""

import sys


def pyplot():
    """matplotlib.pyplot on the Agg backend, or exit naming the Debian package."""
    try:
        import matplotlib
    except ImportError:
        sys.exit(f"{sys.argv[0]}: needs matplotlib (Debian: apt-get install python3-matplotlib; run with /usr/bin/python3)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def table_rows(text):
    """The rows of cpd-train's result table in its output (format, APS, bits/value, ...), as
    lists of words: the lines between the table's header and the first weights-hash."""
    table = False
    for line in text.splitlines():
        if line.startswith("format") and line.split()[:3] == ["format", "APS", "bits/value"]:
            table = True
            continue
        if line.startswith("weights-hash:"):
            table = False
        w = line.split()
        if table and len(w) >= 10:
            yield w


def save_figure(fig, right, out_csv, rows, out_png):
    """The legend at the right (the axes up to `right`), the PNG, and the closing line."""
    fig.legend(loc="center right", fontsize=7, ncol=1)
    fig.subplots_adjust(right=right)
    fig.savefig(out_png, dpi=110)
    print(f"\nwrote {out_csv} ({rows} rows) and {out_png}")
