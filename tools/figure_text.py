"""Kernel start-up file of `make execute`: every figure a notebook shows records, in its output's
metadata, the size of its smallest text in points and the figure's dpi, so that the site's tests
can compute how many pixels high that text is where the page displays the image.

    output.metadata["figure_text"] = {"smallest_pt": 8.0, "dpi": 100.0}

Loaded with `--IPKernelApp.exec_files` by tools/notebooks.py; notebooks never import it.
"""

import matplotlib.text
import matplotlib_inline.backend_inline as inline

_fetch_metadata = inline._fetch_figure_metadata


def _with_text_sizes(figure):
    figure.canvas.draw()  # tick labels get their text when the figure is drawn
    sizes = [
        text.get_fontsize()
        for text in figure.findobj(matplotlib.text.Text)
        if text.get_visible() and text.get_text().strip()
    ]
    metadata = dict(_fetch_metadata(figure) or {})
    if sizes:
        metadata["figure_text"] = {"smallest_pt": round(min(sizes), 2), "dpi": round(figure.dpi, 2)}
    return metadata or None


inline._fetch_figure_metadata = _with_text_sizes
