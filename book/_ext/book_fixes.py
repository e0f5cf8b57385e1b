"""Small Sphinx fixes for the book's HTML (loaded through `sphinx.local_extensions` in `_config.yml`).

sphinx-thebe registers its inline configuration script twice under Jupyter Book 1.x, which makes the browser
log "Identifier 'THEBE_JS_URL' has already been declared" on every page. We drop exact duplicate scripts.

Figures produced by notebook cells get only their file name as alt text; we describe them by the section they
belong to instead, so that screen readers announce something meaningful.
"""

from __future__ import annotations

from docutils import nodes


def _deduplicate_scripts(app, pagename, templatename, context, doctree):
    scripts, seen = [], set()
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {}) or {}
        key = (getattr(script, "filename", None) or "", attributes.get("body", ""))
        if key not in seen:
            seen.add(key)
            scripts.append(script)
    context["script_files"] = scripts


def _section_title(node) -> str | None:
    while node is not None:
        if isinstance(node, nodes.section) and node.children and isinstance(node[0], nodes.title):
            return node[0].astext()
        node = node.parent
    return None


def _describe_cell_figures(app, doctree, docname):
    for image in doctree.findall(nodes.image):
        alt = image.get("alt", "")
        if alt and not alt.endswith((".png", ".jpg", ".svg")):
            continue
        title = _section_title(image)
        image["alt"] = (f"Figure for the section \u201c{title}\u201d, drawn by the code cell above it"
                        if title else "Figure drawn by the code cell above it")


def setup(app):
    app.connect("html-page-context", _deduplicate_scripts)
    app.connect("doctree-resolved", _describe_cell_figures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
