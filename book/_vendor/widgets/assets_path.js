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

// Widgets draw their figures at run time as <img src="data:..."> without alt text. Name each one after the
// section it belongs to (the nearest heading above it), as the build does for figures stored in the page.
(function () {
  function sectionTitle(node) {
    var section = node.closest("section");
    var heading = section && section.querySelector("h1, h2, h3, h4");
    return heading ? heading.textContent.replace(/#\s*$/, "").trim() : document.title;
  }
  function nameImages(root) {
    var images = root.querySelectorAll ? root.querySelectorAll("img:not([alt]), img[alt='']") : [];
    images.forEach(function (img) {
      img.alt = "Interactive figure for the section \u201c" + sectionTitle(img) +
        "\u201d, redrawn by the widget controls above it";
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    nameImages(document);
    new MutationObserver(function (changes) {
      changes.forEach(function (change) {
        change.addedNodes.forEach(function (node) {
          if (node.nodeType === 1) {
            nameImages(node.tagName === "IMG" ? node.parentNode : node);
          }
        });
      });
    }).observe(document.body, { childList: true, subtree: true });
  });
})();
