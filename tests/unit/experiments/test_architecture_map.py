"""The "you are here" map: every highlight draws, lights up exactly its components, and bad input is refused."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from companion.book.experiments.architecture_map import (  # noqa: E402
    COMPONENTS,
    HIGHLIGHTS,
    draw_architecture_map,
    faded,
    highlighted_components,
)

BOX_NAMES = {c.name for c in COMPONENTS}


def _patches_by_gid(fig) -> dict[str, list]:
    found: dict[str, list] = {}
    for patch in fig.axes[0].patches:
        if patch.get_gid():
            found.setdefault(patch.get_gid(), []).append(patch)
    return found


@pytest.mark.parametrize("highlight", list(HIGHLIGHTS))
def test_every_highlight_draws_every_box_once(highlight):
    fig = draw_architecture_map(highlight)
    try:
        patches = _patches_by_gid(fig)
        for name in BOX_NAMES:
            assert len(patches.get(name, [])) == 1, name
        texts = " ".join(t.get_text() for t in fig.axes[0].texts)
        assert "you are here" in texts
        assert HIGHLIGHTS[highlight][0] in texts
    finally:
        plt.close(fig)


@pytest.mark.parametrize("highlight", list(HIGHLIGHTS))
def test_highlighted_boxes_differ_in_colour_from_the_rest(highlight):
    fig = draw_architecture_map(highlight)
    try:
        patches = _patches_by_gid(fig)
        lit = set(highlighted_components(highlight)) & BOX_NAMES
        assert lit, "every highlight lights at least one box"
        assert lit != BOX_NAMES, "something stays unlit, or there is no 'here'"
        colour_of = {c.name: c.colour for c in COMPONENTS}
        lit_faces = set()
        for name in BOX_NAMES:
            (patch,) = patches[name]
            face = tuple(round(v, 6) for v in patch.get_facecolor())
            if name in lit:
                assert face == tuple(round(v, 6) for v in to_rgba(colour_of[name])), name
                assert patch.get_linewidth() > 1.5, name
                lit_faces.add(face)
            else:
                assert face == tuple(round(v, 6) for v in faded(colour_of[name])), name
                assert patch.get_linewidth() < 1.5, name
        unlit_faces = {tuple(round(v, 6) for v in patches[name][0].get_facecolor()) for name in BOX_NAMES - lit}
        assert not lit_faces & unlit_faces, "a lit box shares its colour with an unlit one"
    finally:
        plt.close(fig)


def test_the_decoding_loop_is_lit_only_for_decoding():
    widths = {}
    for highlight in ("decoding", "attention"):
        fig = draw_architecture_map(highlight)
        (loop,) = _patches_by_gid(fig)["decoding_loop"]
        widths[highlight] = loop.get_linewidth()
        plt.close(fig)
    assert widths["decoding"] > widths["attention"]


def test_highlights_name_only_real_components():
    for highlight, (_, names) in HIGHLIGHTS.items():
        assert set(names) <= BOX_NAMES | {"decoding_loop"}, highlight


def test_draws_into_a_given_axes():
    fig, ax = plt.subplots()
    try:
        assert draw_architecture_map("positional", ax=ax) is fig
        assert ax.patches
    finally:
        plt.close(fig)


@pytest.mark.parametrize("bad", ["Attention", "encoder", "", None])
def test_bad_highlight_names_the_argument_and_the_choices(bad):
    with pytest.raises(ValueError, match="highlight") as info:
        draw_architecture_map(bad)
    for choice in HIGHLIGHTS:
        assert repr(choice) in str(info.value)
