// colibri's chat page: the OpenAI chat API (streamed), /metrics and /stats, nothing else.
'use strict';

const $ = (id) => document.getElementById(id);
const state = { messages: [], controller: null, key: localStorage.getItem('colibri-key') || '', model: '' };
const previous = { t: 0, lookups: 0, hits: 0, fetched: 0 };

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (state.key) h.Authorization = 'Bearer ' + state.key;
  return h;
}

function askKey() {
  const k = prompt('API key for this server (kept in this browser only):', state.key);
  if (k === null) return;
  state.key = k.trim();
  localStorage.setItem('colibri-key', state.key);
  loadModel();
}

async function loadModel() {
  const r = await fetch('/v1/models', { headers: headers() });
  if (r.status === 401) {
    $('model').textContent = 'needs an API key';
    return;
  }
  const j = await r.json();
  state.model = j.data[0].id;
  $('model').textContent = j.data.map((m) => m.id).join(', ') + ' · context ' + j.data[0].max_model_len;
}

// Text with <think>...</think> (or reasoning deltas) split into thinking and the answer.
function splitThinking(text, reasoning) {
  let thinking = reasoning, answer = text;
  const open = text.indexOf('<think>');
  if (open >= 0) {
    const close = text.indexOf('</think>', open);
    thinking += close >= 0 ? text.slice(open + 7, close) : text.slice(open + 7);
    answer = text.slice(0, open) + (close >= 0 ? text.slice(close + 8) : '');
  }
  return { thinking: thinking.trim(), answer: answer.replace(/^\s+/, '') };
}

function bubble(role) {
  const div = document.createElement('div');
  div.className = 'msg ' + role;
  $('messages').appendChild(div);
  return div;
}

function renderAssistant(div, text, reasoning, meta) {
  const { thinking, answer } = splitThinking(text, reasoning);
  div.replaceChildren();
  if (thinking) {
    const details = document.createElement('details');  // collapsed unless opened
    const summary = document.createElement('summary');
    summary.textContent = 'thinking';
    details.append(summary, document.createTextNode(thinking));
    div.appendChild(details);
  }
  const body = document.createElement('span');
  body.className = 'answer';
  body.textContent = answer;
  div.appendChild(body);
  if (meta) {
    const m = document.createElement('span');
    m.className = 'meta';
    m.textContent = meta;
    div.appendChild(m);
  }
  $('messages').scrollTop = $('messages').scrollHeight;
}

function renderUser(text) {
  bubble('user').textContent = text;
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  $('regenerate').disabled = busy || !state.messages.some((m) => m.role === 'assistant');
}

// Streams one reply to the conversation so far into a new bubble.
async function generate() {
  const div = bubble('assistant');
  div.dataset.state = 'streaming';
  state.controller = new AbortController();
  setBusy(true);
  const body = {
    model: state.model || undefined, messages: state.messages, stream: true,
    stream_options: { include_usage: true },
    temperature: Number($('temperature').value), max_tokens: Number($('max-tokens').value),
  };
  const t0 = performance.now();
  // tokens: the server's count (usage, at the end); a stopped reply counts its deltas.
  let first = 0, text = '', reasoning = '', tokens = 0, deltas = 0, finish = '', error = '';
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: state.controller.signal,
    });
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || 'HTTP ' + r.status);
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let pending = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      let end;
      while ((end = pending.indexOf('\n\n')) >= 0) {
        const event = pending.slice(0, end);
        pending = pending.slice(end + 2);
        if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
        const j = JSON.parse(event.slice(6));
        if (j.error) throw new Error(j.error.message);
        if (j.usage) tokens = j.usage.completion_tokens;
        for (const c of j.choices || []) {
          const d = c.delta || {};
          if (d.content || d.reasoning_content) {
            if (!first) first = performance.now();
            deltas++;
            text += d.content || '';
            reasoning += d.reasoning_content || '';
            renderAssistant(div, text, reasoning, '');
          }
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') error = e.message;
    else finish = 'stopped';
  }
  const end = performance.now();
  state.controller = null;
  if (!tokens) tokens = deltas;
  if (error) {
    div.className = 'msg error';
    div.textContent = error;
    div.dataset.state = 'error';
  } else {
    const ttft = first ? (first - t0) / 1000 : 0;
    const tps = tokens > 1 && first ? (tokens - 1) / ((end - first) / 1000) : 0;
    const meta = `${tokens} tokens · ${tps.toFixed(1)} tok/s · TTFT ${ttft.toFixed(2)} s · ${finish}`;
    renderAssistant(div, text, reasoning, meta);
    div.dataset.state = 'done';
    state.messages.push({ role: 'assistant', content: text });
    if (first) {
      $('stat-tps').textContent = tps.toFixed(1);
      $('stat-ttft').textContent = ttft.toFixed(2) + ' s';
    }
  }
  setBusy(false);
}

function send(e) {
  e.preventDefault();
  const text = $('prompt').value.trim();
  if (!text || state.controller) return;
  $('prompt').value = '';
  state.messages.push({ role: 'user', content: text });
  renderUser(text);
  generate();
}

function regenerate() {
  if (state.controller) return;
  const last = state.messages.length - 1;
  if (last < 0 || state.messages[last].role !== 'assistant') return;
  state.messages.pop();
  const bubbles = $('messages').querySelectorAll('.msg.assistant');
  if (bubbles.length) bubbles[bubbles.length - 1].remove();
  generate();
}

// Prometheus text: the sum of a metric's samples whose labels include every `want` pair.
function metric(text, name, want = {}) {
  let sum = 0, seen = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== ' ' && line[name.length] !== '{')) continue;
    const labels = line.slice(name.length).match(/^\{([^}]*)\}/);
    const ok = Object.entries(want).every(([k, v]) => labels && labels[1].includes(`${k}="${v}"`));
    if (!ok) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
    seen = true;
  }
  return seen ? sum : null;
}

function formatBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + ' ' + units[i];
}

function drawHeat(heat) {
  const canvas = $('heat');
  const ctx = canvas.getContext('2d');
  const layers = heat.layers, experts = heat.experts;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  if (!layers || !experts) return;
  const grid = Array.from({ length: layers }, () => new Array(experts).fill(0));
  for (const [l, e, h] of heat.cells) if (l < layers && e < experts) grid[l][e] = h;
  const w = canvas.width / experts, h = canvas.height / layers;
  for (let l = 0; l < layers; l++) {
    const max = Math.max(...grid[l]) || 1;  // each layer on its own scale
    for (let e = 0; e < experts; e++) {
      const v = grid[l][e] / max;
      ctx.fillStyle = `rgb(${Math.round(255 - 60 * v)}, ${Math.round(245 - 200 * v)}, ${Math.round(235 - 200 * v)})`;
      ctx.fillRect(e * w, l * h, Math.ceil(w), Math.ceil(h));
    }
  }
}

function drawTiers(node) {
  const legend = $('tier-legend');
  if (!node) {
    legend.textContent = 'tiers: kept by the compute nodes (their /metrics)';
    return;
  }
  const total = node.expert_bytes || 1;
  const vram = node.tiers.vram ? node.tiers.vram.bytes : 0;
  const ram = node.tiers.ram ? node.tiers.ram.bytes : 0;
  const disk = Math.max(0, total - vram - ram);
  const parts = { vram, ram, disk };
  for (const [k, v] of Object.entries(parts)) {
    document.querySelector('.tier.' + k).style.width = (100 * v / total) + '%';
  }
  legend.textContent = `VRAM ${formatBytes(vram)} · RAM ${formatBytes(ram)} · disk only ${formatBytes(disk)}`;
}

async function poll() {
  try {
    const [m, s] = await Promise.all([
      fetch('/metrics', { headers: headers() }).then((r) => (r.ok ? r.text() : '')),
      fetch('/stats', { headers: headers() }).then((r) => (r.ok ? r.json() : null)),
    ]);
    const now = performance.now() / 1000;
    const lookups = metric(m, 'colibri_compute_expert_cache_lookups_total', { tier: 'ram' });
    const hits = metric(m, 'colibri_compute_expert_cache_lookups_total', { result: 'hit', tier: 'ram' });
    const fetched = metric(m, 'colibri_compute_expert_fetched_bytes_total');
    const tokens = metric(m, 'colibri_router_completion_tokens_total');
    if (tokens !== null) $('stat-tokens').textContent = tokens;
    if (lookups !== null && lookups > 0) $('stat-hit').textContent = (100 * hits / lookups).toFixed(1) + ' %';
    if (fetched !== null && previous.t) {
      $('stat-disk').textContent = formatBytes((fetched - previous.fetched) / (now - previous.t)) + '/s';
    }
    Object.assign(previous, { t: now, lookups, hits, fetched });
    if (s) {
      drawHeat(s.node ? { ...s.heat, layers: s.node.layers, experts: s.node.experts } : s.heat);
      drawTiers(s.node);
      $('status').textContent = `${s.heat.cells.length} experts seen`;
    }
  } catch (e) {
    $('status').textContent = 'stats: ' + e.message;
  }
}

$('composer').addEventListener('submit', send);
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) send(e);
});
$('stop').addEventListener('click', () => state.controller && state.controller.abort());
$('regenerate').addEventListener('click', regenerate);
$('reset').addEventListener('click', () => {
  if (state.controller) state.controller.abort();
  state.messages = [];
  $('messages').replaceChildren();
  setBusy(false);
});
$('key-button').addEventListener('click', askKey);
loadModel();
poll();
setInterval(poll, 1000);
