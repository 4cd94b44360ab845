// motley's HTML report: draws the data of the motley-data element (docs/report-formats.md,
// "HTML report") as the summary, the timeline (zoom, pan, hover), the layout, the devices,
// the strategies compared and the cost. Plain DOM and SVG; nothing is loaded from anywhere.
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('motley-data').textContent);
  const root = document.getElementById('report');
  const SVG_NS = 'http://www.w3.org/2000/svg';

  // ---- small helpers ----------------------------------------------------------------------
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function svgEl(tag, attrs, children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function setAttrs(node, attrs) {
    if (!attrs) return;
    for (const key of Object.keys(attrs)) {
      const value = attrs[key];
      if (value === undefined || value === null || value === false) continue;
      if (key === 'text') node.textContent = String(value);
      else node.setAttribute(key, String(value));
    }
  }
  function append(node, children) {
    if (children === undefined || children === null) return;
    if (!Array.isArray(children)) children = [children];
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    }
  }
  function digits3(v) {
    if (v >= 100) return v.toFixed(0);
    if (v >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }
  // Seconds as "830 ns", "12.3 us", "45.6 ms", "4.50 s" (three significant digits).
  function fmtTime(s) {
    if (s === null || s === undefined || !isFinite(s)) return '-';
    const a = Math.abs(s);
    if (a === 0) return '0 s';
    if (a < 1e-6) return digits3(s * 1e9) + ' ns';
    if (a < 1e-3) return digits3(s * 1e6) + ' us';
    if (a < 1) return digits3(s * 1e3) + ' ms';
    if (a < 1000) return digits3(s) + ' s';
    return s.toFixed(0) + ' s';
  }
  function fmtUs(us) { return fmtTime(us * 1e-6); }
  // Long spans in hours or minutes, whichever reads best.
  function fmtDuration(s) {
    if (s >= 3600) return (s / 3600).toFixed(1) + ' h';
    if (s >= 60) return (s / 60).toFixed(1) + ' min';
    return fmtTime(s);
  }
  function fmtPrefixed(v, units, base) {
    let i = 0;
    let x = v;
    while (Math.abs(x) >= base && i < units.length - 1) {
      x /= base;
      ++i;
    }
    return (i === 0 ? String(Math.round(x)) : digits3(x)) + (units[i] ? ' ' + units[i] : '');
  }
  function fmtBytes(b) { return fmtPrefixed(b, ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'], 1024); }
  function fmtCount(n) { return fmtPrefixed(n, ['', 'K', 'M', 'B', 'T'], 1000).trim(); }
  function fmtBandwidth(bps) {
    if (bps === null || bps === undefined) return 'local';
    return fmtPrefixed(bps, ['B/s', 'KB/s', 'MB/s', 'GB/s', 'TB/s'], 1000);
  }
  function fmtPct(f, decimals) { return (100 * f).toFixed(decimals === undefined ? 1 : decimals) + '%'; }
  function fmtMoney(d) {
    if (d === null || d === undefined || !isFinite(d)) return '-';
    if (d >= 0.1) return '$' + d.toFixed(2);
    return '$' + d.toPrecision(3);
  }
  function fmtError(e) {
    if (e === null || e === undefined) return '-';
    return (e >= 0 ? '+' : '') + e.toFixed(1) + '%';
  }
  function section(id, title, note) {
    const s = el('section', { id: id });
    s.appendChild(el('h2', { text: title }));
    if (note) s.appendChild(el('p', { class: 'note', text: note }));
    root.appendChild(s);
    return s;
  }
  // Distinct, colour-blind-safe fills per device type (Paul Tol's light scheme).
  const TYPE_COLORS = ['#77aadd', '#ee8866', '#eedd88', '#ffaabb', '#99ddff', '#44bb99',
    '#bbcc33', '#aaaa00', '#dddddd'];
  const typeIndex = {};
  function typeColor(type) {
    if (!(type in typeIndex)) typeIndex[type] = Object.keys(typeIndex).length;
    return TYPE_COLORS[typeIndex[type] % TYPE_COLORS.length];
  }
  // A darker shade of "#rrggbb" (odd chunks of a device group).
  function darker(hex) {
    const n = parseInt(hex.slice(1), 16);
    const scale = (c) => Math.round(c * 0.72);
    const r = scale((n >> 16) & 255), g = scale((n >> 8) & 255), b = scale(n & 255);
    return '#' + ((1 << 24) | (r << 16) | (g << 8) | b).toString(16).slice(1);
  }

  const summary = data.summary;
  const tokensPerIteration = summary.global_batch * summary.seq_len;

  // ---- summary ----------------------------------------------------------------------------
  function drawSummary() {
    const s = el('section', { id: 'summary' });
    const mb = summary.micro_batches.join('/');
    s.appendChild(el('p', {
      class: 'note',
      text: summary.model + ' on ' + summary.cluster + ' \u00b7 schedule ' + summary.schedule +
        ' \u00b7 ' + summary.devices + ' devices \u00b7 ' + summary.replicas + ' \u00d7 ' +
        summary.stages + ' (replicas \u00d7 stages) \u00b7 ' + mb + ' micro-batches of ' +
        summary.micro_batch_size + ' \u00b7 sequence ' + summary.seq_len + ' \u00b7 global batch ' +
        summary.global_batch + (summary.zero_stage ? ' \u00b7 ZeRO-' + summary.zero_stage : '') +
        (summary.sequence_parallel ? ' \u00b7 sequence parallel' : '') +
        (summary.expert_parallel > 1 ? ' \u00b7 experts over ' + summary.expert_parallel +
          ' replicas' : '') +
        (summary.context_parallel > 1 ? ' \u00b7 sequences over ' + summary.context_parallel +
          ' replicas (context parallel)' : ''),
    }));
    const cards = el('div', { class: 'cards' });
    const card = (label, value, cls, id) => el('div', { class: 'card', id: id }, [
      el('div', { class: 'label', text: label }), el('div', { class: 'value ' + (cls || ''), text: value })]);
    cards.appendChild(card('iteration (simulated)', fmtTime(summary.iteration_s), '', 'card-iteration'));
    if (summary.measured_iteration_s !== undefined) {
      cards.appendChild(card('iteration (measured)', fmtTime(summary.measured_iteration_s), '', 'card-measured'));
      cards.appendChild(card('simulated vs measured', fmtError(summary.iteration_error_pct), '', 'card-error'));
    }
    cards.appendChild(card('throughput', fmtCount(summary.tokens_per_s) + ' tokens/s'));
    cards.appendChild(card('bubble', fmtPct(summary.bubble_fraction)));
    if (summary.lower_bound_s !== undefined) {
      cards.appendChild(card('lower bound', fmtTime(summary.lower_bound_s)));
      cards.appendChild(card('efficiency vs bound', summary.efficiency.toFixed(3)));
    }
    cards.appendChild(card('memory', summary.fits_memory ? 'fits' : 'OVER CAPACITY', summary.fits_memory ? '' : 'bad'));
    if (data.cost) {
      cards.appendChild(card('$ / hour', fmtMoney(data.cost.dollars_per_hour)));
      cards.appendChild(card('$ / M tokens', fmtMoney(data.cost.dollars_per_million_tokens)));
    }
    s.appendChild(cards);
    if (data.folds.length > 0) {
      const text = data.folds.map((f) => 'replicas ' + f.replicas + ' (' + f.count + ', drawn as replica ' +
        f.replica + ')').join('; ');
      s.appendChild(el('p', { class: 'note', id: 'folds', text: 'Identical replicas are drawn once: ' + text + '.' }));
    }
    root.appendChild(s);
  }

  // ---- timeline ---------------------------------------------------------------------------
  const LABEL_W = 300;
  const ROW_H = 20;
  const STRIP_H = 5;
  const AXIS_H = 24;
  const GAP = 6;  // between replicas

  function rowLabel(row) {
    let text;
    if (row.collective) {
      text = row.name;
    } else {
      const stages = row.stages && row.stages.length ? 's' + row.stages.join(',') : 'g' + row.group;
      text = 'r' + row.replica + ' ' + stages + ' \u00b7 dev ' + (row.devices || '?') + ' ' + (row.type || '');
      if (row.tp > 1) text += ' \u00d7' + row.tp;
    }
    if (row.source === 'measured') {
      text = '  measured' + (row.error_pct !== undefined ? ' (sim ' + fmtError(row.error_pct) + ')' : '');
    }
    return text;
  }

  function drawTimeline() {
    const s = section('timeline-section', 'Timeline',
      'One row per device group, in pipeline order (replica, then stage). Scroll to zoom, drag to pan, ' +
      'double-click to reset; hover a box for its action.' +
      (data.summary.measured_source ? ' Measured rows (' + data.summary.measured_step + ' of ' +
        data.summary.measured_source + ') sit under their simulated rows.' : ''));
    const controls = el('div', { class: 'controls' });
    const zoomIn = el('button', { id: 'zoom-in', type: 'button', text: 'zoom in' });
    const zoomOut = el('button', { id: 'zoom-out', type: 'button', text: 'zoom out' });
    const reset = el('button', { id: 'zoom-reset', type: 'button', text: 'reset' });
    const critical = el('input', { id: 'show-critical', type: 'checkbox' });
    const range = el('span', { class: 'range', id: 'view-range' });
    append(controls, [zoomIn, zoomOut, reset, el('label', {}, [critical, ' critical path']), range]);
    s.appendChild(controls);
    const legend = el('div', { class: 'legend' });
    data.kinds.forEach((k) => legend.appendChild(el('span', {}, [
      el('span', { class: 'swatch', style: 'background:' + k.color }), k.label])));
    s.appendChild(legend);
    const box = el('div', { id: 'timeline-box' });
    const holder = el('div', { id: 'timeline' });
    box.appendChild(holder);
    s.appendChild(box);
    const tooltip = el('div', { id: 'tooltip' });
    document.body.appendChild(tooltip);

    const rows = data.timeline.rows;
    const span = Math.max(data.timeline.span_us, 1e-3);
    const view = { start: 0, end: span };
    // Vertical placement: a gap before each new replica.
    const top = [];
    let y = AXIS_H;
    rows.forEach((row, i) => {
      if (i > 0 && row.replica !== rows[i - 1].replica) y += GAP;
      top.push(y);
      const hasStrip = row.events.some((e) => (e[5] & 4) !== 0);
      y += ROW_H + (hasStrip ? STRIP_H : 0) + 2;
    });
    const height = y + 4;
    const svg = svgEl('svg', { id: 'timeline-svg', height: height, role: 'img',
      'aria-label': 'timeline of the iteration' });
    holder.appendChild(svg);

    function width() { return Math.max(800, holder.clientWidth || 1200); }
    function render() {
      const W = width();
      const plotW = W - LABEL_W - 8;
      const scale = plotW / (view.end - view.start);
      const x = (t) => LABEL_W + (t - view.start) * scale;
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      svg.setAttribute('width', W);
      svg.setAttribute('viewBox', '0 0 ' + W + ' ' + height);
      svg.setAttribute('data-view-start-us', view.start);
      svg.setAttribute('data-view-end-us', view.end);
      range.textContent = fmtUs(view.start) + ' \u2013 ' + fmtUs(view.end);
      const clip = svgEl('clipPath', { id: 'plot-clip' }, svgEl('rect', { x: LABEL_W, y: 0, width: plotW, height: height }));
      svg.appendChild(svgEl('defs', {}, clip));
      // Axis: 1-2-5 steps, at most ~10 intervals.
      const axis = svgEl('g', { class: 'axis' });
      const spanMs = (view.end - view.start) / 1e3;
      let step = Math.pow(10, Math.floor(Math.log10(spanMs / 10)));
      for (const m of [1, 2, 5, 10]) {
        if (spanMs / (m * step) <= 10) { step *= m; break; }
      }
      const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
      const firstTick = Math.ceil(view.start / 1e3 / step) * step;
      for (let t = firstTick; t <= view.end / 1e3 + 1e-12; t += step) {
        const px = x(t * 1e3);
        axis.appendChild(svgEl('line', { x1: px, x2: px, y1: AXIS_H - 4, y2: height, stroke: '#eee' }));
        axis.appendChild(svgEl('text', { x: px, y: AXIS_H - 8, 'font-size': 11, 'text-anchor': 'middle',
          fill: '#555', text: t.toFixed(decimals) + ' ms' }));
      }
      svg.appendChild(axis);
      const plot = svgEl('g', { 'clip-path': 'url(#plot-clip)' });
      const showCritical = critical.checked;
      rows.forEach((row, i) => {
        const g = svgEl('g', { class: 'row', 'data-row': i, 'data-replica': row.replica, 'data-stage': row.stage,
          'data-group': row.group, 'data-source': row.source });
        const y0 = top[i];
        g.appendChild(svgEl('rect', { x: LABEL_W, y: y0, width: plotW, height: ROW_H,
          fill: row.source === 'measured' ? '#f1eee4' : '#e8e8e8' }));
        for (let k = 0; k < row.events.length; ++k) {
          const e = row.events[k];
          if (e[2] < view.start || e[1] > view.end) continue;
          const isStrip = (e[5] & 4) !== 0;
          const x0 = x(e[1]);
          const w = Math.max(0.6, (e[2] - e[1]) * scale);
          let fill = data.kinds[e[0]] ? data.kinds[e[0]].color : '#000';
          if (e[5] & 2) fill = darker(fill);
          const attrs = { class: 'box', x: x0, y: isStrip ? y0 + ROW_H : y0 + 1, width: w,
            height: isStrip ? STRIP_H : ROW_H - 2, fill: fill, 'data-row': i, 'data-event': k };
          if (showCritical && (e[5] & 1)) {
            attrs.stroke = '#000';
            attrs['stroke-width'] = 1.5;
          } else if (isStrip) {
            attrs.stroke = '#8c8200';
            attrs['stroke-width'] = 0.3;
          }
          g.appendChild(svgEl('rect', attrs));
          if (!isStrip && w > 16 && e[4] >= 0) {
            g.appendChild(svgEl('text', { x: x0 + w / 2, y: y0 + ROW_H / 2 + 4, 'font-size': 10,
              'text-anchor': 'middle', fill: '#000', 'pointer-events': 'none', text: e[4] }));
          }
        }
        plot.appendChild(g);
      });
      // The iteration's end (and the measured one).
      const marks = [[data.timeline.iteration_us, '#333', 'simulated end']];
      if (summary.measured_iteration_s !== undefined) marks.push([summary.measured_iteration_s * 1e6, '#a0522d', 'measured end']);
      for (const [t, color, name] of marks) {
        if (t < view.start || t > view.end) continue;
        plot.appendChild(svgEl('line', { x1: x(t), x2: x(t), y1: AXIS_H - 4, y2: height, stroke: color,
          'stroke-dasharray': '4 3', class: 'end-mark', 'data-name': name }));
      }
      svg.appendChild(plot);
      const labels = svgEl('g', { class: 'labels' });
      rows.forEach((row, i) => {
        const label = rowLabel(row);
        const bad = row.error_pct !== undefined && row.error_pct !== null && Math.abs(row.error_pct) > 10;
        const t = svgEl('text', { x: 6, y: top[i] + ROW_H / 2 + 4, 'font-size': 12,
          fill: bad ? '#c0392b' : (row.source === 'measured' ? '#7a5a2a' : '#222'), text: label });
        const also = row.folded && row.folded !== String(row.replica) ? ' \u2014 drawn for replicas ' + row.folded : '';
        t.appendChild(svgEl('title', { text: row.name + also }));
        labels.appendChild(t);
      });
      svg.appendChild(labels);
    }

    function describe(row, e) {
      const kind = data.kinds[e[0]] ? data.kinds[e[0]].label : '?';
      const lines = [];
      let head = kind;
      if (e[3] >= 0) head += ' \u00b7 stage ' + e[3];
      if (e[4] >= 0) head += ' \u00b7 micro-batch ' + e[4];
      lines.push(head);
      lines.push('start ' + fmtUs(e[1]) + ' \u00b7 duration ' + fmtUs(e[2] - e[1]));
      if (row.collective) lines.push(row.name);
      else lines.push('replica ' + row.replica + ', group ' + row.group + ' (devices ' + row.devices + ', ' + row.type + ')');
      lines.push(row.source + ((e[5] & 1) ? ' \u00b7 on the critical path' : '') + ((e[5] & 4) ? ' \u00b7 transfer it sent' : ''));
      return lines.join('\n');
    }
    svg.addEventListener('mousemove', (ev) => {
      const t = ev.target;
      if (t && t.classList && t.classList.contains('box')) {
        const row = rows[Number(t.getAttribute('data-row'))];
        const e = row.events[Number(t.getAttribute('data-event'))];
        tooltip.textContent = describe(row, e);
        tooltip.style.display = 'block';
        tooltip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 320) + 'px';
        tooltip.style.top = (ev.clientY + 14) + 'px';
      } else {
        tooltip.style.display = 'none';
      }
    });
    svg.addEventListener('mouseleave', () => { tooltip.style.display = 'none'; });

    function clampView() {
      const minWidth = 1e-3;
      let w = Math.min(span, Math.max(minWidth, view.end - view.start));
      view.start = Math.min(Math.max(0, view.start), span - w);
      view.end = view.start + w;
    }
    function zoomAt(factor, atUs) {
      const w = (view.end - view.start) * factor;
      const f = (atUs - view.start) / (view.end - view.start);
      view.start = atUs - f * w;
      view.end = view.start + w;
      clampView();
      render();
    }
    function timeAt(clientX) {
      const rect = svg.getBoundingClientRect();
      const plotW = width() - LABEL_W - 8;
      const px = Math.min(Math.max(clientX - rect.left - LABEL_W, 0), plotW);
      return view.start + px / plotW * (view.end - view.start);
    }
    svg.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      zoomAt(Math.pow(1.0015, ev.deltaY), timeAt(ev.clientX));
    }, { passive: false });
    let drag = null;
    svg.addEventListener('mousedown', (ev) => {
      drag = { x: ev.clientX, start: view.start, end: view.end };
      svg.classList.add('dragging');
    });
    window.addEventListener('mousemove', (ev) => {
      if (!drag) return;
      const plotW = width() - LABEL_W - 8;
      const dt = (ev.clientX - drag.x) / plotW * (drag.end - drag.start);
      view.start = drag.start - dt;
      view.end = drag.end - dt;
      clampView();
      render();
    });
    window.addEventListener('mouseup', () => { drag = null; svg.classList.remove('dragging'); });
    svg.addEventListener('dblclick', () => { view.start = 0; view.end = span; render(); });
    zoomIn.addEventListener('click', () => zoomAt(0.5, (view.start + view.end) / 2));
    zoomOut.addEventListener('click', () => zoomAt(2, (view.start + view.end) / 2));
    reset.addEventListener('click', () => { view.start = 0; view.end = span; render(); });
    critical.addEventListener('change', render);
    window.addEventListener('resize', render);
    render();
  }

  // ---- layout -----------------------------------------------------------------------------
  function drawLayout() {
    const layout = data.layout;
    const s = section('layout', 'Layout',
      'Each replica\u2019s stages in pipeline order: the device group that runs each (coloured by device ' +
      'type), its layers and parameters, and the path between consecutive groups (bottleneck bandwidth; ' +
      'dashed: crosses nodes). The slowest of those paths is red.');
    const BOX_W = 196, BOX_H = 104, LINK_W = 96;
    const PER_LINE = Math.max(1, Math.floor((root.clientWidth || 1200) / (BOX_W + LINK_W)));
    layout.replicas.forEach((rep) => {
      const caption = 'replica ' + rep.replica + (rep.count > 1 ? ' (drawn once for ' + rep.count + ' identical replicas: ' +
        rep.folded + ')' : '') + ' \u00b7 ' + rep.micro_batches + ' micro-batches';
      s.appendChild(el('p', { class: 'note', text: caption }));
      const n = rep.stages.length;
      const lines = Math.ceil(n / PER_LINE);
      const W = Math.min(n, PER_LINE) * (BOX_W + LINK_W);
      const H = lines * (BOX_H + 30);
      const svg = svgEl('svg', { width: W, height: H, class: 'replica-layout', 'data-replica': rep.replica });
      const linkAfter = {};
      rep.links.forEach((l) => { linkAfter[l.from_stage] = l; });
      rep.stages.forEach((st, i) => {
        const col = i % PER_LINE, line = Math.floor(i / PER_LINE);
        const x0 = col * (BOX_W + LINK_W) + 2, y0 = line * (BOX_H + 30) + 4;
        const g = svgEl('g', { class: 'stage-box', 'data-stage': st.stage, 'data-group': st.group });
        g.appendChild(svgEl('rect', { x: x0, y: y0, width: BOX_W, height: BOX_H, rx: 5,
          fill: typeColor(st.type), stroke: st.head ? '#d55e00' : '#555', 'stroke-width': st.head ? 3 : 1 }));
        const text = [
          'stage ' + st.stage + ' \u00b7 group ' + st.group + (st.recompute !== 'none' ? ' \u00b7 R ' + st.recompute : ''),
          st.type + ' \u00d7' + st.tp + ' \u00b7 dev ' + st.devices,
          'layers ' + st.layer_begin + '\u2013' + (st.layer_end - 1),
          st.layers.length > 30 ? st.layers.slice(0, 29) + '\u2026' : st.layers,
          fmtCount(st.parameters) + ' params \u00b7 F ' + fmtTime(st.forward_per_micro_batch_s) + '/mb',
        ];
        text.forEach((t, k) => g.appendChild(svgEl('text', { x: x0 + 8, y: y0 + 18 + k * 17,
          'font-size': k === 0 ? 12 : 11, 'font-weight': k === 0 ? 600 : 400, text: t })));
        if (st.head || st.embedding) {
          g.appendChild(svgEl('text', { x: x0 + BOX_W - 6, y: y0 + BOX_H - 6, 'font-size': 11, 'text-anchor': 'end',
            fill: st.head ? '#a33d00' : '#333', 'font-weight': 600, text: st.head ? 'LM head' : 'embedding' }));
        }
        g.appendChild(svgEl('title', { text: st.layers }));
        svg.appendChild(g);
        const link = linkAfter[st.stage];
        if (link) {
          const lx0 = x0 + BOX_W, ly = y0 + BOX_H / 2;
          const wrap = col === PER_LINE - 1;
          const lx1 = wrap ? lx0 + LINK_W - 10 : lx0 + LINK_W;
          const color = link.slowest ? '#c0392b' : '#444';
          const lg = svgEl('g', { class: 'link' + (link.slowest ? ' slowest' : ''), 'data-from': link.from_stage,
            'data-to': link.to_stage });
          lg.appendChild(svgEl('line', { x1: lx0, x2: lx1, y1: ly, y2: ly, stroke: color,
            'stroke-width': link.slowest ? 4 : 2, 'stroke-dasharray': link.crosses_nodes ? '6 3' : null }));
          lg.appendChild(svgEl('text', { x: (lx0 + lx1) / 2, y: ly - 7, 'font-size': 11, 'text-anchor': 'middle',
            fill: color, text: fmtBandwidth(link.bandwidth_Bps) }));
          lg.appendChild(svgEl('text', { x: (lx0 + lx1) / 2, y: ly + 15, 'font-size': 10, 'text-anchor': 'middle',
            fill: color, text: link.kinds.join('+') + (link.slowest ? ' \u00b7 slowest' : '') }));
          lg.appendChild(svgEl('title', { text: 'device ' + link.from_device + ' \u2192 ' + link.to_device + ': ' +
            fmtBandwidth(link.bandwidth_Bps) + ', latency ' + fmtTime(link.latency_s) +
            (link.measured ? ' (measured)' : '') }));
          svg.appendChild(lg);
        }
      });
      s.appendChild(svg);
    });
    const legend = el('div', { class: 'legend' });
    Object.keys(typeIndex).forEach((t) => legend.appendChild(el('span', {}, [
      el('span', { class: 'swatch', style: 'background:' + typeColor(t) }), t])));
    s.appendChild(legend);
    if (layout.data_parallel_link) {
      const l = layout.data_parallel_link;
      s.appendChild(el('p', { class: 'note', id: 'dp-link', text: 'Data-parallel gradient all-reduce: narrowest path between ' +
        'replicas ' + fmtBandwidth(l.bandwidth_Bps) + ' (' + l.kinds.join('+') + ', device ' + l.from_device + ' \u2192 ' +
        l.to_device + (l.crosses_nodes ? ', across nodes' : '') + ').' }));
    }
  }

  // ---- devices ----------------------------------------------------------------------------
  function bar(fraction, cls, label) {
    const f = Math.max(0, Math.min(1, fraction));
    return el('span', {}, [el('span', { class: 'bar ' + (cls || '') }, el('div', { style: 'width:' + (100 * f).toFixed(1) + '%' })),
      el('span', { class: 'bar-label', text: label })]);
  }
  function drawDevices() {
    const s = section('devices', 'Devices',
      'Utilization is compute time over the iteration; the bubble is the rest. Exposed communication is time ' +
      'a device waited on a transfer or all-reduce. Peak memory is against the device\u2019s capacity.');
    const errors = {};
    data.timeline.rows.forEach((r) => {
      if (r.source === 'measured' && r.error_pct !== undefined) errors[r.replica + '/' + r.group] = r.error_pct;
    });
    const measured = Object.keys(errors).length > 0;
    const head = ['device', 'type', 'replica', 'group', 'stages', 'utilization', 'bubble', 'exposed comm.', 'peak memory / capacity'];
    if (measured) head.push('sim vs measured step');
    const table = el('table', { id: 'device-table' });
    table.appendChild(el('thead', {}, el('tr', {}, head.map((h, i) => el('th', { class: i < 2 ? 'left' : '', text: h })))));
    const body = el('tbody');
    data.devices.forEach((d) => {
      const ratio = d.capacity_bytes > 0 ? d.peak_memory_bytes / d.capacity_bytes : 0;
      const cells = [
        el('td', { class: 'left', text: d.device }),
        el('td', { class: 'left', text: d.type }),
        el('td', { text: d.folded && d.folded !== String(d.replica) ? d.folded : d.replica }),
        el('td', { text: d.group }),
        el('td', { text: d.stages.join(',') }),
        el('td', {}, bar(d.utilization, '', fmtPct(d.utilization))),
        el('td', { text: fmtTime(d.idle_s) + ' (' + fmtPct(1 - d.utilization) + ')' }),
        el('td', { text: fmtTime(d.exposed_communication_s) }),
        el('td', {}, bar(ratio, 'memory' + (ratio > 1 ? ' over' : ''), fmtBytes(d.peak_memory_bytes) + ' / ' +
          fmtBytes(d.capacity_bytes))),
      ];
      if (measured) cells.push(el('td', { text: fmtError(errors[d.replica + '/' + d.group]) }));
      body.appendChild(el('tr', {}, cells));
    });
    table.appendChild(body);
    s.appendChild(el('div', { class: 'scroll' }, table));
  }

  // ---- strategies -------------------------------------------------------------------------
  function drawStrategies() {
    const list = data.strategies;
    const s = section('strategies', 'Strategies compared',
      'Tokens per second of each strategy\u2019s plan, all priced by the same simulator under the same memory ' +
      'limits.' + (summary.lower_bound_s !== undefined ? ' The dashed line is the lower bound\u2019s throughput.' : ''));
    const bound = summary.lower_bound_s !== undefined ? tokensPerIteration / summary.lower_bound_s : 0;
    let best = bound;
    list.forEach((x) => { if (x.feasible) best = Math.max(best, x.tokens_per_s); });
    const NAME_W = 170, BAR_W = 620, H = 22;
    const svg = svgEl('svg', { id: 'strategy-bars', width: NAME_W + BAR_W + 190, height: list.length * H + 26 });
    list.forEach((x, i) => {
      const y = 6 + i * H;
      const g = svgEl('g', { class: 'strategy', 'data-name': x.name });
      g.appendChild(svgEl('text', { x: NAME_W - 8, y: y + 14, 'font-size': 12, 'text-anchor': 'end', text: x.name,
        'font-weight': x.name === 'motley' ? 700 : 400 }));
      if (x.feasible) {
        const w = best > 0 ? x.tokens_per_s / best * BAR_W : 0;
        g.appendChild(svgEl('rect', { x: NAME_W, y: y + 2, width: Math.max(1, w), height: H - 6,
          fill: x.name === 'motley' ? '#0072b2' : '#8fb8d8' }));
        g.appendChild(svgEl('text', { x: NAME_W + w + 6, y: y + 14, 'font-size': 11, text: fmtCount(x.tokens_per_s) +
          ' tokens/s \u00b7 ' + fmtTime(x.iteration_s) }));
      } else {
        g.appendChild(svgEl('text', { x: NAME_W + 4, y: y + 14, 'font-size': 11, fill: '#c0392b', text: x.not_run ? 'not run' : 'infeasible' }));
      }
      g.appendChild(svgEl('title', { text: x.detail }));
      svg.appendChild(g);
    });
    if (bound > 0) {
      const bx = NAME_W + bound / best * BAR_W;
      svg.appendChild(svgEl('line', { id: 'bound-line', x1: bx, x2: bx, y1: 0, y2: list.length * H + 6, stroke: '#333',
        'stroke-dasharray': '5 4' }));
      svg.appendChild(svgEl('text', { x: bx, y: list.length * H + 20, 'font-size': 11, 'text-anchor': 'middle',
        text: 'lower bound ' + fmtCount(bound) + ' tokens/s' }));
    }
    s.appendChild(svg);
    const spot = data.cost && data.cost.interruptible;
    const head = ['strategy', 'iteration', 'tokens/s', 'bubble', 'peak memory', 'efficiency', '$/M tokens'];
    if (spot) head.push('$/M on demand', 'goodput');
    head.push('detail');
    const table = el('table', { id: 'strategy-table' });
    table.appendChild(el('thead', {}, el('tr', {}, head.map((h, i) => el('th', { class: i === 0 || i === head.length - 1 ? 'left' : '', text: h })))));
    const body = el('tbody');
    list.forEach((x) => {
      const cells = [el('td', { class: 'left', text: x.name })];
      if (x.feasible) {
        cells.push(el('td', { text: fmtTime(x.iteration_s) }), el('td', { text: fmtCount(x.tokens_per_s) }),
          el('td', { text: fmtPct(x.bubble_fraction) }), el('td', { text: fmtPct(x.peak_memory_ratio) }),
          el('td', { text: x.efficiency !== undefined ? x.efficiency.toFixed(3) : '-' }),
          el('td', { text: fmtMoney(x.dollars_per_million_tokens) }));
        if (spot) cells.push(el('td', { text: fmtMoney(x.on_demand_dollars_per_million_tokens) }), el('td', { text: fmtPct(x.goodput) }));
      } else {
        for (let k = 1; k < head.length - 1; ++k) cells.push(el('td', { text: k === 1 ? (x.not_run ? 'not run' : 'infeasible') : '-' }));
      }
      cells.push(el('td', { class: 'left', text: x.detail }));
      body.appendChild(el('tr', {}, cells));
    });
    table.appendChild(body);
    s.appendChild(el('div', { class: 'scroll' }, table));
  }

  // ---- cost -------------------------------------------------------------------------------
  function drawCost() {
    const c = data.cost;
    const s = section('cost', 'Cost', c.interruptible
      ? 'Spot prices with interruptions priced (checkpoints at Daly\u2019s interval, restarts, lost work), ' +
        'against the same devices bought on demand.'
      : 'Prices of the devices the plan uses.');
    const cards = el('div', { class: 'cards' });
    const card = (label, value) => el('div', { class: 'card' }, [
      el('div', { class: 'label', text: label }), el('div', { class: 'value', text: value })]);
    cards.appendChild(card(c.interruptible ? '$ / hour (spot)' : '$ / hour', fmtMoney(c.dollars_per_hour)));
    cards.appendChild(card(c.interruptible ? '$ / M tokens (spot, expected)' : '$ / M tokens', fmtMoney(c.dollars_per_million_tokens)));
    if (c.interruptible) {
      cards.appendChild(card('$ / hour on demand', fmtMoney(c.on_demand_dollars_per_hour)));
      cards.appendChild(card('$ / M tokens on demand', fmtMoney(c.on_demand_dollars_per_million_tokens)));
      cards.appendChild(card('goodput', fmtPct(c.goodput)));
      cards.appendChild(card('mean time between interruptions', fmtDuration(c.mean_hours_between_interruptions * 3600)));
      cards.appendChild(card('checkpoint every', fmtDuration(c.checkpoint_interval_s)));
    }
    s.appendChild(cards);
    if (c.interruptible) {
      const max = Math.max(c.dollars_per_million_tokens, c.on_demand_dollars_per_million_tokens, 1e-12);
      const svg = svgEl('svg', { id: 'cost-bars', width: 700, height: 60 });
      [['spot', c.dollars_per_million_tokens, '#009e73'], ['on demand', c.on_demand_dollars_per_million_tokens, '#999']]
        .forEach(([name, v, color], i) => {
          const y = 4 + i * 26;
          svg.appendChild(svgEl('text', { x: 90, y: y + 15, 'font-size': 12, 'text-anchor': 'end', text: name }));
          svg.appendChild(svgEl('rect', { x: 100, y: y, width: Math.max(1, v / max * 480), height: 20, fill: color }));
          svg.appendChild(svgEl('text', { x: 106 + v / max * 480, y: y + 15, 'font-size': 11, text: fmtMoney(v) + ' / M tokens' }));
        });
      s.appendChild(svg);
    }
  }

  drawSummary();
  drawTimeline();
  drawLayout();
  drawDevices();
  if (data.strategies) drawStrategies();
  if (data.cost) drawCost();
  root.appendChild(el('footer', { text: 'Written by ' + (data.generator || 'motley') + ' (' + data.format + '). ' +
    'All figures are the simulator\u2019s unless marked measured.' }));
  document.body.setAttribute('data-ready', 'true');
})();
