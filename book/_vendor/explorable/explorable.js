// Explorables: the website's version of the chapters' widgets (companion/book/interactive.py writes their HTML).
//
// Each <div class="explorable"> holds plain HTML controls (one per widget control, marked data-explorable-kind:
// "range", "select", "radio" or "checkbox") and one <div class="explorable-state" data-key="..."> per state, all
// computed when the chapter ran. A state's key is the index of each control's value, joined by "-". On every change
// this script shows the state whose key the controls select and hides the others. No network, no dependencies.
(function () {
  "use strict";

  function controlsOf(root) {
    return Array.prototype.slice.call(root.querySelectorAll("[data-explorable-kind]"));
  }

  function indexOf(control) {
    var kind = control.getAttribute("data-explorable-kind");
    if (kind === "range") {
      return control.querySelector("input").value;
    }
    if (kind === "select") {
      return String(control.querySelector("select").selectedIndex);
    }
    if (kind === "radio") {
      var checked = control.querySelector("input:checked");
      return checked ? checked.value : "0";
    }
    if (kind === "checkbox") {
      var box = control.querySelector("input");
      return box.getAttribute(box.checked ? "data-checked-index" : "data-unchecked-index");
    }
    throw new Error("explorable: unknown control kind " + kind);
  }

  function showReadout(control) {
    if (control.getAttribute("data-explorable-kind") !== "range") {
      return;
    }
    var input = control.querySelector("input");
    var labels = JSON.parse(input.getAttribute("data-labels"));
    var text = labels[Number(input.value)];
    input.setAttribute("aria-valuetext", text);
    control.querySelector("output").textContent = text;
  }

  function update(root) {
    var controls = controlsOf(root);
    controls.forEach(showReadout);
    var key = controls.map(indexOf).join("-");
    var found = false;
    root.querySelectorAll(".explorable-state").forEach(function (state) {
      var match = state.getAttribute("data-key") === key;
      state.hidden = !match;
      found = found || match;
    });
    if (!found) {
      throw new Error("explorable: no precomputed state " + key);
    }
  }

  function wire(root) {
    var refresh = function () {
      update(root);
    };
    root.addEventListener("input", refresh);
    root.addEventListener("change", refresh);
    refresh(); // the browser may have restored earlier control values
    root.setAttribute("data-explorable-ready", "");
  }

  function wireAll() {
    document.querySelectorAll(".explorable").forEach(wire);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", wireAll);
  } else {
    wireAll();
  }
})();
