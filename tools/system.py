"""The Debian packages the book and the tests need, installed by `make system` (which `make book`
and `make test` run first): Chromium, which prints the PDFs and runs the browser tests, and a font
with Chinese characters, for the references' Chinese titles.

    python -m tools.system            # install what is missing (as root, with apt-get)
    python -m tools.system --check    # say what is missing; install nothing

Fast when everything is there: it only asks dpkg. It prints one line before it installs. Without
root or apt-get it says what is missing and how to install it, and succeeds, so that the package
and notebook tests still run; the browser tests then say that they did not run (and fail on CI),
and the PDF printer stops with that message.
"""

import argparse
import os
import shutil
import subprocess
import sys

CHROMIUM = "chromium"
CJK_FONT = "fonts-wqy-microhei"  # Debian's smallest font with Chinese characters
PACKAGES = {  # Debian package -> what needs it
    CHROMIUM: "the PDFs and the browser tests",
    CJK_FONT: "the Chinese characters in the PDFs",
}


def installed(package):
    """Whether dpkg lists `package` as installed."""
    status = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
    ).stdout
    return status.endswith("install ok installed")


def missing():
    """The packages of PACKAGES not installed (all of them where there is no dpkg)."""
    if not shutil.which("dpkg-query"):
        return list(PACKAGES)
    return [package for package in PACKAGES if not installed(package)]


def how_to_install(packages):
    """How to install `packages` and what needs them, in words."""
    return f"`sudo apt-get install {' '.join(packages)}` (or `make system` as root); " + "; ".join(
        f"{package} for {PACKAGES[package]}" for package in packages
    )


def install(packages):
    """apt-get install `packages`, saying so in one line first."""
    print(
        f"make system: installing the Debian packages {', '.join(packages)} with apt-get",
        flush=True,
    )
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=environment, check=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", *packages],
        env=environment,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="install nothing")
    args = parser.parse_args(argv)
    needed = missing()
    if not needed:
        return 0
    if args.check or os.geteuid() != 0 or not shutil.which("apt-get"):
        print(f"make system: Debian packages missing; install them with {how_to_install(needed)}")
        return 0
    install(needed)
    still = missing()
    if still:
        print(f"make system: apt-get did not install {', '.join(still)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
