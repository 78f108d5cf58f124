// vram memory viewer: draws the data that vram/tools/viz.py embeds in the page.
//
// Data (JSON columns, see ViewData.to_json): allocations and segment pieces as lifetimes
// [start, end) in event indices; start = -1 means "before the trace began", end = n "alive at
// the end". The state after event m holds everything with start <= m < end.
//
// Layout (Note [Stacked timeline], the same as _Layout in viz.py): allocations are stacked in
// the order they start; when one is freed, the ones above it move down. Each stacked
// allocation keeps its bottom edge as breakpoints (event, offset), computed once. When the
// breakpoints would pass D.maxPoints, the smallest allocations are summed into one band on
// top instead.
//
// Drawing (Note [One moment per pixel column]): the stacked allocations are rasterised into
// an ImageData, one pixel column at a time. Each column shows the stack at one moment: the
// moment of its events with the most active memory, so that peaks never vanish when zoomed
// out. The cost is about (allocations live in view) x (columns), whatever the trace length.
//
// The page reports on <html data-viz-status>: "ok" once drawn, "error: ..." on any error
// (the browser test reads it).

"use strict";

(function () {
  const root = document.documentElement;
  window.addEventListener("error", (e) => {
    root.dataset.vizStatus = "error: " + (e.message || e.error);
  });

  const t0 = performance.now();
  const D = JSON.parse(document.getElementById("viz-data").textContent);
  const N = D.n;
  const ACTIONS = D.actionNames;

  // A column is a JSON list, or for large traces {b64, type}: little-endian binary in base64
  // (Note [Large pages] in viz.py), decoded into a typed array of that type.
  const TYPED = { u8: Uint8Array, u16: Uint16Array, i32: Int32Array, f64: Float64Array };
  function column(x, T) {
    if (Array.isArray(x)) return T.from(x);
    const text = atob(x.b64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    const Packed = TYPED[x.type];
    const packed = new Packed(bytes.buffer, 0, bytes.length / Packed.BYTES_PER_ELEMENT);
    return packed instanceof T ? packed : T.from(packed);
  }
  // The events' actions and times only fill the details: decoded on their first use.
  function lazyColumn(x, T) {
    let found = null;
    return (i) => (found || (found = column(x, T)))[i];
  }
  const actionAt = lazyColumn(D.action, Uint8Array);
  const timeAt = lazyColumn(D.time, Float64Array);

  // ---- data as typed columns ----------------------------------------------------------

  const A = {
    addr: column(D.alloc.addr, Float64Array),
    size: column(D.alloc.size, Float64Array),
    block: column(D.alloc.block, Float64Array),
    stream: column(D.alloc.stream, Int32Array),
    start: column(D.alloc.start, Int32Array),
    freeReq: column(D.alloc.freeReq, Int32Array),
    end: column(D.alloc.end, Int32Array),
    stack: column(D.alloc.stack, Int32Array),
    pool: column(D.alloc.pool, Int32Array),
  };
  const nA = A.addr.length;
  const S = {
    addr: column(D.seg.addr, Float64Array),
    size: column(D.seg.size, Float64Array),
    stream: column(D.seg.stream, Int32Array),
    pool: column(D.seg.pool, Int32Array),
    large: column(D.seg.large, Uint8Array),
    expandable: column(D.seg.expandable, Uint8Array),
    start: column(D.seg.start, Int32Array),
    end: column(D.seg.end, Int32Array),
    stack: column(D.seg.stack, Int32Array),
  };
  const nS = S.addr.length;

  // ---- formatting ---------------------------------------------------------------------

  function fmtBytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let u = 0;
    while (Math.abs(n) >= 1024 && u < units.length - 1) {
      n /= 1024;
      u++;
    }
    return u === 0 ? n + " B" : n.toFixed(n >= 100 ? 1 : 2) + " " + units[u];
  }
  const hex = (n) => "0x" + n.toString(16);
  // Every string taken from the snapshot goes through escapeHtml before it reaches innerHTML.
  const streamName = (i) => {
    const raw = D.streams[i];
    if (typeof raw !== "number") return escapeHtml(raw);
    return raw === 0 ? "0 (default)" : raw > 65535 ? hex(raw) : String(raw);
  };
  function fmtTime(m) {
    if (m < 0 || m >= N) return "";
    const us = timeAt(m);
    return us < 1000 ? "+" + us + " µs" : "+" + (us / 1000).toFixed(3) + " ms";
  }
  function escapeHtml(s) {
    const entities = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
    return String(s).replace(/[&<>"']/g, (c) => entities[c]);
  }

  // ---- layout -------------------------------------------------------------------------

  function stackLayout(threshold) {
    const startAt = new Int32Array(N).fill(-1);
    const endAt = new Int32Array(N).fill(-1);
    for (let a = 0; a < nA; a++) {
      if (A.start[a] >= 0) startAt[A.start[a]] = a;
      if (A.end[a] < N) endAt[A.end[a]] = a;
    }
    const stacked = new Uint8Array(nA);
    const offset = new Float64Array(nA);
    const ptX = new Array(nA);
    const ptY = new Array(nA);
    const stack = [];
    const indTotal = new Float64Array(N + 1);
    const actTotal = new Float64Array(N + 1);
    let top = 0;
    let small = 0;
    let budget = D.maxPoints;
    const push = (a, x) => {
      if (A.size[a] < threshold) {
        small += A.size[a];
        return;
      }
      stacked[a] = 1;
      offset[a] = top;
      ptX[a] = [x];
      ptY[a] = [top];
      stack.push(a);
      top += A.size[a];
    };
    for (let a = 0; a < nA && A.start[a] < 0; a++) push(a, -1);
    indTotal[0] = top;
    actTotal[0] = top + small;
    for (let i = 0; i < N; i++) {
      let a = endAt[i];
      if (a >= 0 && stacked[a]) {
        const pos = stack.lastIndexOf(a);
        const size = A.size[a];
        budget -= stack.length - pos - 1;
        if (budget < 0) return null;
        for (let k = pos + 1; k < stack.length; k++) {
          const b = stack[k];
          offset[b] -= size;
          ptX[b].push(i);
          ptY[b].push(offset[b]);
        }
        stack.splice(pos, 1);
        top -= size;
      } else if (a >= 0) {
        small -= A.size[a];
      }
      a = startAt[i];
      if (a >= 0) push(a, i);
      indTotal[i + 1] = top;
      actTotal[i + 1] = top + small;
    }
    const stackedIds = [];
    for (let a = 0; a < nA; a++) if (stacked[a]) stackedIds.push(a);
    return { threshold, stacked, stackedIds, ptX, ptY, indTotal, actTotal };
  }

  function computeLayout() {
    const sizes = Float64Array.from(A.size).sort().reverse();
    let count = nA;
    for (;;) {
      let threshold = 0;
      if (count === 0) threshold = sizes[0] + 1;
      else if (count < nA) threshold = sizes[count - 1];
      const layout = stackLayout(threshold);
      if (layout) return layout;
      count = Math.floor(count / 2);
    }
  }

  const L = computeLayout();
  let maxPoints = 0;
  for (const a of L.stackedIds) maxPoints = Math.max(maxPoints, L.ptX[a].length);
  const VX = new Float64Array(2 * maxPoints + 4);
  const VB = new Float64Array(2 * maxPoints + 4);

  const reserved = new Float64Array(N + 2);
  for (let s = 0; s < nS; s++) {
    reserved[S.start[s] + 1] += S.size[s];
    reserved[S.end[s] + 1] -= S.size[s];
  }
  for (let k = 1; k < N + 2; k++) reserved[k] += reserved[k - 1];

  let peakActive = 0;
  let peakReserved = 0;
  let peakMoment = -1;
  for (let k = 0; k <= N; k++) {
    if (L.actTotal[k] > peakActive) {
      peakActive = L.actTotal[k];
      peakMoment = k - 1;
    }
    peakReserved = Math.max(peakReserved, reserved[k]);
  }
  const buildMs = performance.now() - t0;

  // ---- colours ------------------------------------------------------------------------

  // Size colours run along RAMP from the smallest allocation in the trace to the largest,
  // by log2 of the size (viz.py's _size_colour is the same). Neighbours get one of three shades.
  const RAMP = [[59, 111, 216], [46, 170, 200], [80, 185, 110], [200, 200, 60], [240, 150, 50], [214, 69, 61]];
  const STREAM_COLOURS = [[78, 121, 167], [242, 142, 43], [89, 161, 79], [225, 87, 89], [118, 183, 178],
    [237, 201, 72], [176, 122, 161], [255, 157, 167], [156, 117, 95], [186, 176, 172]];
  // By pool: the default pool in grey, each private pool (CUDA graphs, MemPool) its own colour.
  const POOL_COLOURS = [[214, 39, 40], [148, 103, 189], [44, 160, 44], [255, 127, 14], [23, 190, 207],
    [188, 189, 34], [227, 119, 194], [140, 86, 75]];
  const DEFAULT_POOL = D.pools.indexOf("0,0");
  function poolRgb(p) {
    if (p === DEFAULT_POOL) return [160, 168, 180];
    const k = DEFAULT_POOL >= 0 && p > DEFAULT_POOL ? p - 1 : p;
    return POOL_COLOURS[k % POOL_COLOURS.length];
  }
  const [LO_BITS, HI_BITS] = D.sizeBits;
  let colourMode = "size";

  const bitLength = (size) => (size >= 1 ? Math.floor(Math.log2(size)) + 1 : 0);
  function rampColour(t) {
    const x = Math.min(Math.max(t, 0), 1) * (RAMP.length - 1);
    const k = Math.min(Math.floor(x), RAMP.length - 2);
    const f = x - k;
    return RAMP[k].map((c, j) => c + (RAMP[k + 1][j] - c) * f);
  }
  function sizeColour(size) {
    return rampColour(HI_BITS > LO_BITS ? (bitLength(size) - LO_BITS) / (HI_BITS - LO_BITS) : 0.5);
  }
  function shade(rgb, k) {
    if (k === 1) return rgb.map((c) => c + (255 - c) * 0.2);
    if (k === 2) return rgb.map((c) => c * 0.86);
    return rgb;
  }
  const css = (rgb, alpha) =>
    (alpha === undefined ? "rgb(" : "rgba(") + rgb.map(Math.round).join(",") + (alpha === undefined ? ")" : "," + alpha + ")");
  function allocRgb(a) {
    const base = colourMode === "stream" ? STREAM_COLOURS[A.stream[a] % STREAM_COLOURS.length]
      : colourMode === "pool" ? poolRgb(A.pool[a]) : sizeColour(A.size[a]);
    return shade(base, a % 3);
  }
  const allocColour = (a) => css(allocRgb(a));
  const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
  function packRgb(rgb) {
    const [r, g, b] = rgb.map((c) => Math.round(c) & 255);
    return LITTLE_ENDIAN ? ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0 : ((r << 24) | (g << 16) | (b << 8) | 255) >>> 0;
  }
  const BAND_RGBA = packRgb([179, 184, 194]);
  let packed = new Uint32Array(nA); // each allocation's colour as an RGBA pixel
  function packColours() {
    for (let a = 0; a < nA; a++) packed[a] = packRgb(allocRgb(a));
  }

  // ---- the timeline -------------------------------------------------------------------

  const tl = document.getElementById("timeline");
  const tlCtx = tl.getContext("2d");
  const M = { left: 70, right: 12, top: 12, bottom: 26 };
  const view = { x0: 0, x1: Math.max(N, 1) };
  let moment = peakMoment >= 0 ? peakMoment : N - 1;
  let hover = null; // {kind: "alloc"|"band"|"block"|"free", ...}
  let pinned = null;
  let tlW = 0;
  let tlH = 0;
  let yMax = 1;

  const plotW = () => tlW - M.left - M.right;
  const plotH = () => tlH - M.top - M.bottom;
  const X = (x) => M.left + ((x - view.x0) / (view.x1 - view.x0)) * plotW();
  const Y = (b) => M.top + plotH() - (b / yMax) * plotH();
  const clampPx = (p) => Math.min(Math.max(p, M.left - 1), M.left + plotW() + 1);

  function sizeCanvas(canvas, ctx, cssHeight) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    canvas.style.height = cssHeight + "px";
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(cssHeight * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return w;
  }

  // The bottom edge of stacked allocation a, clipped to the view and merged per pixel, into
  // VX (pixels) and VB (bytes). Returns the number of vertices.
  function edgeVertices(a) {
    const xs = L.ptX[a];
    const ys = L.ptY[a];
    let lo = 0;
    if (xs.length > 8 && xs[0] < view.x0) {
      let hi = xs.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (xs[mid] <= view.x0) lo = mid;
        else hi = mid - 1;
      }
    }
    let lastP = clampPx(X(Math.max(xs[lo], 0)));
    let cur = ys[lo];
    VX[0] = lastP;
    VB[0] = cur;
    let m = 1;
    for (let k = lo + 1; k < xs.length && xs[k] <= view.x1; k++) {
      const p = clampPx(X(xs[k]));
      cur = ys[k];
      if (p - lastP < 0.75) {
        VB[m - 1] = cur;
        continue;
      }
      VX[m] = p;
      VB[m] = VB[m - 1];
      VX[m + 1] = p;
      VB[m + 1] = cur;
      m += 2;
      lastP = p;
    }
    VX[m] = clampPx(X(Math.min(A.end[a], N)));
    VB[m] = cur;
    return m + 1;
  }

  function tracePolygon(ctx, a) {
    const m = edgeVertices(a);
    const size = A.size[a];
    ctx.moveTo(VX[0], Y(VB[0]));
    for (let j = 1; j < m; j++) ctx.lineTo(VX[j], Y(VB[j]));
    for (let j = m - 1; j >= 0; j--) ctx.lineTo(VX[j], Y(VB[j] + size));
    ctx.closePath();
  }

  const inView = (a) => A.end[a] > view.x0 && Math.max(A.start[a], 0) < view.x1;

  // A step line over per-moment values (index m + 1), one or two vertices per pixel column,
  // keeping the largest (or smallest) value of each column.
  function stepPoints(values, pickMax) {
    const pts = [];
    const m0 = Math.max(0, Math.floor(view.x0));
    const m1 = Math.min(N - 1, Math.ceil(view.x1));
    let col = null;
    let v = 0;
    for (let m = m0; m <= m1; m++) {
      const p = Math.floor(X(m));
      const value = values[m + 1];
      if (p !== col) {
        if (col !== null) pts.push(col, v);
        col = p;
        v = value;
      } else {
        v = pickMax ? Math.max(v, value) : Math.min(v, value);
      }
    }
    if (col !== null) pts.push(col, v);
    const out = [];
    for (let k = 0; k < pts.length; k += 2) {
      const next = k + 2 < pts.length ? pts[k + 2] : clampPx(X(Math.min(m1 + 1, N)));
      out.push(clampPx(pts[k]), pts[k + 1], clampPx(next), pts[k + 1]);
    }
    return out;
  }

  function niceStep(range, target) {
    const raw = range / target;
    const pow = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const f of [1, 2, 5, 10]) if (f * pow >= raw) return f * pow;
    return 10 * pow;
  }

  function drawTimeline() {
    tlW = sizeCanvas(tl, tlCtx, 330);
    tlH = 330;
    const ctx = tlCtx;
    ctx.clearRect(0, 0, tlW, tlH);

    const m0 = Math.max(0, Math.floor(view.x0));
    const m1 = Math.min(N - 1, Math.ceil(view.x1));
    yMax = 1;
    for (let m = m0; m <= m1; m++) yMax = Math.max(yMax, L.actTotal[m + 1], reserved[m + 1]);
    if (N === 0) yMax = Math.max(yMax, L.actTotal[0], reserved[0]);
    yMax *= 1.06;

    // axes and grid
    const unit = yMax >= 1 << 30 ? [1 << 30, "GiB"] : yMax >= 1 << 20 ? [1 << 20, "MiB"] : [1 << 10, "KiB"];
    const yStep = niceStep(yMax / unit[0], 5) * unit[0];
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#4a5263";
    ctx.strokeStyle = "#eceef2";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let b = 0; b <= yMax; b += yStep) {
      const y = Math.round(Y(b)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(M.left, y);
      ctx.lineTo(M.left + plotW(), y);
      ctx.stroke();
      const label = b / unit[0];
      ctx.fillText((Number.isInteger(label) ? label : label.toFixed(1)) + " " + unit[1], M.left - 6, y);
    }
    const xStep = Math.max(1, niceStep(view.x1 - view.x0, 8));
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (let x = Math.ceil(view.x0 / xStep) * xStep; x <= view.x1; x += xStep) {
      const px = Math.round(X(x)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(px, M.top + plotH());
      ctx.lineTo(px, M.top + plotH() + 4);
      ctx.strokeStyle = "#9aa1ae";
      ctx.stroke();
      ctx.fillText(String(x), px, M.top + plotH() + 6);
    }
    ctx.textAlign = "left";
    ctx.fillText("event", 6, M.top + plotH() + 6);

    ctx.save();
    ctx.beginPath();
    ctx.rect(M.left, M.top, plotW(), plotH());
    ctx.clip();

    rasterStack(ctx);

    // reserved memory
    if (N > 0) {
      const pts = stepPoints(reserved, true);
      ctx.beginPath();
      for (let k = 0; k < pts.length; k += 2) ctx.lineTo(pts[k], Y(pts[k + 1]));
      ctx.setLineDash([5, 3]);
      ctx.strokeStyle = "#1d2330";
      ctx.lineWidth = 1.2;
      ctx.stroke();
      ctx.setLineDash([]);
    }

    // out-of-memory events
    ctx.strokeStyle = "#d0312d";
    ctx.lineWidth = 1.5;
    for (const m of D.oom) {
      const px = X(m + 0.5);
      ctx.beginPath();
      ctx.moveTo(px, M.top);
      ctx.lineTo(px, M.top + plotH());
      ctx.stroke();
    }

    // the selected allocation
    for (const item of [pinned, hover]) {
      if (item && item.kind === "alloc" && L.stacked[item.a] && inView(item.a)) {
        ctx.beginPath();
        tracePolygon(ctx, item.a);
        ctx.lineWidth = 2;
        ctx.strokeStyle = item === pinned ? "#000" : "rgba(0,0,0,0.7)";
        ctx.stroke();
      }
    }

    // the moment
    const mx = X(moment + 0.5);
    ctx.strokeStyle = "#2c5cc5";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(mx, M.top);
    ctx.lineTo(mx, M.top + plotH());
    ctx.stroke();
    ctx.restore();

    ctx.strokeStyle = "#9aa1ae";
    ctx.lineWidth = 1;
    ctx.strokeRect(M.left + 0.5, M.top + 0.5, plotW(), plotH());
  }

  // See Note [One moment per pixel column]. colMoment[c] is the moment column c shows (N for
  // a column past the last event); it never decreases from left to right.
  let colMoment = new Int32Array(0);
  let colPerCss = 1;
  const rasterCanvas = document.createElement("canvas");

  function chooseColumnMoments(width) {
    colMoment = new Int32Array(width);
    const span = view.x1 - view.x0;
    for (let c = 0; c < width; c++) {
      const xa = view.x0 + (span * c) / width;
      const xb = view.x0 + (span * (c + 1)) / width;
      let m0 = Math.floor(xa);
      const m1 = Math.min(Math.max(Math.ceil(xb) - 1, m0), N - 1);
      if (m0 >= N) {
        colMoment[c] = N;
        continue;
      }
      let best = m0;
      for (let m = m0 + 1; m <= m1; m++) if (L.actTotal[m + 1] > L.actTotal[best + 1]) best = m;
      colMoment[c] = best;
    }
  }

  function rasterStack(ctx) {
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(1, Math.round(plotW() * dpr));
    const H = Math.max(1, Math.round(plotH() * dpr));
    colPerCss = W / plotW();
    chooseColumnMoments(W);
    rasterCanvas.width = W;
    rasterCanvas.height = H;
    const rctx = rasterCanvas.getContext("2d");
    const img = rctx.createImageData(W, H);
    const buf = new Uint32Array(img.data.buffer);
    const row = (b) => Math.min(Math.max(Math.round(H - (b / yMax) * H), 0), H);
    const fill = (c, top, bottom, rgba) => {
      for (let r = row(top); r < row(bottom); r++) buf[r * W + c] = rgba;
    };
    for (const a of L.stackedIds) {
      const start = A.start[a];
      const end = A.end[a];
      if (end <= colMoment[0] || start > colMoment[W - 1]) continue;
      let lo = 0;
      let hi = W;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (colMoment[mid] < start) lo = mid + 1;
        else hi = mid;
      }
      const xs = L.ptX[a];
      const ys = L.ptY[a];
      const size = A.size[a];
      let k = 0;
      for (let c = lo; c < W && colMoment[c] < end; c++) {
        const m = colMoment[c];
        while (k + 1 < xs.length && xs[k + 1] <= m) k++;
        fill(c, ys[k] + size, ys[k], packed[a]);
      }
    }
    if (L.threshold > 0) {
      for (let c = 0; c < W && colMoment[c] < N; c++) {
        const m = colMoment[c] + 1;
        fill(c, L.actTotal[m], L.indTotal[m], BAND_RGBA);
      }
    }
    rctx.putImageData(img, 0, 0);
    ctx.drawImage(rasterCanvas, M.left, M.top, plotW(), plotH());
  }

  // The moment shown at x (css pixels from the canvas' left edge).
  function momentAtPx(px) {
    const c = Math.floor((px - M.left) * colPerCss);
    if (c < 0 || c >= colMoment.length) return -1;
    return Math.min(colMoment[c], N - 1);
  }

  // What is at (px, bytes) on the timeline: the stack as the pixel column under px shows it.
  function timelineHit(px, bytes) {
    if (N === 0 || bytes < 0) return null;
    const m = momentAtPx(px);
    if (m < 0) return null;
    if (L.threshold > 0 && bytes >= L.indTotal[m + 1] && bytes < L.actTotal[m + 1]) {
      return { kind: "band", m };
    }
    for (const a of L.stackedIds) {
      if (A.start[a] > m || A.end[a] <= m) continue;
      const xs = L.ptX[a];
      let lo = 0;
      let hi = xs.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (xs[mid] <= m) lo = mid;
        else hi = mid - 1;
      }
      const off = L.ptY[a][lo];
      if (bytes >= off && bytes < off + A.size[a]) return { kind: "alloc", a };
    }
    return null;
  }

  // ---- the allocator state at the moment ----------------------------------------------

  const st = document.getElementById("state");
  const stCtx = st.getContext("2d");
  const ROW_H = 14;
  const ROW_GAP = 5;
  const SEG_GAP = 2;
  const TARGET_ROWS = 14;
  let pieces = []; // {s, row, x0, x1, byte0}
  let segBlocks = new Map(); // segment -> allocation ids alive at the moment, by address
  let bytesPerPx = 1;

  function segmentsAt(m) {
    const segs = [];
    for (let s = 0; s < nS; s++) if (S.start[s] <= m && m < S.end[s]) segs.push(s);
    segs.sort((p, q) => S.addr[p] - S.addr[q]);
    const allocs = [];
    for (let a = 0; a < nA; a++) if (A.start[a] <= m && m < A.end[a]) allocs.push(a);
    allocs.sort((p, q) => A.addr[p] - A.addr[q]);
    const blocks = new Map();
    let k = 0;
    for (const s of segs) {
      const list = [];
      while (k < allocs.length && A.addr[allocs[k]] < S.addr[s]) k++;
      while (k < allocs.length && A.addr[allocs[k]] < S.addr[s] + S.size[s]) list.push(allocs[k++]);
      blocks.set(s, list);
    }
    return { segs, blocks, allocs };
  }

  const isPending = (a, m) => A.freeReq[a] <= m;

  function blockColour(a) {
    return isPending(a, moment) ? css(allocRgb(a), 0.35) : allocColour(a);
  }

  function drawState() {
    const { segs, blocks, allocs } = segmentsAt(moment);
    segBlocks = blocks;
    const w = st.clientWidth || 800;
    bytesPerPx = Math.max(peakReserved, 1) / (w * TARGET_ROWS * 0.92);
    pieces = [];
    let row = 0;
    let x = 0;
    for (const s of segs) {
      let widthPx = Math.max(2, S.size[s] / bytesPerPx);
      let byte0 = 0;
      if (w - x < 24 && x > 0) {
        row++;
        x = 0;
      }
      while (widthPx > 0) {
        const take = Math.min(widthPx, w - x);
        pieces.push({ s, row, x0: x, x1: x + take, byte0 });
        byte0 += take * bytesPerPx;
        widthPx -= take;
        x += take;
        if (x >= w - 0.5) {
          row++;
          x = 0;
        }
      }
      x += SEG_GAP;
    }
    const rows = Math.max(1, x > 0 ? row + 1 : row);
    sizeCanvas(st, stCtx, rows * (ROW_H + ROW_GAP));
    const ctx = stCtx;
    ctx.clearRect(0, 0, w, rows * (ROW_H + ROW_GAP));
    for (const p of pieces) {
      const y = p.row * (ROW_H + ROW_GAP);
      ctx.fillStyle = S.large[p.s] ? "#e1e4ea" : "#e9e4d8";
      ctx.fillRect(p.x0, y, p.x1 - p.x0, ROW_H);
      const segStart = S.addr[p.s] + p.byte0;
      const segEnd = segStart + (p.x1 - p.x0) * bytesPerPx;
      for (const a of blocks.get(p.s)) {
        const b0 = Math.max(A.addr[a], segStart);
        const b1 = Math.min(A.addr[a] + A.block[a], segEnd);
        if (b1 <= b0) continue;
        ctx.fillStyle = blockColour(a);
        const px0 = p.x0 + (b0 - segStart) / bytesPerPx;
        ctx.fillRect(px0, y, Math.max((b1 - b0) / bytesPerPx, 0.6), ROW_H);
      }
      ctx.strokeStyle = "rgba(29,35,48,0.55)";
      ctx.lineWidth = 1;
      ctx.strokeRect(p.x0 + 0.5, y + 0.5, Math.max(p.x1 - p.x0 - 1, 0.5), ROW_H - 1);
    }
    for (const item of [pinned, hover]) {
      if (item && item.kind === "alloc") outlineBlock(item.a);
    }

    let allocated = 0;
    let pending = 0;
    for (const a of allocs) {
      if (isPending(a, moment)) pending += A.size[a];
      else allocated += A.size[a];
    }
    let total = 0;
    for (const s of segs) total += S.size[s];
    document.getElementById("state-summary").textContent =
      "after event " + moment + ": " + segs.length + " segments, " + fmtBytes(total) + " reserved, " +
      fmtBytes(allocated) + " allocated in " + allocs.length + " blocks" +
      (pending ? ", " + fmtBytes(pending) + " pending free" : "") +
      " \u00b7 1 px = " + fmtBytes(Math.round(bytesPerPx));
  }

  function outlineBlock(a) {
    for (const p of pieces) {
      const list = segBlocks.get(p.s);
      if (!list || list.indexOf(a) < 0) continue;
      const segStart = S.addr[p.s] + p.byte0;
      const segEnd = segStart + (p.x1 - p.x0) * bytesPerPx;
      const b0 = Math.max(A.addr[a], segStart);
      const b1 = Math.min(A.addr[a] + A.block[a], segEnd);
      if (b1 <= b0) continue;
      const px0 = p.x0 + (b0 - segStart) / bytesPerPx;
      stCtx.strokeStyle = "#000";
      stCtx.lineWidth = 2;
      stCtx.strokeRect(px0 - 1, p.row * (ROW_H + ROW_GAP) - 1, Math.max((b1 - b0) / bytesPerPx, 1) + 2, ROW_H + 2);
    }
  }

  // What is at (px, py) in the allocator state: a block, or the free gap around that address.
  function stateHit(px, py) {
    const row = Math.floor(py / (ROW_H + ROW_GAP));
    if (py - row * (ROW_H + ROW_GAP) > ROW_H) return null;
    for (const p of pieces) {
      if (p.row !== row || px < p.x0 || px >= p.x1) continue;
      const s = p.s;
      const lo = S.addr[s] + p.byte0 + (px - p.x0 - 1) * bytesPerPx;
      const hi = lo + 2 * bytesPerPx;
      let best = -1;
      for (const a of segBlocks.get(s)) {
        if (A.addr[a] < hi && A.addr[a] + A.block[a] > lo && (best < 0 || A.block[a] > A.block[best])) best = a;
      }
      if (best >= 0) return { kind: "alloc", a: best, s };
      const at = S.addr[s] + p.byte0 + (px - p.x0) * bytesPerPx;
      let gap0 = S.addr[s];
      let gap1 = S.addr[s] + S.size[s];
      for (const a of segBlocks.get(s)) {
        if (A.addr[a] + A.block[a] <= at) gap0 = Math.max(gap0, A.addr[a] + A.block[a]);
        else if (A.addr[a] > at) gap1 = Math.min(gap1, A.addr[a]);
      }
      return { kind: "free", s, addr: gap0, size: gap1 - gap0 };
    }
    return null;
  }

  // ---- details ------------------------------------------------------------------------

  function eventText(m) {
    if (m < 0) return "before the trace began";
    if (m >= N) return "\u2014";
    return "event " + m + " <span class='muted'>" + fmtTime(m) + "</span>";
  }

  function segmentOf(addr, m) {
    let fallback = -1;
    for (let s = 0; s < nS; s++) {
      if (addr < S.addr[s] || addr >= S.addr[s] + S.size[s]) continue;
      if (S.start[s] <= m && m < S.end[s]) return s;
      fallback = s;
    }
    return fallback;
  }

  function stackHtml(stackId) {
    const frames = D.stacks[stackId] || [];
    if (!frames.length) return "<div class='muted frames'>no stack recorded</div>";
    return "<div class='frames'>" + frames.map((f) => escapeHtml(D.frames[f])).join("\n") + "</div>";
  }

  function segmentRows(s) {
    if (s < 0) return "<tr><td>segment</td><td class='muted'>not in the snapshot</td></tr>";
    return (
      "<tr><td>segment</td><td class='mono'>" + hex(S.addr[s]) + " \u00b7 " + fmtBytes(S.size[s]) + "</td></tr>" +
      "<tr><td>pool</td><td>" + (S.large[s] ? "large" : "small") + (S.expandable[s] ? ", expandable" : "") +
      " \u00b7 id (" + escapeHtml(D.pools[S.pool[s]]) + ") \u00b7 stream " + streamName(S.stream[s]) + "</td></tr>" +
      "<tr><td>segment life</td><td>" + eventText(S.start[s]) + " \u2192 " +
      (S.end[s] >= N ? "still reserved" : eventText(S.end[s])) + "</td></tr>"
    );
  }

  function detailsHtml(item) {
    if (!item) return "<div class='muted'>Hover over the timeline or the allocator state.</div>";
    if (item.kind === "band") {
      let count = 0;
      for (let a = 0; a < nA; a++) {
        if (!L.stacked[a] && A.start[a] <= item.m && item.m < A.end[a]) count++;
      }
      const bytes = L.actTotal[item.m + 1] - L.indTotal[item.m + 1];
      return (
        "<table><tr><td>what</td><td><b>" + count + " small allocations</b>, summarised</td></tr>" +
        "<tr><td>total</td><td>" + fmtBytes(bytes) + "</td></tr>" +
        "<tr><td>each</td><td>smaller than " + fmtBytes(L.threshold) + "</td></tr>" +
        "<tr><td>moment</td><td>" + eventText(item.m) + "</td></tr></table>" +
        "<p class='muted'>Allocations this small are summed so the page stays fast; zoom does not split them.</p>"
      );
    }
    if (item.kind === "free") {
      return (
        "<table><tr><td>block</td><td><b>free</b> (inactive)</td></tr>" +
        "<tr><td>size</td><td>" + fmtBytes(item.size) + " <span class='muted'>(" + item.size.toLocaleString() + " B)</span></td></tr>" +
        "<tr><td>address</td><td class='mono'>" + hex(item.addr) + "</td></tr>" +
        segmentRows(item.s) + "</table>" +
        "<h3>Segment allocated at</h3>" + stackHtml(S.stack[item.s])
      );
    }
    const a = item.a;
    let state = "not live";
    if (A.start[a] <= moment && moment < A.end[a]) {
      state = isPending(a, moment) ? "active_pending_free" : "active_allocated";
    }
    const s = item.s !== undefined ? item.s : segmentOf(A.addr[a], Math.max(A.start[a], moment < A.end[a] ? moment : A.start[a]));
    return (
      "<table><tr><td>allocation</td><td><b>" + fmtBytes(A.size[a]) + "</b> <span class='muted'>(" +
      A.size[a].toLocaleString() + " B)</span></td></tr>" +
      "<tr><td>block</td><td>" + fmtBytes(A.block[a]) + "</td></tr>" +
      "<tr><td>address</td><td class='mono'>" + hex(A.addr[a]) + "</td></tr>" +
      "<tr><td>stream</td><td>" + streamName(A.stream[a]) + "</td></tr>" +
      "<tr><td>state</td><td>" + state + " <span class='muted'>after event " + moment + "</span></td></tr>" +
      "<tr><td>allocated</td><td>" + eventText(A.start[a]) + "</td></tr>" +
      "<tr><td>free requested</td><td>" + (A.freeReq[a] >= N ? "\u2014" : eventText(A.freeReq[a])) + "</td></tr>" +
      "<tr><td>freed</td><td>" + (A.end[a] >= N ? "live at the snapshot" : eventText(A.end[a])) + "</td></tr>" +
      "<tr><td>lifetime</td><td>" + (Math.min(A.end[a], N) - Math.max(A.start[a], 0)) + " events</td></tr>" +
      segmentRows(s) + "</table>" +
      "<h3>Allocated at</h3>" + stackHtml(A.stack[a])
    );
  }

  const detailsBody = document.getElementById("details-body");
  function showDetails() {
    detailsBody.innerHTML = detailsHtml(hover || pinned);
  }

  // ---- header, legend, moment ---------------------------------------------------------

  function drawHeader() {
    let preTrace = 0;
    for (let a = 0; a < nA && A.start[a] < 0; a++) preTrace++;
    const parts = [
      ["events", N.toLocaleString()],
      ["allocations", nA.toLocaleString()],
      ["segments", nS.toLocaleString()],
      ["peak active", fmtBytes(peakActive) + " (event " + peakMoment + ")"],
      ["peak reserved", fmtBytes(peakReserved)],
      ["streams", String(D.streams.length)],
    ];
    if (D.settings) parts.push(["settings", escapeHtml(D.settings)]);
    if (preTrace) parts.push(["live before the trace", String(preTrace)]);
    if (D.oom.length) parts.push(["OOM", String(D.oom.length)]);
    document.getElementById("stats").innerHTML = parts.map(([k, v]) => k + " <b>" + v + "</b>").join(" &middot; ");
  }

  function drawLegend() {
    const items = [];
    if (colourMode === "size") {
      const stops = [];
      for (let k = 0; k <= 8; k++) stops.push(css(rampColour(k / 8)));
      const lo = fmtBytes(Math.pow(2, Math.max(LO_BITS - 1, 0)));
      const hi = fmtBytes(Math.pow(2, HI_BITS - 1));
      items.push("size " + lo + " <span class='ramp' style='background:linear-gradient(90deg," + stops.join(",") + ")'></span> " + hi + " (log)");
    } else if (colourMode === "pool") {
      D.pools.forEach((name, p) => {
        const label = p === DEFAULT_POOL ? "default pool" : "private pool (" + escapeHtml(name) + ")";
        items.push("<span class='sw' style='background:" + css(poolRgb(p)) + "'></span>" + label);
      });
    } else {
      D.streams.forEach((_, i) => {
        items.push("<span class='sw' style='background:" + css(STREAM_COLOURS[i % STREAM_COLOURS.length]) + "'></span>stream " + streamName(i));
      });
    }
    if (L.threshold > 0) items.push("<span class='sw' style='background:#b3b8c2'></span>allocations &lt; " + fmtBytes(L.threshold) + ", summed");
    items.push("<span style='letter-spacing:-1px'>- - -</span> reserved");
    items.push("<span class='sw' style='background:#e1e4ea;border:1px solid #8a909c'></span>free in a segment");
    items.push("faded block: pending free");
    if (D.oom.length) items.push("<span class='sw' style='background:#d0312d'></span>OOM");
    document.getElementById("legend").innerHTML = items.map((t) => "<span>" + t + "</span>").join("");
  }

  const slider = document.getElementById("moment");
  const momentLabel = document.getElementById("moment-label");
  slider.min = String(Math.min(-1, N - 1));
  slider.max = String(Math.max(N - 1, -1));

  function drawMomentLabel() {
    let text = "after event " + moment;
    if (moment >= 0 && moment < N) {
      text += ": " + ACTIONS[actionAt(moment)] + " " + fmtTime(moment);
    } else {
      text = "before the first event";
    }
    text += " \u00b7 active " + fmtBytes(L.actTotal[moment + 1]) + " \u00b7 reserved " + fmtBytes(reserved[moment + 1]);
    momentLabel.textContent = text;
    slider.value = String(moment);
  }

  // ---- redraw and events --------------------------------------------------------------

  let queued = false;
  let stateDirty = true;
  function redraw(stateToo) {
    stateDirty = stateDirty || stateToo;
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      render();
    });
  }
  function render() {
    drawTimeline();
    if (stateDirty) drawState();
    stateDirty = false;
    drawMomentLabel();
    showDetails();
  }

  function setMoment(m) {
    moment = Math.min(Math.max(m, -1), N - 1);
    redraw(true);
  }

  slider.addEventListener("input", () => setMoment(parseInt(slider.value, 10)));
  document.getElementById("colour-by").addEventListener("click", (e) => {
    const mode = e.target.dataset && e.target.dataset.mode;
    if (!mode) return;
    colourMode = mode;
    for (const b of document.querySelectorAll("#colour-by button")) b.classList.toggle("on", b.dataset.mode === mode);
    packColours();
    drawLegend();
    redraw(true);
  });
  document.getElementById("reset-zoom").addEventListener("click", () => {
    view.x0 = 0;
    view.x1 = Math.max(N, 1);
    redraw(false);
  });

  const eventAt = (px) => view.x0 + ((px - M.left) / plotW()) * (view.x1 - view.x0);
  const bytesAt = (py) => ((M.top + plotH() - py) / plotH()) * yMax;
  let drag = null;

  tl.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = tl.getBoundingClientRect();
    const at = eventAt(e.clientX - r.left);
    const factor = Math.pow(1.0015, e.deltaY);
    const span = Math.min(Math.max((view.x1 - view.x0) * factor, 8), Math.max(N, 1));
    const frac = (at - view.x0) / (view.x1 - view.x0);
    view.x0 = at - frac * span;
    view.x1 = view.x0 + span;
    clampView();
    redraw(false);
  }, { passive: false });

  function clampView() {
    const span = view.x1 - view.x0;
    if (view.x0 < 0) view.x0 = 0;
    if (view.x0 + span > Math.max(N, 1)) view.x0 = Math.max(N, 1) - span;
    view.x0 = Math.max(view.x0, 0);
    view.x1 = view.x0 + span;
  }

  tl.addEventListener("mousedown", (e) => {
    drag = { x: e.clientX, x0: view.x0, x1: view.x1, moved: false };
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const wasDrag = drag.moved;
    drag = null;
    if (wasDrag || e.target !== tl) return;
    const r = tl.getBoundingClientRect();
    const px = e.clientX - r.left;
    pinned = timelineHit(px, bytesAt(e.clientY - r.top));
    const m = momentAtPx(px);
    if (m >= 0) setMoment(m);
  });
  tl.addEventListener("mousemove", (e) => {
    const r = tl.getBoundingClientRect();
    if (drag) {
      const dx = e.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (drag.moved) {
        const perPx = (drag.x1 - drag.x0) / plotW();
        view.x0 = drag.x0 - dx * perPx;
        view.x1 = drag.x1 - dx * perPx;
        clampView();
        redraw(false);
      }
      return;
    }
    hover = timelineHit(e.clientX - r.left, bytesAt(e.clientY - r.top));
    redraw(false);
  });
  tl.addEventListener("mouseleave", () => {
    hover = null;
    redraw(false);
  });
  tl.addEventListener("dblclick", () => {
    view.x0 = 0;
    view.x1 = Math.max(N, 1);
    redraw(false);
  });
  st.addEventListener("mousemove", (e) => {
    const r = st.getBoundingClientRect();
    hover = stateHit(e.clientX - r.left, e.clientY - r.top);
    redraw(true);
  });
  st.addEventListener("mouseleave", () => {
    hover = null;
    redraw(true);
  });
  st.addEventListener("click", (e) => {
    const r = st.getBoundingClientRect();
    pinned = stateHit(e.clientX - r.left, e.clientY - r.top);
    redraw(true);
  });
  window.addEventListener("resize", () => redraw(true));

  // The largest allocation live at moment m: what the details panel shows first.
  function largestAt(m) {
    let best = -1;
    for (let a = 0; a < nA; a++) {
      if (A.start[a] <= m && m < A.end[a] && (best < 0 || A.size[a] > A.size[best])) best = a;
    }
    return best < 0 ? null : { kind: "alloc", a: best };
  }

  // With #selftest in the address, go through what the mouse would do, without a mouse: hit
  // tests and details all over both views, both colourings, a zoom, the first and last moments.
  function selfTest() {
    for (const mode of ["stream", "pool", "size"]) {
      colourMode = mode;
      packColours();
      drawLegend();
      for (const m of [-1, 0, N - 1, peakMoment]) {
        moment = Math.max(m, -1);
        render();
        for (let i = 0; i <= 40; i++) {
          for (let j = 0; j <= 10; j++) {
            const t = timelineHit(M.left + (plotW() * i) / 40, (yMax * j) / 10);
            const s = stateHit((st.clientWidth * i) / 40, (st.clientHeight * j) / 10);
            detailsBody.innerHTML = detailsHtml(t);
            detailsBody.innerHTML = detailsHtml(s);
          }
        }
      }
    }
    view.x0 = N * 0.45;
    view.x1 = Math.max(N * 0.55, view.x0 + 8);
    hover = timelineHit(M.left + plotW() / 2, peakActive / 3);
    render();
  }

  try {
    pinned = largestAt(moment);
    packColours();
    drawHeader();
    drawLegend();
    render();
    root.dataset.vizFirstPaintMs = String(Math.round(performance.now()));  // since navigation
    if (location.hash === "#selftest") {
      const t1 = performance.now();
      selfTest();
      root.dataset.vizSelftestMs = String(Math.round(performance.now() - t1));
    }
    root.dataset.vizStatus = "ok";
    root.dataset.vizBuildMs = String(Math.round(buildMs));
    root.dataset.vizPoints = String(L.stackedIds.reduce((n, a) => n + L.ptX[a].length, 0));
  } catch (err) {
    root.dataset.vizStatus = "error: " + err.message;
    throw err;
  }
})();
