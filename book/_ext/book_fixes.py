"""Small Sphinx fixes for the book's HTML (loaded through `sphinx.local_extensions` in `_config.yml`).

sphinx-thebe registers its inline configuration script twice under Jupyter Book 1.x, which makes the browser
log "Identifier 'THEBE_JS_URL' has already been declared" on every page. We drop exact duplicate scripts.
"""

from __future__ import annotations


def _deduplicate_scripts(app, pagename, templatename, context, doctree):
    scripts, seen = [], set()
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {}) or {}
        key = (getattr(script, "filename", None) or "", attributes.get("body", ""))
        if key not in seen:
            seen.add(key)
            scripts.append(script)
    context["script_files"] = scripts


def setup(app):
    app.connect("html-page-context", _deduplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
