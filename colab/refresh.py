"""Refresh `colab/packages.txt`: the versions Google Colab preinstalls of every package that installing
``companion[data,plots]`` and running the chapters' kernel touch.

    python colab/refresh.py /path/to/pip-freeze.txt --source "googlecolab/backend-info@COMMIT" --date YYYY-MM-DD

The freeze file is the one Google publishes for Colab's runtime (github.com/googlecolab/backend-info,
``pip-freeze.txt``). The script resolves, with pip's resolver constrained to Colab's versions, the dependency
closure of the package (``pyproject.toml``: dependencies and the ``data`` and ``plots`` extras) and of the kernel
stack, keeps the packages Colab has, and writes them pinned to Colab's versions. Torch is left out: Colab's CPU
build is not installable here, so ``make colab-check`` installs ``COLAB_TORCH`` (in CI, the local CPU wheel) beside
these pins; its dependencies are pinned like the rest.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "colab" / "packages.txt"
# What runs a chapter in Colab besides the package itself: the kernel and the widget front-end packages.
KERNEL_STACK = [
    "pip",
    "ipykernel",
    "ipython",
    "jupyter_client",
    "nbclient",
    "nbformat",
    "notebook",
    "widgetsnbextension",
    "jupyterlab_widgets",
]
LOCAL_TORCH = "torch==2.13.0+cpu"  # the CPU wheel on this machine stands in for Colab's torch when resolving
# Colab packages the stand-in torch cannot live with, left to pip: torch 2.13 requires setuptools>=77.0.3 and
# Colab has 75.2.0 (Colab's own torch 2.11 is content with it).
NOT_PINNED = {
    "torch": "Colab's CPU build is not installable here",
    "setuptools": "the stand-in torch 2.13 needs >=77.0.3; Colab has 75.2.0",
}


def read_freeze(path: pathlib.Path) -> dict[str, str]:
    """{canonical name: 'Name==version'} for every pinned line of a ``pip freeze`` file (URL lines skipped)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or " @ " in line or "==" not in line:
            continue
        name = line.split("==", 1)[0]
        pins[canonicalize_name(name)] = line
    return pins


def companion_requirements() -> list[str]:
    """Names of the package's dependencies with the ``data`` and ``plots`` extras (from pyproject.toml)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = (
        project["dependencies"] + project["optional-dependencies"]["data"] + project["optional-dependencies"]["plots"]
    )
    return [Requirement(spec).name for spec in specs]


def resolve(names: list[str], constraints: list[str]) -> dict[str, str]:
    """{canonical name: version} pip would install for ``names`` into an empty environment under ``constraints``."""
    with tempfile.TemporaryDirectory() as tmp:
        constraint_file, report = pathlib.Path(tmp) / "constraints.txt", pathlib.Path(tmp) / "report.json"
        constraint_file.write_text("\n".join(constraints) + "\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                "-c",
                str(constraint_file),
                *names,
            ],
            check=True,
        )
        installs = json.loads(report.read_text())["install"]
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"] for item in installs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("freeze", type=pathlib.Path, help="Colab's pip-freeze.txt")
    parser.add_argument("--source", required=True, help="where the freeze file comes from (repository@commit)")
    parser.add_argument("--date", required=True, help="the date of the freeze file (YYYY-MM-DD)")
    args = parser.parse_args()
    colab = read_freeze(args.freeze)
    constraints = [pin for name, pin in colab.items() if name not in NOT_PINNED] + [LOCAL_TORCH]
    resolved = resolve(companion_requirements() + KERNEL_STACK, constraints)
    kept = sorted((colab[name] for name in resolved if name in colab and name not in NOT_PINNED), key=str.lower)
    not_in_colab = sorted(name for name in resolved if name not in colab and name not in NOT_PINNED)
    unpinned = "; ".join(f"{name} ({why})" for name, why in NOT_PINNED.items())
    header = [
        f"# The versions Google Colab's CPU runtime preinstalls (source: {args.source}, pip-freeze.txt of {args.date})",
        "# of every package that installing the book's package with its data and plots extras, and the chapters'",
        "# kernel, use. Generated by colab/refresh.py (see colab/README.md); `make colab-check` installs them with",
        "# COLAB_TORCH (in CI the local CPU wheel torch==2.13.0; Colab's torch 2.11.0+cpu for Python 3.13",
        "# comes from PyTorch's own index, not reachable here) and checks that the Colab cell changes none of them.",
        f"# Not pinned: {unpinned}.",
        "# Colab lacks these; the Colab cell's install may add them (colab/test_colab_environment.py checks):",
        f"# not-in-colab: {' '.join(not_in_colab)}",
    ]
    OUTPUT.write_text("\n".join(header + kept) + "\n")
    print(f"wrote {OUTPUT.relative_to(ROOT)}: {len(kept)} pins; not in Colab: {', '.join(not_in_colab)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
