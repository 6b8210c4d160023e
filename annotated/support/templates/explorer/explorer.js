// The attention explorer: draws one attention map of window.ATTENTION (attention.js) as a grid of
// coloured cells, queries down the side and keys along the top, with the value of the cell under
// the pointer or the keyboard cursor. No library, no request: it works from disk, offline.
"use strict";

(function () {
  const data = window.ATTENTION;
  const SVG = "http://www.w3.org/2000/svg";
  const FONT = 15;  // px, the labels; the map's cells grow to fill the space left
  const GAP = 6;  // px between a label and the cells
  const TITLE = 20;  // px, the band of an axis title
  // viridis at 0, 0.1, ..., 1, the colours of the notebook's figures (matplotlib)
  const VIRIDIS = ["#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c", "#22a884", "#44bf70",
                   "#7ad151", "#bddf26", "#fde725"].map(hex => [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16)));
  const $ = id => document.getElementById(id);
  const controls = { sentence: $("sentence"), kind: $("kind"), layer: $("layer"), head: $("head") };
  const svg = $("map");
  const bytes = {};  // "sentence/kind" -> Uint8Array of (layers, h, L_q, L_k), decoded once
  let view = null;  // what is drawn: rows, cols, values (L_q x L_k), cursor
  const measure = document.createElement("canvas").getContext("2d");

  function colour(value) {
    const x = Math.min(Math.max(value, 0), 1) * (VIRIDIS.length - 1);
    const i = Math.min(Math.floor(x), VIRIDIS.length - 2), t = x - i;
    const rgb = VIRIDIS[i].map((c, k) => Math.round(c + t * (VIRIDIS[i + 1][k] - c)));
    return `rgb(${rgb.join(",")})`;
  }

  function weightsOf(s, kind) {
    const key = `${s}/${kind}`;
    if (!bytes[key]) {
      const text = atob(data.sentences[s].weights[kind]);
      bytes[key] = Uint8Array.from(text, ch => ch.charCodeAt(0));
    }
    return bytes[key];
  }

  // The (L_q, L_k) map of one layer and one head, or the mean of the heads (head "mean").
  function map(s, kind, layer, head) {
    const sentence = data.sentences[s], axes = data.kinds[kind];
    const rows = sentence[axes.rows], cols = sentence[axes.cols];
    const w = weightsOf(s, kind), q = rows.length, k = cols.length, block = q * k;
    const heads = head === "mean" ? [...Array(data.heads).keys()] : [Number(head)];
    const values = rows.map((_, i) => cols.map((_, j) => {
      let sum = 0;
      for (const h of heads) sum += w[(layer * data.heads + h) * block + i * k + j];
      return sum / (255 * heads.length);
    }));
    return { rows, cols, values, produced: kind === "encoder" ? null : sentence.produced, axes };
  }

  function option(select, value, text) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    select.appendChild(o);
  }

  function el(name, attributes, text) {
    const node = document.createElementNS(SVG, name);
    for (const [a, v] of Object.entries(attributes)) node.setAttribute(a, v);
    if (text !== undefined) node.textContent = text;
    svg.appendChild(node);
    return node;
  }

  function widest(labels) {
    measure.font = `${FONT}px ${getComputedStyle(document.body).fontFamily}`;
    return Math.max(0, ...labels.map(t => measure.measureText(t).width));
  }

  function draw() {
    const s = Number(controls.sentence.value), kind = controls.kind.value;
    const layer = Number(controls.layer.value), head = controls.head.value;
    const m = map(s, kind, layer, head);
    const sentence = data.sentences[s];
    $("map-title").textContent = `${data.kinds[kind].title}, layer ${layer + 1}, ` +
      (head === "mean" ? "mean of the heads" : `head ${Number(head) + 1}`);
    $("german").textContent = sentence.german;
    $("translation").textContent = sentence.translation;
    $("reference").textContent = sentence.reference;

    // Room for the labels first; the cells get the rest of the area, square.
    const area = $("map-area");
    const left = TITLE + widest(m.rows) + GAP, top = TITLE + widest(m.cols) + GAP;
    const right = m.produced ? GAP + widest(m.produced) + TITLE : 4;
    const q = m.rows.length, k = m.cols.length;
    const cell = Math.max(16, Math.min(44, Math.floor(Math.min((area.clientWidth - left - right) / k,
                                                               (area.clientHeight - top - 4) / q))));
    svg.replaceChildren();
    svg.setAttribute("width", Math.ceil(left + k * cell + right));
    svg.setAttribute("height", Math.ceil(top + q * cell + 4));
    svg.setAttribute("aria-label", `${$("map-title").textContent}: ${q} queries by ${k} keys`);
    const rowLabels = m.rows.map((t, i) => el("text", { x: left - GAP, y: top + (i + 0.5) * cell,
      "text-anchor": "end", "dominant-baseline": "central" }, t));
    const colLabels = m.cols.map((t, j) => el("text", { transform: `translate(${left + (j + 0.5) * cell},${top - GAP}) rotate(-90)`,
      "dominant-baseline": "central" }, t));
    const producedLabels = (m.produced || []).map((t, i) => el("text", { x: left + k * cell + GAP,
      y: top + (i + 0.5) * cell, "dominant-baseline": "central" }, t));
    el("text", { class: "title", transform: `translate(${TITLE / 2},${top + q * cell / 2}) rotate(-90)`,
      "text-anchor": "middle", "dominant-baseline": "central" }, m.axes.row_title);
    el("text", { class: "title", x: left + k * cell / 2, y: TITLE / 2, "text-anchor": "middle",
      "dominant-baseline": "central" }, m.axes.col_title);
    if (m.produced) {
      el("text", { class: "title", transform: `translate(${left + k * cell + right - TITLE / 2},${top + q * cell / 2}) rotate(90)`,
        "text-anchor": "middle", "dominant-baseline": "central" }, "produces");
    }
    m.values.forEach((row, i) => row.forEach((value, j) => {
      el("rect", { class: "cell", x: left + j * cell, y: top + i * cell, width: cell, height: cell,
        fill: colour(value), "data-row": i, "data-col": j, "data-value": value.toFixed(4) });
    }));
    const cursor = el("rect", { class: "cursor", width: cell, height: cell, visibility: "hidden" });
    const old = view && view.cursor;
    view = { ...m, left, top, cell, rowLabels, colLabels, producedLabels, cursorRect: cursor,
             cursor: old ? [Math.min(old[0], q - 1), Math.min(old[1], k - 1)] : null };
    if (view.cursor) point(...view.cursor);
    else $("readout").textContent = "Point at a cell, or focus the map and use the arrow keys.";
    remember();
  }

  // Show one cell's value and mark its query and key.
  function point(i, j) {
    view.cursor = [i, j];
    for (const labels of [view.rowLabels, view.producedLabels]) labels.forEach((t, n) => t.classList.toggle("active", n === i));
    view.colLabels.forEach((t, n) => t.classList.toggle("active", n === j));
    view.cursorRect.setAttribute("x", view.left + j * view.cell);
    view.cursorRect.setAttribute("y", view.top + i * view.cell);
    view.cursorRect.setAttribute("visibility", "visible");
    const reads = view.produced ? ` (reads; produces “${view.produced[i]}”)` : "";
    const readout = $("readout");
    readout.replaceChildren();
    readout.append(`query ${i + 1} “${view.rows[i]}”${reads} → key ${j + 1} “${view.cols[j]}”: `);
    const value = document.createElement("b");
    value.id = "value";
    value.textContent = view.values[i][j].toFixed(3);
    readout.append(value);
  }

  svg.addEventListener("mouseover", event => {
    const target = event.target;
    if (target.classList && target.classList.contains("cell")) point(Number(target.dataset.row), Number(target.dataset.col));
  });
  svg.addEventListener("focus", () => point(...(view.cursor || [0, 0])));
  svg.addEventListener("keydown", event => {
    const [i, j] = view.cursor || [0, 0], q = view.rows.length, k = view.cols.length;
    const moves = { ArrowUp: [i - 1, j], ArrowDown: [i + 1, j], ArrowLeft: [i, j - 1], ArrowRight: [i, j + 1],
                    Home: [i, 0], End: [i, k - 1] };
    if (!(event.key in moves)) return;
    event.preventDefault();
    const [a, b] = moves[event.key];
    point(Math.min(Math.max(a, 0), q - 1), Math.min(Math.max(b, 0), k - 1));
  });

  // The view in the address (#sentence=1&kind=cross&layer=3&head=mean), counted from 1, so a link can open it.
  function remember() {
    const c = controls, head = c.head.value === "mean" ? "mean" : Number(c.head.value) + 1;
    const hash = `#sentence=${Number(c.sentence.value) + 1}&kind=${c.kind.value}&layer=${Number(c.layer.value) + 1}&head=${head}`;
    try { history.replaceState(null, "", hash); } catch (error) { /* a browser that refuses it on file:// */ }
  }

  function restore() {
    const wanted = Object.fromEntries(new URLSearchParams(location.hash.slice(1)));
    const set = (select, value) => {
      if ([...select.options].some(o => o.value === value)) select.value = value;
    };
    if (wanted.sentence) set(controls.sentence, String(Number(wanted.sentence) - 1));
    if (wanted.kind) set(controls.kind, wanted.kind);
    if (wanted.layer) set(controls.layer, String(Number(wanted.layer) - 1));
    if (wanted.head) set(controls.head, wanted.head === "mean" ? "mean" : String(Number(wanted.head) - 1));
  }

  data.sentences.forEach((s, i) => option(controls.sentence, i, `${i + 1}. ${s.german}`));
  for (const [kind, axes] of Object.entries(data.kinds)) option(controls.kind, kind, axes.title);
  for (let l = 0; l < data.layers; l++) option(controls.layer, l, `${l + 1}`);
  option(controls.head, "mean", "mean of the heads");
  for (let h = 0; h < data.heads; h++) option(controls.head, h, `${h + 1}`);
  // As the notebook's view opens: encoder-decoder attention, the last layer, the mean of the heads.
  controls.kind.value = "cross";
  controls.layer.value = String(data.layers - 1);
  restore();
  $("count").textContent = `${data.sentences.length}`;
  for (const select of Object.values(controls)) select.addEventListener("change", draw);
  window.addEventListener("resize", draw);
  draw();
})();
