/* The course's interactive figures: attention_course/widgets.py inlines this one file into
   every figure's HTML, after the figure's data (a <script type="application/json">). It runs
   in the browser alone (no network, no server, no kernel): it finds the figures on the page
   that it has not drawn yet, draws each from its data, and redraws when a control moves.
   Every control is a native <input type=range>, <select> or <button> with a <label>; the
   numbers shown are in aria-live regions, so that a screen reader reads them as they change. */
(function () {
  "use strict";
  if (window.courseWidgets) {  // a second figure on the page: the functions exist already
    window.courseWidgets.startAll();
    return;
  }
  const SVG = "http://www.w3.org/2000/svg";
  // viridis at nine stops (matplotlib's), linearly interpolated: colour-blind safe
  const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
    [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];

  function viridis(t) {
    const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(x)), f = x - i;
    return VIRIDIS[i].map((c, k) => Math.round(c + f * (VIRIDIS[i + 1][k] - c)));
  }

  // An HTML element with attributes and children (strings become text).
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    for (const child of children) node.append(child);
    return node;
  }

  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    return node;
  }

  // A number as the figures print it: fixed digits, a true minus sign avoided (tests parse
  // the text), infinities written out.
  function fmt(x, digits) {
    if (x === Infinity) return "inf";
    if (x === -Infinity) return "-inf";
    const text = x.toFixed(digits === undefined ? 4 : digits);
    return /^-0\.?0*$/.test(text) ? text.slice(1) : text;
  }

  // A labelled range input over the positions 0 .. n-1, with its value shown beside it.
  function slider(parent, id, label, n, start, describe) {
    const input = el("input", {type: "range", id, min: 0, max: n - 1, step: 1, value: start});
    const shown = el("output", {for: id, "aria-live": "polite"});
    parent.append(el("div", {class: "cw-control"}, el("label", {for: id}, label), input, shown));
    const update = () => {
      const text = describe(Number(input.value));
      shown.textContent = text;
      input.setAttribute("aria-valuetext", text);
    };
    update();
    input.addEventListener("input", update);
    return input;
  }

  // A readout line: "name value; ..." with one <span data-value=name> per number.
  function readout(parent, names) {
    const line = el("p", {class: "cw-readout", "aria-live": "polite"});
    const spans = {};
    names.forEach(([name, label], k) => {
      spans[name] = el("span", {"data-value": name});
      line.append(k ? "; " : "", label + " ", spans[name]);
    });
    parent.append(line);
    return spans;
  }

  // Linear scale from [a, b] to [p, q].
  function scale(a, b, p, q) {
    const span = b - a || 1;
    return (v) => p + ((v - a) / span) * (q - p);
  }

  function extent(values) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
    return [lo, hi];
  }

  // Axes in an SVG of width W, height H: returns x and y scales for the plot area.
  function axes(svg, W, H, [x0, x1], [y0, y1], xlabel, ylabel) {
    const left = 44, right = 8, top = 8, bottom = 30;
    const x = scale(x0, x1, left, W - right), y = scale(y0, y1, H - bottom, top);
    const line = (a, b, c, d) => svg.append(svgEl("line", {x1: a, y1: b, x2: c, y2: d,
      stroke: "currentColor", "stroke-width": 1}));
    line(left, H - bottom, W - right, H - bottom);
    line(left, top, left, H - bottom);
    for (let k = 0; k <= 4; k++) {
      const vx = x0 + (k / 4) * (x1 - x0), vy = y0 + (k / 4) * (y1 - y0);
      const tx = svgEl("text", {x: x(vx), y: H - bottom + 13, "text-anchor": "middle"});
      tx.textContent = Number(vx.toPrecision(3)).toString();
      const ty = svgEl("text", {x: left - 4, y: y(vy) + 4, "text-anchor": "end"});
      ty.textContent = Number(vy.toPrecision(3)).toString();
      svg.append(tx, ty);
      line(x(vx), H - bottom, x(vx), H - bottom + 3);
      line(left - 3, y(vy), left, y(vy));
    }
    const lx = svgEl("text", {x: (left + W - right) / 2, y: H - 2, "text-anchor": "middle"});
    lx.textContent = xlabel;
    const ly = svgEl("text", {x: 10, y: (top + H - bottom) / 2, "text-anchor": "middle",
      transform: `rotate(-90 10 ${(top + H - bottom) / 2})`});
    ly.textContent = ylabel;
    svg.append(lx, ly);
    return {x, y, left, right: W - right, top, bottom: H - bottom};
  }

  // A figure's SVG with a text alternative.
  function picture(parent, W, H, label) {
    const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label});
    svg.style.maxWidth = `${1.6 * W}px`;  // a lone panel does not blow its text up
    parent.append(svg);
    return svg;
  }

  // A heatmap of a matrix (rows x cols, values in [0, 1]) on a canvas, one pixel per entry.
  function heatmap(parent, rows, cols, label, note) {
    const box = el("div", {class: "cw-heatmap"});
    const canvas = el("canvas", {width: cols, height: rows, role: "img", "aria-label": label});
    const mark = el("div", {class: "cw-row-mark"});
    box.append(canvas, mark);
    parent.append(box, el("p", {class: "cw-axis-note"}, note));
    const context = canvas.getContext("2d");
    return (matrix, markedRow) => {
      const image = context.createImageData(cols, rows);
      const top = Math.max(...matrix.map((row) => Math.max(...row))) || 1;
      matrix.forEach((row, i) => row.forEach((v, j) => {
        const [r, g, b] = viridis(v / top), at = 4 * (i * cols + j);
        image.data.set([r, g, b, 255], at);
      }));
      context.putImageData(image, 0, 0);
      mark.style.top = `${((markedRow + 0.5) / rows) * 100}%`;
    };
  }

  // Bars with a value over each, on an SVG; draw(values) redraws them.
  function bars(parent, labels, ylabel, label, showValues) {
    const W = 360, H = 190, svg = picture(parent, W, H, label);
    return (values) => {
      svg.replaceChildren();
      const top = Math.max(...values) || 1;
      const ax = axes(svg, W, H, [0, values.length], [0, top], "", ylabel);
      const width = (ax.right - ax.left) / values.length;
      values.forEach((v, j) => {
        const y = ax.y(Math.max(v, 0));
        svg.append(svgEl("rect", {x: ax.left + j * width + width * 0.1, y,
          width: width * 0.8, height: ax.bottom - y, fill: "var(--cw-accent)"}));
        if (showValues) {
          const t = svgEl("text", {x: ax.left + (j + 0.5) * width, y: y - 3,
            "text-anchor": "middle", "data-value": `w${j}`});
          t.textContent = fmt(v, 3);
          svg.append(t);
        }
      });
      // the axis' numbers count keys; the keys' own names go under the bars
      svg.querySelectorAll("text").forEach((t) => {
        if (Number(t.getAttribute("y")) > ax.bottom && t.textContent !== "") t.remove();
      });
      labels.forEach((name, j) => {
        if (labels.length > 12 && j % 5 !== 0 && j !== labels.length - 1) return;
        const t = svgEl("text", {x: ax.left + (j + 0.5) * width, y: ax.bottom + 13,
          "text-anchor": "middle"});
        t.textContent = name;
        svg.append(t);
      });
    };
  }

  // ---------------------------------------------------------------- chapter 1: bandwidth

  // Gaussian Nadaraya–Watson weights of one query: softmax_i(-(x - x_i)^2 / (2 h^2)), as
  // attention_course.pooling.nadaraya_watson computes them.
  function nwWeights(x, keys, h) {
    const scores = keys.map((k) => -(((x - k) / h) ** 2) / 2);
    const top = Math.max(...scores);
    const e = scores.map((s) => Math.exp(s - top));
    const total = e.reduce((a, b) => a + b, 0);
    return e.map((v) => v / total);
  }

  function bandwidth(root, live, data, uid) {
    const {queries, keys, values, bandwidths} = data;
    const hInput = slider(live, `${uid}-h`, "bandwidth h", bandwidths.length, data.initial,
      (k) => fmt(bandwidths[k], 3));
    const xInput = slider(live, `${uid}-x`, "query x", queries.length, data.probe,
      (k) => fmt(queries[k], 2));
    const shown = readout(live, [["h", "h ="], ["x", "x ="], ["fit", "prediction f(x) ="],
      ["max", "largest weight"], ["neff", "effective keys 1/Σα² ="]]);
    const panels = el("div", {class: "cw-panels"});
    const left = el("div", {class: "cw-panel"}), right = el("div", {class: "cw-panel"});
    panels.append(left, right);
    live.append(panels);
    const W = 360, H = 220;
    const svg = picture(left, W, H, "the data, the fit and the query read out");
    const drawHeat = heatmap(right, queries.length, keys.length,
      "attention weights: one row per query, one column per key",
      "weights: rows are queries (x rising downwards), columns keys (sorted by x); dark 0, " +
      "yellow the largest weight shown; dashed: the query read out");
    const xr = extent(keys.concat(queries)), yr = extent(values);
    function draw() {
      const h = bandwidths[Number(hInput.value)], probe = Number(xInput.value);
      const weights = queries.map((x) => nwWeights(x, keys, h));
      const fit = weights.map((w) => w.reduce((a, wi, i) => a + wi * values[i], 0));
      svg.replaceChildren();
      const ax = axes(svg, W, H, xr, yr, "x", "y");
      keys.forEach((k, i) => svg.append(svgEl("circle", {cx: ax.x(k), cy: ax.y(values[i]),
        r: 2, fill: "currentColor", "fill-opacity": 0.45})));
      const path = fit.map((f, q) => `${q ? "L" : "M"}${ax.x(queries[q]).toFixed(1)},` +
        `${ax.y(Math.min(yr[1], Math.max(yr[0], f))).toFixed(1)}`).join("");
      svg.append(svgEl("path", {d: path, fill: "none", stroke: "var(--cw-accent)",
        "stroke-width": 2.5}));
      svg.append(svgEl("line", {x1: ax.x(queries[probe]), x2: ax.x(queries[probe]),
        y1: ax.top, y2: ax.bottom, stroke: "var(--cw-mark)", "stroke-dasharray": "4 3",
        "stroke-width": 2}));
      drawHeat(weights, probe);
      const w = weights[probe];
      shown.h.textContent = fmt(h, 3);
      shown.x.textContent = fmt(queries[probe], 2);
      shown.fit.textContent = fmt(fit[probe]);
      shown.max.textContent = fmt(Math.max(...w));
      shown.neff.textContent = fmt(1 / w.reduce((a, v) => a + v * v, 0), 2);
    }
    return [draw, [hInput, xInput]];
  }

  // --------------------------------------------------------------- chapter 4: temperature

  function temperature(root, live, data, uid) {
    const input = slider(live, `${uid}-s`, "scale (1/temperature)", data.scales.length,
      data.initial, (k) => fmt(data.scales[k], 4));
    const shown = readout(live, [["scale", "scale ="], ["entropy", "entropy (nats) ="],
      ["max_entropy", "at most ln n ="], ["max", "largest weight"]]);
    const draw = bars(live, data.labels, "weight", "softmax weights of the keys", true);
    function update() {
      const k = Number(input.value), w = data.weights[k];
      draw(w);
      shown.scale.textContent = fmt(data.scales[k], 4);
      shown.entropy.textContent = fmt(data.entropy[k]);
      shown.max_entropy.textContent = fmt(data.max_entropy);
      shown.max.textContent = fmt(Math.max(...w));
    }
    return [update, [input]];
  }

  // ------------------------------------------------------------------- chapter 12: tiles

  function tiles(root, live, data, uid) {
    const {scores, block, n_q, n_k, steps} = data;
    const nBlocks = steps.length;
    const rowId = `${uid}-row`;
    const select = el("select", {id: rowId});
    for (let i = 0; i < n_q; i++) select.append(el("option", {value: i}, `query ${i + 1}`));
    const previous = el("button", {type: "button"}, "Previous tile");
    const next = el("button", {type: "button"}, "Next tile");
    live.append(el("div", {class: "cw-control"}, el("label", {for: rowId}, "query row"),
      select, previous, next));
    const input = slider(live, `${uid}-step`, "key blocks read", nBlocks + 1, 1,
      (c) => `${c} of ${nBlocks}`);
    const shown = readout(live, [["tile", "tile read last:"], ["m", "running max m ="],
      ["l", "running sum ℓ ="], ["out", "output ="]]);
    const W = 360, H = 8 + 18 * n_q + 24;
    const svg = picture(live, W, H, "the score matrix in tiles; the tiles read so far outlined");
    const [lo, hi] = extent(scores.flat());
    previous.addEventListener("click", () => step(-1));
    next.addEventListener("click", () => step(1));
    function step(delta) {
      input.value = Math.min(nBlocks, Math.max(0, Number(input.value) + delta));
      input.dispatchEvent(new Event("input"));
    }
    function update() {
      const row = Number(select.value), c = Number(input.value);
      const rowBlock = Math.floor(row / block);
      previous.disabled = c === 0;
      next.disabled = c === nBlocks;
      svg.replaceChildren();
      const left = 44, top = 8, cw = (W - left - 8) / n_k, ch = 18;
      scores.forEach((r, i) => r.forEach((s, j) => {
        const [R, G, B] = viridis((s - lo) / (hi - lo || 1));
        svg.append(svgEl("rect", {x: left + j * cw, y: top + i * ch, width: cw, height: ch,
          fill: `rgb(${R},${G},${B})`}));
      }));
      for (let e = 0; e <= Math.max(n_q, n_k); e += block) {  // tile edges
        if (e <= n_k) svg.append(svgEl("line", {x1: left + e * cw, x2: left + e * cw, y1: top,
          y2: top + n_q * ch, stroke: "currentColor", "stroke-width": 1.5}));
        if (e <= n_q) svg.append(svgEl("line", {x1: left, x2: left + n_k * cw, y1: top + e * ch,
          y2: top + e * ch, stroke: "currentColor", "stroke-width": 1.5}));
      }
      if (c > 0) svg.append(svgEl("rect", {x: left, y: top + rowBlock * block * ch,
        width: Math.min(n_k, c * block) * cw, height: Math.min(block, n_q - rowBlock * block) * ch,
        fill: "none", stroke: "var(--cw-mark)", "stroke-width": 3}));
      svg.append(svgEl("rect", {x: left - 6, y: top + row * ch + 5, width: 4, height: ch - 10,
        fill: "var(--cw-mark)"}));
      const label = svgEl("text", {x: left, y: top + n_q * ch + 16});
      label.textContent = `keys 1-${n_k} (columns), queries 1-${n_q} (rows), tiles of ${block}`;
      svg.append(label);
      if (c === 0) {
        shown.tile.textContent = "none";
        shown.m.textContent = fmt(-Infinity);
        shown.l.textContent = fmt(0);
        shown.out.textContent = "not yet defined (ℓ = 0)";
      } else {
        const s = steps[c - 1];
        shown.tile.textContent = `(${rowBlock + 1}, ${c})`;
        shown.m.textContent = fmt(s.m[row]);
        shown.l.textContent = fmt(s.l[row]);
        shown.out.textContent = `[${s.out[row].map((v) => fmt(v)).join(", ")}]`;
      }
    }
    select.addEventListener("change", update);
    return [update, [input]];
  }

  // ------------------------------------------------------------------- chapter 16: decay

  function decay(root, live, data, uid) {
    const {gammas, forgets, gate, weights} = data, n = weights[0][0].length;
    const input = slider(live, `${uid}-g`, "decay γ", gammas.length, data.initial,
      (k) => fmt(gammas[k], 3));
    // position 0: no gate; position k: the gate forgets at token forgets[k - 1]
    const forgetAt = (f) => (f === 0 ? "none" : `token ${forgets[f - 1]}`);
    const controls = [input];
    if (forgets.length) {
      controls.push(slider(live, `${uid}-f`, `gate ${fmt(gate, 2)} at`, forgets.length + 1,
        0, forgetAt));
    }
    const shown = readout(live, [["gamma", "γ ="], ["forget", "gate at"],
      ["first", "weight on key 1 ="], ["last", `weight on key ${n} =`],
      ["memory", "memory 1/(1−γ) ="]]);
    const labels = Array.from({length: n}, (_, j) => String(j + 1));
    const draw = bars(live, labels, `weight for query ${n}`, "the last query's weights", false);
    live.append(el("p", {class: "cw-axis-note"}, "key position j (horizontal)"));
    function update() {
      const k = Number(input.value), g = gammas[k];
      const f = controls.length > 1 ? Number(controls[1].value) : 0, w = weights[k][f];
      draw(w);
      shown.gamma.textContent = fmt(g, 3);
      shown.forget.textContent = forgetAt(f);
      shown.first.textContent = fmt(w[0]);
      shown.last.textContent = fmt(w[n - 1]);
      shown.memory.textContent = g === 1 ? fmt(Infinity) : fmt(1 / (1 - g), 2);
    }
    return [update, controls];
  }

  // ------------------------------------------------------- chapters 13-14: a model's heads

  // A token as shown: newlines and a leading space made visible, the whole in its title.
  function tokenText(token) {
    const text = token.replace(/\n/g, "⏎").replace(/^ /, "·");
    return text.trim() === "" ? "␣" : text;
  }

  // bertviz's head view: the prompt's tokens twice, as queries (left) and as keys (right),
  // and a line from the query pointed at to each key, as opaque as the key's weight.
  function headView(parent, pick) {
    const ROW = 18, WIDTH = 360, LEFT = 125, RIGHT = 235;  // user units of the drawing
    const svg = svgEl("svg", {class: "cw-lines", role: "img", "aria-label":
      "Lines from the query token to each key token, each as dark as that key's weight"});
    parent.append(svg);
    const y = (i) => (i + 0.5) * ROW + 2;
    let lines = [], queries = [];
    const label = (token, i, x, anchor) => {
      const text = svgEl("text", {x, y: y(i), "text-anchor": anchor,
        "dominant-baseline": "central"});
      const shown = tokenText(token);
      text.textContent = shown.length > 14 ? `${shown.slice(0, 13)}…` : shown;
      return text;
    };
    // one row per token; pointing at a query on the left picks it, as its button does
    function build(tokens) {
      svg.setAttribute("viewBox", `0 0 ${WIDTH} ${tokens.length * ROW + 4}`);
      lines = tokens.map((_, j) => svgEl("line", {x1: LEFT + 6, x2: RIGHT - 6, y2: y(j)}));
      queries = tokens.map((t, i) => label(t, i, LEFT, "end"));
      queries.forEach((text, i) => ["mouseenter", "click"].forEach((kind) =>
        text.addEventListener(kind, () => pick(i))));
      svg.replaceChildren(...lines, ...queries,
        ...tokens.map((t, j) => label(t, j, RIGHT, "start")));
    }
    // the chosen query's lines: key j's line as opaque as its weight row[j]
    function show(query, row) {
      lines.forEach((line, j) => {
        line.setAttribute("y1", y(query));
        line.setAttribute("stroke-opacity", fmt(row[j], 2));
      });
      queries.forEach((text, i) => text.classList.toggle("cw-query", i === query));
    }
    return {build, show};
  }

  function heads(root, live, data, uid) {
    const {prompts, marks} = data;
    const nLayers = prompts[0].weights.length, nHeads = prompts[0].weights[0].length;
    const label = (layer, head) => {
      const mark = marks.find(([l, h]) => l === layer && h === head);
      return `head ${layer}.${head}` + (mark ? ` (${mark[2]})` : "");
    };
    const menu = (id, name, options) => {
      const select = el("select", {id});
      options.forEach(([value, text]) => select.append(el("option", {value}, text)));
      live.append(el("div", {class: "cw-control"}, el("label", {for: id}, name), select));
      return select;
    };
    // BERT's word pieces read with spaces between them; byte-level tokens carry their own
    const joined = (t) => t.join(t.some((x) => x.startsWith(" ")) ? "" : " ");
    const prompt = menu(`${uid}-prompt`, "prompt", prompts.map((p, k) => [k,
      `${k + 1}: ${joined(p.tokens).replace(/\s+/g, " ").trim().slice(0, 40)}…`]));
    const layer = menu(`${uid}-layer`, "layer",
      Array.from({length: nLayers}, (_, l) => [l, `layer ${l}`]));
    const head = el("select", {id: `${uid}-head`});
    live.append(el("div", {class: "cw-control"}, el("label", {for: `${uid}-head`}, "head"), head));
    if (marks.length) {
      const named = el("p", {class: "cw-axis-note"}, "Heads the chapter names: ");
      marks.forEach(([l, h, text], k) => {
        const jump = el("button", {type: "button", class: "cw-jump"}, `${l}.${h} ${text}`);
        jump.addEventListener("click", () => { layer.value = l; fillHeads(); head.value = h; draw(); });
        named.append(k ? " " : "", jump);
      });
      live.append(named);
    }
    const shown = readout(live, [["query", "query token:"], ["top", "strongest key:"],
      ["top_weight", "weight"]]);
    live.append(el("p", {class: "cw-axis-note"}, "Queries (point at one, or Tab to it):"));
    const queryRow = el("div", {class: "cw-tokens", role: "group", "aria-label": "query tokens"});
    live.append(queryRow);
    live.append(el("p", {class: "cw-axis-note"}, "Its weight on each key:"));
    const keyRow = el("div", {class: "cw-tokens cw-keys"});
    live.append(keyRow);
    live.append(el("p", {class: "cw-axis-note"},
      "The same weights as lines from the query (left) to each key (right):"));
    const view = headView(live, (i) => { query = i; draw(); });
    let query = 0;
    layer.value = data.initial[0];
    function fillHeads() {
      const keep = head.value;
      head.replaceChildren(...Array.from({length: nHeads}, (_, h) =>
        el("option", {value: h}, label(Number(layer.value), h))));
      if (keep !== "") head.value = keep;
    }
    fillHeads();
    head.value = data.initial[1];
    function tokensOf() { return prompts[Number(prompt.value)].tokens; }
    function buildTokens() {
      const tokens = tokensOf();
      query = Math.min(query, tokens.length - 1);
      queryRow.replaceChildren(...tokens.map((t, i) => {
        const b = el("button", {type: "button", class: "cw-token", title: t,
          "data-query": i}, tokenText(t));
        const pick = () => { query = i; draw(); };
        b.addEventListener("focus", pick);
        b.addEventListener("mouseenter", pick);
        b.addEventListener("click", pick);
        return b;
      }));
      keyRow.replaceChildren(...tokens.map((t, j) => el("span", {class: "cw-key", title: t},
        el("span", {class: "cw-key-text"}, tokenText(t)),
        el("span", {class: "cw-bar"}), el("span", {"data-value": `k${j}`}))));
      view.build(tokens);
    }
    function draw() {
      const tokens = tokensOf();
      const w = prompts[Number(prompt.value)].weights[Number(layer.value)][Number(head.value)];
      const row = w[query].map((v) => v / 100);
      queryRow.querySelectorAll(".cw-token").forEach((b, i) =>
        b.setAttribute("aria-pressed", i === query ? "true" : "false"));
      keyRow.querySelectorAll(".cw-key").forEach((k, j) => {
        k.querySelector(".cw-bar").style.width = `${row[j] * 100}%`;
        k.querySelector("[data-value]").textContent = fmt(row[j], 2);
      });
      view.show(query, row);
      const top = row.indexOf(Math.max(...row));
      shown.query.textContent = `${query + 1} “${tokenText(tokens[query])}”`;
      shown.top.textContent = `${top + 1} “${tokenText(tokens[top])}”`;
      shown.top_weight.textContent = fmt(row[top], 2);
    }
    prompt.addEventListener("change", () => { buildTokens(); draw(); });
    layer.addEventListener("change", () => { fillHeads(); draw(); });
    head.addEventListener("change", draw);
    buildTokens();
    return [draw, []];
  }

  const KINDS = {bandwidth, temperature, tiles, decay, heads};

  // Draw one figure: parse its data, build its controls, show it, hide the static picture.
  function start(root) {
    root.dataset.started = "1";
    const data = JSON.parse(root.querySelector(".course-widget-data").textContent);
    const live = root.querySelector(".course-widget-live");
    const [draw, inputs] = KINDS[root.dataset.kind](root, live, data, root.id);
    inputs.forEach((input) => input.addEventListener("input", draw));
    draw();
    live.hidden = false;
    root.classList.add("cw-ready");
  }

  function startAll() {
    document.querySelectorAll(".course-widget:not([data-started])").forEach(start);
  }

  window.courseWidgets = {startAll, nwWeights};
  startAll();
})();
