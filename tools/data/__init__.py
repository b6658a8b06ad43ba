"""The programs that made the data files in data/, each run once by hand from the repository
root (`python -m tools.data.<name>`); data/README.md gives each file's command and checksum."""

import contextlib
import io
import linecache


def run_cells(sources, name):
    """Run code cells' `sources` in order in one namespace, as a Jupyter kernel would, their
    printing silenced; return the namespace. Each cell's source is registered in `linecache`
    under a name of its own, as IPython does, since `inspect` (and so `triton.jit`) reads the
    source of what a cell defines."""
    namespace = {"__name__": name}
    for index, source in enumerate(sources):
        filename = f"/{name}/cell_{index}.py"  # a name, not a file
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, filename, "exec"), namespace)
    return namespace
