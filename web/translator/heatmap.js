/*
 * Attention heatmaps on a canvas, in the style of companion.plots (plot_attention_heads): matplotlib's viridis
 * from 0 to 1, tokens on the axes (x labels rotated 90 degrees), "head h" titles, one colour bar labelled
 * "attention weight", and a readout of the weight under the mouse. Used by translator.js; no model, no search.
 *
 *   drawHeatmap(canvas, spec), drawColorbar(canvas, height), attachReadout(canvas, readoutElement)
 *   viridisIndex(value) -> the viridis entry (0..255) matplotlib picks for a weight; VIRIDIS: the 256 [r, g, b]
 *
 * A classic script: in a page it sets globalThis.CompanionHeatmap, under Node it is module.exports (the colour
 * code runs there; drawing needs a canvas).
 */
(function (root, factory) {
  "use strict";
  const api = factory();
  if (typeof module === "object" && module && module.exports) {
    module.exports = api;
  } else {
    root.CompanionHeatmap = api;
  }
})(typeof globalThis !== "undefined" ? globalThis : this, function () {
  "use strict";

  const FONT = '"DejaVu Sans", "Bitstream Vera Sans", Verdana, sans-serif'; // matplotlib's default font

  // matplotlib's viridis (the colormap of companion.plots.plot_attention_heads), 256 entries as
  // matplotlib renders them (Colormap(..., bytes=True)); a value v in [0, 1] takes entry min(floor(v * 256), 255).
  const VIRIDIS_HEX =
    "44015444025544035745055845065a45085b46095c460b5e460c5f460e61470f62471163471265471466471567471669" +
    "47186a48196b481a6c481c6e481d6f481e70482071482172482273482374472575472676472777472878472a79472b7a" +
    "472c7b462d7c462f7c46307d46317e45327f45347f453580453681443781443982433a83433b83433c84423d84423e85" +
    "4240854141864142864043874044873f45873f47883e48883e49893d4a893d4b893d4c893c4d8a3c4e8a3b508a3b518a" +
    "3a528b3a538b39548b39558b38568b38578c37588c37598c365a8c365b8c355c8c355d8c345e8d345f8d33608d33618d" +
    "32628d32638d31648d31658d31668d30678d30688d2f698d2f6a8d2e6b8e2e6c8e2e6d8e2d6e8e2d6f8e2c708e2c718e" +
    "2c728e2b738e2b748e2a758e2a768e2a778e29788e29798e287a8e287a8e287b8e277c8e277d8e277e8e267f8e26808e" +
    "26818e25828e25838d24848d24858d24868d23878d23888d23898d22898d228a8d228b8d218c8d218d8c218e8c208f8c" +
    "20908c20918c1f928c1f938b1f948b1f958b1f968b1e978a1e988a1e998a1e998a1e9a891e9b891e9c891e9d881e9e88" +
    "1e9f881ea0871fa1871fa2861fa38620a48520a58521a68521a78422a78423a88323a98224aa8225ab8126ac8127ad80" +
    "28ae7f29af7f2ab07e2bb17d2cb17d2eb27c2fb37b30b47a32b57a33b67935b77836b87738b97639b9763bba753dbb74" +
    "3ebc7340bd7242be7144be7045bf6f47c06e49c16d4bc26c4dc26b4fc36951c46853c56755c66657c66559c7645bc862" +
    "5ec96160c96062ca5f64cb5d67cc5c69cc5b6bcd596dce5870ce5672cf5574d05477d05279d1517cd24f7ed24e81d34c" +
    "83d34b86d44988d5478bd5468dd64490d64392d74195d73f97d83e9ad83c9dd93a9fd938a2da37a5da35a7db33aadb32" +
    "addc30afdc2eb2dd2cb5dd2bb7dd29bade27bdde26bfdf24c2df22c5df21c7e01fcae01ecde01dcfe11cd2e11bd4e11a" +
    "d7e219dae218dce218dfe318e1e318e4e318e7e419e9e419ece41aeee51bf1e51cf3e51ef6e61ff8e621fae622fde724";
  const VIRIDIS = [];
  for (let i = 0; i < 256; i++) {
    const hex = VIRIDIS_HEX.slice(6 * i, 6 * i + 6);
    VIRIDIS.push([parseInt(hex.slice(0, 2), 16), parseInt(hex.slice(2, 4), 16), parseInt(hex.slice(4, 6), 16)]);
  }
  const VIRIDIS_CSS = VIRIDIS.map((c) => `rgb(${c[0]},${c[1]},${c[2]})`);

  /** The viridis entry of a weight in [0, 1], as matplotlib picks it (vmin 0, vmax 1). */
  function viridisIndex(value) {
    if (!(value > 0)) return 0; // also NaN
    return Math.min(255, Math.floor(value * 256));
  }

  function setupCanvas(canvas, width, height) {
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.ceil(width * dpr);
    canvas.height = Math.ceil(height * dpr);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    canvas.dataset.dpr = String(dpr);
    return ctx;
  }

  function fitLabel(ctx, label, maxWidth) {
    if (ctx.measureText(label).width <= maxWidth) return label;
    let cut = label;
    while (cut.length > 1 && ctx.measureText(cut + "…").width > maxWidth) cut = cut.slice(0, -1);
    return cut + "…";
  }

  /**
   * Draw one heatmap: spec = {values (Float32Array, row-major), offset, rows, cols, rowLabels, colLabels,
   * title, xlabel, ylabel, highlightRow, maxWidth}. The canvas records its geometry in data attributes
   * (rows, cols, cellX0, cellY0, cellSize) so that a test can read the colour of any cell.
   */
  function drawHeatmap(canvas, spec) {
    const { rows, cols } = spec;
    const offset = spec.offset || 0;
    const probe = canvas.getContext("2d");
    const maxWidth = spec.maxWidth || 640;
    const maxCell = spec.maxCell || 24;
    const cellGuess = Math.max(2, Math.min(maxCell, Math.floor((maxWidth - 120) / cols), Math.floor(520 / rows)));
    const fontSize = Math.min(11, cellGuess - 1);
    const showLabels = fontSize >= 6;
    const tickFont = `${fontSize}px ${FONT}`;
    probe.font = tickFont;
    const labelLimit = 110;
    const rowLabels = showLabels ? spec.rowLabels.map((l) => fitLabel(probe, l, labelLimit)) : [];
    const colLabels = showLabels ? spec.colLabels.map((l) => fitLabel(probe, l, labelLimit)) : [];
    const rowLabelWidth = showLabels ? Math.max(0, ...rowLabels.map((l) => probe.measureText(l).width)) : 0;
    const colLabelHeight = showLabels ? Math.max(0, ...colLabels.map((l) => probe.measureText(l).width)) : 0;
    const left = Math.ceil(rowLabelWidth) + 8 + (spec.ylabel ? 18 : 0);
    const top = spec.title ? 24 : 6;
    // the cell size does not depend on whether this panel has a y label, so panels side by side match
    const labelsLeft = Math.ceil(rowLabelWidth) + 8 + 18;
    const cell = Math.max(2, Math.min(maxCell, Math.floor((maxWidth - labelsLeft - 8) / cols), Math.floor(520 / rows)));
    // the canvas is wide enough for the title and the x label too; each is centred on the cells where it fits
    probe.font = `13px ${FONT}`;
    const titleWidth = spec.title ? probe.measureText(spec.title).width : 0;
    probe.font = `12px ${FONT}`;
    const xlabelWidth = spec.xlabel ? probe.measureText(spec.xlabel).width : 0;
    const width = Math.ceil(Math.max(left + cell * cols + 8, titleWidth + 12, xlabelWidth + 12));
    const height = top + cell * rows + Math.ceil(colLabelHeight) + 8 + (spec.xlabel ? 20 : 0);
    const centre = (textWidth) =>
      Math.min(Math.max(left + (cell * cols) / 2, textWidth / 2 + 4), width - textWidth / 2 - 4);
    const ctx = setupCanvas(canvas, width, height);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, width, height);
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        ctx.fillStyle = VIRIDIS_CSS[viridisIndex(spec.values[offset + r * cols + c])];
        ctx.fillRect(left + c * cell, top + r * cell, cell, cell);
      }
    }
    if (spec.highlightRow !== undefined && spec.highlightRow !== null && spec.highlightRow < rows) {
      ctx.strokeStyle = "#d62728"; // matplotlib's tab:red
      ctx.lineWidth = 2;
      ctx.strokeRect(left - 1, top + spec.highlightRow * cell - 1, cell * cols + 2, cell + 2);
    }
    ctx.fillStyle = "#000000";
    ctx.font = tickFont;
    if (showLabels) {
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      rowLabels.forEach((label, r) => {
        ctx.font = r === spec.highlightRow ? `bold ${tickFont}` : tickFont;
        ctx.fillText(label, left - 4, top + r * cell + cell / 2);
      });
      ctx.font = tickFont;
      colLabels.forEach((label, c) => {
        ctx.save();
        ctx.translate(left + c * cell + cell / 2, top + rows * cell + 4);
        ctx.rotate(Math.PI / 2);
        ctx.textAlign = "left";
        ctx.textBaseline = "middle";
        ctx.fillText(label, 0, 0);
        ctx.restore();
      });
    }
    ctx.font = `12px ${FONT}`;
    ctx.textAlign = "center";
    if (spec.title) {
      ctx.font = `13px ${FONT}`;
      ctx.textBaseline = "top";
      ctx.fillText(spec.title, centre(titleWidth), 5);
    }
    ctx.font = `12px ${FONT}`;
    if (spec.xlabel) {
      ctx.textBaseline = "bottom";
      ctx.fillText(spec.xlabel, centre(xlabelWidth), height - 3);
    }
    if (spec.ylabel) {
      ctx.save();
      ctx.translate(12, top + (cell * rows) / 2);
      ctx.rotate(-Math.PI / 2);
      ctx.textBaseline = "middle";
      ctx.fillText(spec.ylabel, 0, 0, Math.max(cell * rows, 60));
      ctx.restore();
    }
    Object.assign(canvas.dataset, {
      rows: String(rows),
      cols: String(cols),
      cellX0: String(left),
      cellY0: String(top),
      cellSize: String(cell),
      labels: showLabels ? "shown" : "omitted",
    });
    canvas.setAttribute("role", "img");
    canvas.setAttribute(
      "aria-label",
      `${spec.title || "attention"}: heatmap of ${rows} ${spec.ylabel || "rows"} by ${cols} ` +
        `${spec.xlabel || "columns"}; arrow keys read the weights`
    );
    canvas.heatmap = { spec, left, top, cell };
  }

  /** The colour bar shared by a figure's panels: 0 to 1, viridis, labelled like companion.plots. */
  function drawColorbar(canvas, height) {
    const barTop = 10;
    const barHeight = Math.max(60, height - 20);
    const ctx = setupCanvas(canvas, 70, barTop + barHeight + 10);
    const barWidth = 12;
    for (let i = 0; i < 256; i++) {
      ctx.fillStyle = VIRIDIS_CSS[i];
      const y0 = barTop + barHeight * (1 - (i + 1) / 256);
      ctx.fillRect(4, Math.floor(y0), barWidth, Math.ceil(barHeight / 256) + 1);
    }
    ctx.strokeStyle = "#000";
    ctx.lineWidth = 0.8;
    ctx.strokeRect(4, barTop, barWidth, barHeight);
    ctx.fillStyle = "#000";
    ctx.font = `10px ${FONT}`;
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    for (let tick = 0; tick <= 5; tick++) {
      const y = barTop + barHeight * (1 - tick / 5);
      ctx.fillRect(4 + barWidth, y, 3, 0.8);
      ctx.fillText((tick / 5).toFixed(1), 4 + barWidth + 5, y);
    }
    ctx.save();
    ctx.translate(60, barTop + barHeight / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center";
    ctx.font = `11px ${FONT}`;
    ctx.fillText("attention weight", 0, 0);
    ctx.restore();
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", "colour scale: attention weight from 0 to 1 (viridis)");
  }

  /** The readout line's text for cell (r, c) of a drawn heatmap. */
  function cellText(spec, r, c) {
    const value = spec.values[(spec.offset || 0) + r * spec.cols + c];
    const where = `${spec.rowLabels[r]} \u2192 ${spec.colLabels[c]}`;
    return `${spec.title ? spec.title + ": " : ""}${where}: ${value.toFixed(3)}`;
  }

  /**
   * Show a cell's weight in the figure's readout line: the cell under the mouse, or, for keyboard use, the cell
   * picked with the arrow keys (Home/End: first/last column) once the heatmap has the focus (announced politely
   * to screen readers then; mouse moves are not announced).
   */
  function attachReadout(canvas, readout) {
    canvas.addEventListener("mousemove", (event) => {
      const map = canvas.heatmap;
      if (!map) return;
      const box = canvas.getBoundingClientRect();
      const c = Math.floor((event.clientX - box.left - map.left) / map.cell);
      const r = Math.floor((event.clientY - box.top - map.top) / map.cell);
      const { spec } = map;
      readout.setAttribute("aria-live", "off");
      readout.textContent = r < 0 || c < 0 || r >= spec.rows || c >= spec.cols ? "\u00a0" : cellText(spec, r, c);
    });
    canvas.addEventListener("mouseleave", () => (readout.textContent = "\u00a0"));
    canvas.tabIndex = 0;
    let cursor = null; // [row, column] picked with the keyboard
    const show = () => {
      readout.setAttribute("aria-live", "polite");
      readout.textContent = cellText(canvas.heatmap.spec, cursor[0], cursor[1]);
      canvas.dataset.cursor = `${cursor[0]},${cursor[1]}`;
    };
    canvas.addEventListener("focus", () => {
      if (!canvas.heatmap) return;
      cursor = cursor || [0, 0];
      show();
    });
    canvas.addEventListener("blur", () => (readout.textContent = "\u00a0"));
    canvas.addEventListener("keydown", (event) => {
      if (!canvas.heatmap || !cursor) return;
      const { rows, cols } = canvas.heatmap.spec;
      const [r, c] = cursor;
      const moves = {
        ArrowUp: [r - 1, c],
        ArrowDown: [r + 1, c],
        ArrowLeft: [r, c - 1],
        ArrowRight: [r, c + 1],
        Home: [r, 0],
        End: [r, cols - 1],
      };
      const next = moves[event.key];
      if (!next) return;
      event.preventDefault();
      cursor = [Math.max(0, Math.min(rows - 1, next[0])), Math.max(0, Math.min(cols - 1, next[1]))];
      show();
    });
  }

  return { FONT, VIRIDIS, VIRIDIS_CSS, viridisIndex, setupCanvas, fitLabel, drawHeatmap, drawColorbar, attachReadout };
});
