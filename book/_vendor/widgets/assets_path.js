// Loaded after require.js and before embed-amd.js. The widget bundle finds its icon fonts relative to the
// AMD module path "@jupyter-widgets/html-manager/dist/...", which RequireJS resolves against the *page*:
// map that path to this folder, where the fonts are vendored next to the bundle.
(function () {
  var src = document.currentScript.src;
  var folder = src.slice(0, src.lastIndexOf("/"));
  window.__jupyter_widgets_assets_path__ = folder + "/";
  if (window.require && window.require.config) {
    window.require.config({ paths: { "@jupyter-widgets/html-manager/dist": folder } });
  }
})();

// Widgets that show math call the MathJax 2 API (MathJax.Hub.Queue); the book ships MathJax 3. Before the
// widget manager renders (on DOMContentLoaded, after the deferred MathJax script ran), map the old call onto
// MathJax 3's typesetting.
document.addEventListener("DOMContentLoaded", function () {
  var mj = window.MathJax;
  if (mj && !mj.Hub) {
    mj.Hub = {
      Queue: function () {
        if (mj.typesetPromise) {
          mj.typesetPromise().catch(function () {});
        }
      },
    };
  }
});
