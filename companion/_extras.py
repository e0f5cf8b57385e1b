"""Optional dependencies: importing one that is missing names the extra of the package that installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "import_optional"]

# module -> the extra of attention-executed (pyproject.toml's [project.optional-dependencies]) that installs it
EXTRAS = {
    "spacy": "data",
    "datasets": "data",
    "sacrebleu": "data",
    "tokenizers": "data",
    "matplotlib": "plots",
    "ipywidgets": "plots",
    "onnx": "export",
    "onnxscript": "export",
    "onnxruntime": "export",
}


def import_optional(module: str, purpose: str) -> ModuleType:
    """``importlib.import_module(module)``; an ImportError saying which extra to install when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        top = module.split(".")[0]
        extra = EXTRAS.get(top)
        hint = f'pip install "attention-executed[{extra}]"' if extra else f"pip install {top}"
        raise ImportError(f"{purpose} needs the {top} package, which is not installed: {hint}") from error
