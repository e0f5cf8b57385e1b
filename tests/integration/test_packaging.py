"""The package as others install it: build the sdist and wheel, check them, install the wheel into a fresh
virtual environment outside the repository and use it there."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import venv
import zipfile

import pytest
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

DISTRIBUTION = "attention-executed"  # tests below check it is what pyproject.toml says


def _run(*args: str, cwd: pathlib.Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> pathlib.Path:
    """``python -m build`` of this checkout into a temporary folder: one sdist and one wheel."""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT), cwd=out)
    return out


def test_distribution_name_is_ours_and_the_import_name_is_companion():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    assert project["scripts"]["companion"] == "companion.cli:main"
    assert {"Homepage", "Source", "Documentation"} <= set(project["urls"])


def test_sdist_and_wheel_pass_twine_check(dist):
    files = sorted(dist.iterdir())
    assert sorted(f.suffix for f in files) == [".gz", ".whl"], files
    _run(sys.executable, "-m", "twine", "check", "--strict", *map(str, files), cwd=dist)


def test_wheel_holds_the_package_only_with_py_typed_and_project_urls(dist):
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"companion", f"{DISTRIBUTION.replace('-', '_')}-{wheel.name.split('-')[1]}.dist-info"}, top
    assert "companion/py.typed" in names
    assert "companion/book/experiments/__init__.py" in names and "companion/data/__init__.py" in names
    assert not any(name.startswith(("tests/", "book/", "bench/")) or name.endswith(".ipynb") for name in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert f"Name: {DISTRIBUTION}" in metadata
    assert "Project-URL: Source, https://github.com/" in metadata


def test_wheel_installs_into_a_fresh_environment_and_works_there(dist, tmp_path):
    """Outside the repository: import the public API, run a tiny forward pass and ``companion --help``."""
    (wheel,) = dist.glob("*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    import torch

    # torch first, the version this machine runs (a CPU wheel from the configured index; see README)
    _run(str(python), "-m", "pip", "install", "--quiet", f"torch=={torch.__version__.split('+')[0]}", cwd=tmp_path)
    _run(str(python), "-m", "pip", "install", "--quiet", str(wheel), cwd=tmp_path)
    script = (
        "import companion, torch, pathlib\n"
        "assert 'site-packages' in companion.__file__, companion.__file__\n"
        "config = companion.TransformerConfig.from_preset('tiny', 11, 11, max_len=16)\n"
        "model = companion.Transformer(config).eval()\n"
        "logits = model(torch.randint(4, 11, (2, 5)), torch.randint(4, 11, (2, 3)))\n"
        "assert logits.shape == (2, 3, 11)\n"
        "print(companion.__version__)\n"
    )
    result = _run(str(python), "-c", script, cwd=tmp_path)
    assert result.stdout.strip() == wheel.name.split("-")[1]
    help_text = _run(str(env_dir / "bin" / "companion"), "--help", cwd=tmp_path).stdout
    assert "train" in help_text and "translate" in help_text and "evaluate" in help_text
