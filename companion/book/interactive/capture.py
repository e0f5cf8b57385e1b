"""Capturing what a function prints, draws (``plt.show()``) and displays, as nbformat outputs:
:func:`capture_outputs`."""

from __future__ import annotations

import base64
import contextlib
import io
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["capture_outputs", "FIGURE_DPI"]

#: Resolution of the figures precomputed for the website (the chapters' own figures use matplotlib's 100 dpi).
FIGURE_DPI = 72


class Recorder:
    """Outputs in the order they happen, as nbformat output dicts (streams merged like Jupyter merges them)."""

    def __init__(self) -> None:
        self.outputs: list[dict[str, Any]] = []

    def text(self, stream: str, text: str) -> None:
        if not text:
            return
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == stream:
            last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": stream, "text": text})

    def display(self, data: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> None:
        self.outputs.append({"output_type": "display_data", "data": dict(data), "metadata": dict(metadata or {})})

    def clear(self) -> None:
        self.outputs.clear()


class _StreamWriter(io.TextIOBase):
    def __init__(self, recorder: Recorder, name: str) -> None:
        self._recorder, self._name = recorder, name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._recorder.text(self._name, text)
        return len(text)


class _DisplayPublisher:
    """Stands in for IPython's display publisher while a state runs (as ``IPython.utils.capture`` does): displays
    and clears go to the recorder, anything else (``set_parent``, which ipywidgets' Output calls in a kernel) to the
    shell's own publisher."""

    def __init__(self, recorder: Recorder, original: Any) -> None:
        self._recorder, self._original = recorder, original

    def publish(self, data, metadata=None, *args, **kwargs) -> None:
        self._recorder.display(data, metadata)

    def clear_output(self, wait: bool = False) -> None:
        self._recorder.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


def _png_size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def _figure_output(figure: Any) -> dict[str, Any]:
    """A matplotlib figure as a display_data output: PNG at FIGURE_DPI, text/plain naming its titles."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
    png = buffer.getvalue()
    titles = [t for t in [getattr(figure, "_suptitle", None)] if t is not None and t.get_text()]
    names = [t.get_text() for t in titles] + [ax.get_title() for ax in figure.axes if ax.get_title()]
    plain = "Figure" + (": " + "; ".join(names) if names else "")
    width, height = _png_size(png)
    return {
        "output_type": "display_data",
        "data": {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": plain},
        "metadata": {"image/png": {"width": width, "height": height}},
    }


@contextlib.contextmanager
def captured(recorder: Recorder) -> Iterator[None]:
    """Route stdout, stderr, IPython displays and ``plt.show()`` of the new figures into ``recorder``."""
    import matplotlib.pyplot as plt

    before = set(plt.get_fignums())

    def flush_figures() -> None:
        for number in sorted(set(plt.get_fignums()) - before):
            figure = plt.figure(number)
            recorder.outputs.append(_figure_output(figure))
            plt.close(figure)

    def show(*args: Any, **kwargs: Any) -> None:
        flush_figures()

    shell = _ipython()
    publisher = getattr(shell, "display_pub", None)
    original_show = plt.show
    try:
        plt.show = show
        if shell is not None:
            shell.display_pub = _DisplayPublisher(recorder, publisher)
        with (
            contextlib.redirect_stdout(_StreamWriter(recorder, "stdout")),
            contextlib.redirect_stderr(_StreamWriter(recorder, "stderr")),
        ):
            yield
            flush_figures()  # figures the function left open, as the inline backend would show them
    finally:
        plt.show = original_show
        if shell is not None:
            shell.display_pub = publisher
        for number in set(plt.get_fignums()) - before:
            plt.close(number)


def _ipython() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        return None
    return get_ipython()


def capture_outputs(function: Callable[..., Any], kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Call ``function(**kwargs)`` and return what it printed, drew and displayed, as nbformat output dicts.

    Streams become ``{"output_type": "stream", "name": "stdout" | "stderr", "text": ...}``; figures (shown with
    ``plt.show()`` or left open; closed afterwards) and displayed objects become
    ``{"output_type": "display_data", "data": {mime type: content}, "metadata": {...}}``, figures as base64 PNG at
    ``FIGURE_DPI``. A return value other than ``None`` is displayed last, as ``ipywidgets.interact`` does.
    Exceptions propagate (figures the call opened are closed).
    """
    from IPython.display import display

    recorder = Recorder()
    with captured(recorder):
        result = function(**kwargs)
        if result is not None:
            display(result)
    return recorder.outputs
