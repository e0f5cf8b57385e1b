"""Which cells of a chapter the Colab check runs, and the probe that exercises each widget.

A chapter's widget cells use names defined by earlier cells (data, functions, trained models), so running
"the import cell and the widget cells" means running them with every earlier cell they depend on:
:func:`cells_for_widgets` follows the names each kept cell reads back to the cells that bind them (``ast``;
magics are turned into Python first). A cell that changes an object in place without rebinding its name is not
followed: the widgets then run on the object as the defining cell left it, which is enough to show that they
build and that their callbacks run.
"""

from __future__ import annotations

import ast
import builtins
import symtable

from IPython.core.inputtransformer2 import TransformerManager

WIDGET_MARK = "widgets."


def is_widget_cell(source: str) -> bool:
    return WIDGET_MARK in source and ("interact" in source or "display(" in source)


def _python(source: str) -> str:
    return TransformerManager().transform_cell(source)


def _global_reads(table: symtable.SymbolTable) -> set[str]:
    """Module-level names read inside the nested scopes (functions, lambdas, comprehensions) of ``table``."""
    found = set()
    for child in table.get_children():
        found |= {s.get_name() for s in child.get_symbols() if s.is_referenced() and s.is_global()}
        found |= _global_reads(child)
    return found


def _loop_and_with_targets(statement: ast.stmt) -> set[str]:
    """Names a statement binds before its body reads them: ``for`` targets and ``with ... as`` names (outside
    nested functions, whose reads symtable reports separately)."""
    targets: set[str] = set()
    pending = [statement]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.For, ast.AsyncFor)):
            targets |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        if isinstance(node, (ast.With, ast.AsyncWith)):
            targets |= {
                n.id
                for item in node.items
                if item.optional_vars is not None
                for n in ast.walk(item.optional_vars)
                if isinstance(n, ast.Name)
            }
        pending.extend(ast.iter_child_nodes(node))
    return targets


def names(source: str) -> tuple[set[str], set[str]]:
    """(names the cell binds at top level, names it reads from earlier cells). A name counts as read from an earlier
    cell when a statement reads it (directly or from a function it defines) before the cell itself binds it."""
    bound: set[str] = set()
    read: set[str] = set()
    for statement in ast.parse(_python(source)).body:
        table = symtable.symtable(ast.unparse(statement), "<cell>", "exec")
        symbols = table.get_symbols()
        reads = {s.get_name() for s in symbols if s.is_referenced()} | _global_reads(table)
        read |= reads - bound - _loop_and_with_targets(statement)
        bound |= {s.get_name() for s in symbols if s.is_assigned() or s.is_imported() or s.is_namespace()}
    return bound, read - set(dir(builtins))


def cells_for_widgets(sources: list[str], setup_cells: int = 2) -> list[int]:
    """Indices of the code cells to run: the first ``setup_cells`` (the Colab cell and the imports), every widget
    cell, and every earlier cell that binds a name a kept cell reads (transitively)."""
    analysed = [names(source) for source in sources]
    keep = set(range(min(setup_cells, len(sources)))) | {i for i, s in enumerate(sources) if is_widget_cell(s)}
    todo = sorted(keep, reverse=True)
    while todo:
        i = todo.pop()
        needed = set(analysed[i][1])
        for j in range(i - 1, -1, -1):  # the latest earlier binding of each name
            provided = analysed[j][0] & needed
            if provided:
                needed -= provided
                if j not in keep:
                    keep.add(j)
                    todo.append(j)
    return sorted(keep)


# Run after a widget cell in the chapter's kernel: moves every control of every `interact`/`interactive` the cell
# created to another value (the callback runs, as when a reader moves it), then calls the function once more
# directly, so that an exception in the callback fails the cell instead of being shown inside the widget.
WIDGET_PROBE = """\
import ipywidgets as _w
import matplotlib.pyplot as _plt

def _registry():
    instances = getattr(_w.widgets.widget, "_instances", None)  # ipywidgets 8
    return instances if instances is not None else _w.Widget.widgets  # ipywidgets 7

def _other_value(control):
    options = getattr(control, "options", None)
    if options is not None and hasattr(control, "index"):
        return "index", (control.index + 1) % len(options)
    if isinstance(control.value, bool):
        return "value", not control.value
    if isinstance(control.value, tuple):
        low, high = control.value
        return "value", (control.min, high) if low != control.min else (low, max(low, (low + high) // 2))
    return "value", control.max if control.value != control.max else control.min

_seen = globals().setdefault("_probed_widgets", set())
_probed = 0
for _widget in list(_registry().values()):
    if isinstance(_widget, _w.interactive) and id(_widget) not in _seen:
        _seen.add(id(_widget))
        for _control in _widget.kwargs_widgets:
            if not isinstance(_control, _w.ValueWidget):  # fixed(...) arguments
                continue
            _name, _value = _other_value(_control)
            setattr(_control, _name, _value)
        _widget.f(**_widget.kwargs)
        _probed += 1
_plt.close("all")
# Colab shows ipywidgets' own widgets with its built-in manager; any other widget library needs
# google.colab.output.enable_custom_widget_manager() in the Colab cell (tools/colab_cell.py).
_core = {"@jupyter-widgets/base", "@jupyter-widgets/controls", "@jupyter-widgets/output"}
_third_party = sorted({type(w).__name__ for w in _registry().values()
                       if w._model_module not in _core or w._view_module not in _core | {None, ""}})
assert not _third_party, f"third-party widgets {_third_party} need Colab's custom widget manager"
assert _probed, "this cell was expected to create an interact/interactive widget"
print(f"widget probe: {_probed} widget(s), ipywidgets {_w.__version__}")
"""
