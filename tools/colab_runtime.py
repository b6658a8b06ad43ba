"""Colab's runtime, recorded: the library versions Google's Colab has, for the Colab test.

    python -m tools.colab_runtime refresh [SOURCE]   # rewrite colab/runtime.txt
    python -m tools.colab_runtime build              # the stand-in's libraries (print its folder)
    python -m tools.colab_runtime times              # keep the last Colab test's setup times

Google publishes what Colab's runtime holds in the repository googlecolab/backend-info, as the
output of `pip freeze` (pip-freeze.txt: the CPU runtime; pip-freeze.gpu.txt: the GPU one).
`refresh` reads it (SOURCE: that file, a clone of the repository, or a URL; by default the file
on the repository's main branch) and writes colab/runtime.txt: the libraries the chapters import
that Colab has (TOUCHED), with everything they need, each at Colab's version, resolved by pip for
this machine's Python. Colab's torch is a +cpu build from PyTorch's own index; PyPI's build of
the same version (a CUDA build, about 5 GB, that runs on a CPU too) stands in for it.

`build` installs colab/runtime.txt, without dependencies, into a folder kept in this machine's
cache (~/.cache/attention-course, or $COURSE_CACHE_DIR), named by the file's hash: it
is built once per machine and reused while the file is unchanged. tests/test_colab.py runs every
learner notebook on top of it, and writes how long each chapter's setup took there and what it
installed to _build/colab/setup-times/ (a file per chapter); `times` keeps that run in
colab/setup-times.json, with the date and the machine, for the instructors' page
(_ext/course_guide.py shows it).
"""

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

from filelock import FileLock

from tools import ROOT

RUNTIME = ROOT / "colab" / "runtime.txt"
TIMES = ROOT / "colab" / "setup-times.json"
MEASURED = ROOT / "_build" / "colab" / "setup-times"  # CHAPTER.json, by tests/test_colab.py
FREEZE_URL = "https://raw.githubusercontent.com/googlecolab/backend-info/main/pip-freeze.txt"
# What the chapters and the course package import that Colab has (the course package, the model
# packages and gguf are not in Colab: the chapters' setup cells install them), and the kernel.
TOUCHED = [
    "torch",
    "numpy",
    "matplotlib",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface-hub",
    "ipykernel",
]
BUILD_TOOLS = {"setuptools", "pip", "wheel"}
CUDA_BUILD = ("nvidia-", "cuda-", "triton")  # what PyPI's torch brings for CUDA
DIRECT_URL = re.compile(r"^(?P<name>[A-Za-z0-9._-]+) @ \S*/[^/]+?-(?P<version>[0-9][^-]*?)-")


def canonical(name):
    """A distribution's name as pip compares names: torch, huggingface-hub."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_freeze(text):
    """{name: version} from `pip freeze` output. A direct URL (torch @ https://.../torch-2.11.0
    %2Bcpu-cp313-...whl) gives the version in the wheel's name, less its local part (+cpu)."""
    versions = {}
    for line in text.splitlines():
        line = line.strip()
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
        elif match := DIRECT_URL.match(line.replace("%2B", "+")):
            name, version = match["name"], match["version"]
        else:
            continue  # comments, editable installs, local paths
        versions[canonical(name)] = version.split("+")[0].strip()
    return versions


def read_source(source):
    """Colab's pip-freeze.txt and a line saying where it came from and when."""
    path = pathlib.Path(source) if source else None
    if path and path.is_dir():  # a clone of googlecolab/backend-info
        commit, date, subject = subprocess.run(
            ["git", "-C", str(path), "log", "-1", "--format=%H%n%ad%n%s", "--date=short"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.splitlines()
        text = subprocess.run(
            ["git", "-C", str(path), "show", "HEAD:pip-freeze.txt"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return text, f"commit {commit[:12]} of {date} ({subject!r})"
    today = datetime.date.today().isoformat()
    if path and path.is_file():
        return path.read_text(), f"{path.name}, read on {today}"
    url = source or FREEZE_URL
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (a fixed https URL)
        return response.read().decode(), f"{url}, read on {today}"


def resolve(versions):
    """TOUCHED and everything they need, at Colab's versions where Colab has them, as pip
    resolves them for this Python: [(name, version)], sorted."""
    with tempfile.TemporaryDirectory() as folder:
        constraints = pathlib.Path(folder, "constraints.txt")
        constraints.write_text(
            "".join(
                f"{name}=={version}\n"
                for name, version in sorted(versions.items())
                if not name.startswith(CUDA_BUILD)  # PyPI's torch pins its own
            )
        )
        report = pathlib.Path(folder, "report.json")
        missing = [name for name in TOUCHED if canonical(name) not in versions]
        if missing:
            raise SystemExit(f"Colab's list has no {', '.join(missing)}: update TOUCHED")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
             "--disable-pip-version-check", "--report", str(report), "-c", str(constraints),
             *(f"{name}=={versions[canonical(name)]}" for name in TOUCHED)],
            check=True,
        )  # fmt: skip
        installs = json.loads(report.read_text())["install"]
    return sorted(
        (canonical(item["metadata"]["name"]), item["metadata"]["version"]) for item in installs
    )


def refresh(source=None):
    """Rewrite colab/runtime.txt from Colab's published pip-freeze.txt."""
    text, provenance = read_source(source)
    versions = parse_freeze(text)
    pins = resolve(versions)
    python = re.search(r"cp(\d)(\d+)-", text)
    header = [
        "# Colab's CPU runtime, as Google publishes it: googlecolab/backend-info, pip-freeze.txt,",
        f"# {provenance}.",
        f"# Colab's Python there: {python[1]}.{python[2]}." if python else "# Colab's Python: ?",
        "# The libraries the chapters import that Colab has (tools/colab_runtime.py, TOUCHED),",
        "# with what they need, at Colab's versions, resolved for Python "
        f"{sys.version_info[0]}.{sys.version_info[1]}. PyPI's torch of",
        "# Colab's version (a CUDA build) stands in for Colab's +cpu one. Written by",
        "#     python -m tools.colab_runtime refresh     (make colab-refresh)",
        "# Not Colab's version (Colab lacks them, or pip needed another): "
        + (", ".join(f"{n}" for n, v in pins if versions.get(n) != v) or "none"),
    ]
    RUNTIME.parent.mkdir(exist_ok=True)
    RUNTIME.write_text("\n".join(header) + "\n" + "".join(f"{n}=={v}\n" for n, v in pins))
    print(f"wrote {RUNTIME.relative_to(ROOT)}: {len(pins)} libraries ({provenance})")


def pins(path=RUNTIME):
    """{name: version} of colab/runtime.txt."""
    return parse_freeze(path.read_text())


def cache_root():
    return pathlib.Path(
        os.environ.get("COURSE_CACHE_DIR") or pathlib.Path.home() / ".cache" / "attention-course"
    )


def build():
    """The Colab stand-in's libraries, installed once per machine and version list: returns a
    folder holding colab/runtime.txt's libraries, less the build tools, for a .pth file to name."""
    # Not the build tools (setuptools): on Colab they sit in the system's site-packages, which
    # pip's isolated builds leave out; here they would shadow the builds' own.
    wanted = [f"{n}=={v}" for n, v in pins().items() if n not in BUILD_TOOLS]
    digest = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:12]
    folder = cache_root() / f"colab-py{sys.version_info[0]}{sys.version_info[1]}-{digest}"
    libraries, done = folder / "site-packages", folder / "complete"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):  # make test's two processes may both ask for it
        if done.is_file():
            return libraries
        shutil.rmtree(folder, ignore_errors=True)
        print(f"installing the Colab stand-in's libraries (once per machine) in {folder}")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--no-compile", "--target", str(libraries), *wanted],
            check=True,
        )  # fmt: skip
        done.write_text(RUNTIME.read_text())
    return libraries


def provenance(path=RUNTIME):
    """Where colab/runtime.txt's versions come from: "commit ... of 2026-08-19 (...)"."""
    return path.read_text().splitlines()[1].lstrip("# ").rstrip(".")


def keep_times():
    """colab/setup-times.json: the last Colab test's setup times, with when and where."""
    chapters = {path.stem: json.loads(path.read_text()) for path in MEASURED.glob("*.json")}
    if TIMES.is_file():  # a run of some chapters only (COLAB_CHAPTERS) updates theirs
        kept = json.loads(TIMES.read_text())
        if kept["runtime"] == provenance():
            chapters = {**kept["chapters"], **chapters}
    TIMES.write_text(
        json.dumps(
            {
                "measured": datetime.date.today().isoformat(),
                "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
                f"{platform.python_version()}",
                "runtime": provenance(),
                "chapters": dict(sorted(chapters.items())),
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )
    print(f"wrote {TIMES.relative_to(ROOT)}: {len(chapters)} chapters")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    refresh_parser = commands.add_parser("refresh", help="rewrite colab/runtime.txt")
    refresh_parser.add_argument("source", nargs="?", help="pip-freeze.txt: file, clone or URL")
    commands.add_parser("build", help="install the stand-in's libraries (once per machine)")
    commands.add_parser("times", help="keep the last Colab test's setup times")
    arguments = parser.parse_args(argv)
    if arguments.command == "refresh":
        refresh(arguments.source)
    elif arguments.command == "times":
        keep_times()
    else:
        print(build())


if __name__ == "__main__":
    main()
