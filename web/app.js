// gpusched dashboard: reads /api/v1 every second with an admin key and draws
// the GPU map, deployments, model routes, live charts (uPlot), tenants, the
// events feed and the alerts Prometheus reports firing (every 5 s).
// Plain browser JavaScript, no build step; served from the binary (web/).
"use strict";

(function () {
  const API = "/api/v1";
  const POLL_MS = 1000;
  const HISTORY = 300;  // chart points kept (5 minutes at 1 s)
  const MAX_EVENTS = 500;
  const ALERTS_MS = 5000;  // GET /api/v1/alerts asks Prometheus: not every poll
  const KEY_STORE = "gpusched.adminKey";
  const PALETTE = ["#2f6fde", "#e8743b", "#19a979", "#945ecf", "#ed4a7b", "#13a4b4",
                   "#bf8b00", "#6c8893", "#d6502f", "#4e7d2b", "#a05195", "#3b5bdb"];

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };

  // --- state -------------------------------------------------------------
  const state = {
    key: "",
    paused: false,
    busy: false,
    colors: new Map(),            // deployment -> colour, stable for the page's life
    lastCompleted: new Map(),     // deployment -> completed counter at the last poll
    lastPoll: 0,
    history: { t: [], series: new Map() },  // per chart: deployment -> values
    charts: {},                   // chart id -> {plot, names}
    events: [],                   // newest first
    eventIds: new Set(),
    eventSince: 0,
    eventKinds: new Set(),
    data: null,                   // the last poll's answers
    polls: 0,
    alerts: null,                 // the last GET /api/v1/alerts answer, or {error}
    alertsAt: 0,
    alertsBusy: false,
  };
  window.gpuschedDashboard = state;  // for the browser test and for debugging

  function colorOf(deployment) {
    if (!state.colors.has(deployment)) {
      state.colors.set(deployment, PALETTE[state.colors.size % PALETTE.length]);
    }
    return state.colors.get(deployment);
  }

  // --- formatting --------------------------------------------------------
  const gib = (mib) => (mib / 1024).toFixed(mib >= 10240 ? 0 : 1) + " GiB";
  const pct = (x) => (100 * x).toFixed(0) + "%";
  const secs = (s) => (s === null || s === undefined) ? "–"
    : s < 1 ? (s * 1000).toFixed(s < 0.01 ? 1 : 0) + " ms" : s.toFixed(2) + " s";
  const num = (x, d = 0) => (x === null || x === undefined) ? "–"
    : Number(x).toLocaleString(undefined, { maximumFractionDigits: d, minimumFractionDigits: d });
  function ago(iso) {
    const t = Date.parse(iso);
    if (!t) return "";
    const s = Math.max(0, (Date.now() - t) / 1000);
    if (s < 60) return s.toFixed(0) + "s";
    if (s < 3600) return (s / 60).toFixed(0) + "m";
    if (s < 86400) return (s / 3600).toFixed(0) + "h";
    return (s / 86400).toFixed(0) + "d";
  }
  function clock(iso) {
    const d = new Date(iso);
    return isNaN(d) ? iso : d.toLocaleTimeString(undefined, { hour12: false });
  }

  // --- API ---------------------------------------------------------------
  class AuthError extends Error {}
  async function get(path) {
    const res = await fetch(API + path, {
      headers: { Authorization: "Bearer " + state.key },
      cache: "no-store",
    });
    if (res.status === 401 || res.status === 403) {
      let msg = res.status === 401 ? "the key was not accepted" : "this needs an admin key";
      try { msg = (await res.json()).error.message || msg; } catch (e) { /* keep msg */ }
      throw new AuthError(msg);
    }
    if (!res.ok) throw new Error(path + ": HTTP " + res.status);
    return res.json();
  }
  // The stats and routes endpoints are newer than the rest: a server without
  // them still gets a dashboard (no rates or latencies, no routes).
  async function getOptional(path, fallback) {
    try { return await get(path); } catch (e) {
      if (e instanceof AuthError) throw e;
      return fallback;
    }
  }

  // --- key handling ------------------------------------------------------
  function initKey() {
    const url = new URL(window.location.href);
    const fromUrl = url.searchParams.get("key");
    if (fromUrl) {
      localStorage.setItem(KEY_STORE, fromUrl);
      url.searchParams.delete("key");  // keep the secret out of history and screenshots
      window.history.replaceState(null, "", url.pathname + url.search + url.hash);
    }
    state.key = localStorage.getItem(KEY_STORE) || "";
  }
  function showLogin(message) {
    $("main").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    setConn("bad", "signed out");
    $("key-input").focus();
  }
  function showMain() {
    $("login").hidden = true;
    $("main").hidden = false;
  }
  function setConn(kind, text) {
    const c = $("conn");
    c.className = "conn conn-" + kind;
    c.textContent = text;
  }

  // Who leads, and which instance answers this dashboard (HA, docs/ha.md).
  function renderCluster(c) {
    const el = $("cluster");
    if (!c) { el.textContent = ""; return; }
    const n = (c.instances || []).length;
    const leader = c.leader ? c.leader.id : "none (election under way)";
    let text = "leader " + leader;
    if (n > 1) text += " · " + n + " instances · answered by " + c.self;
    if (c.store && !c.store.reachable) text += " · store unreachable: serving the last known state";
    el.textContent = text;
    el.dataset.leader = c.leader ? c.leader.id : "";
    el.className = "cluster " + (c.leader && (!c.store || c.store.reachable) ? "muted" : "warn");
  }

  // --- polling -----------------------------------------------------------
  async function poll() {
    if (state.paused || state.busy || !state.key) return;
    state.busy = true;
    try {
      const [gpus, nodes, deployments, replicas, queues, tenants, stats, routes, cluster] = await Promise.all([
        get("/gpus"), get("/nodes"), get("/deployments"), get("/replicas"), get("/queues"),
        get("/tenants"), getOptional("/stats", { deployments: [], tenants: [] }),
        getOptional("/routes", { items: [] }), getOptional("/cluster", null),
      ]);
      renderCluster(cluster);
      pollAlerts();  // not awaited: a slow Prometheus must not hold the poll
      await pollEvents();
      const data = {
        gpus: gpus.items, nodes: nodes.items, deployments: deployments.items,
        replicas: replicas.items, queues: queues.items, tenants: tenants.items, stats,
        routes: routes.items,
      };
      state.data = data;
      state.polls++;
      showMain();
      render(data);
      setConn("ok", "live");
      $("updated").textContent = "updated " + new Date().toLocaleTimeString(undefined, { hour12: false });
    } catch (e) {
      if (e instanceof AuthError) {
        showLogin(e.message);
      } else {
        setConn("bad", "unreachable");
        $("updated").textContent = String(e.message || e);
      }
    } finally {
      state.busy = false;
    }
  }

  async function pollEvents() {
    const first = state.eventSince === 0;
    const q = first ? "?limit=100" : "?limit=200&since=" + state.eventSince;
    const items = (await get("/events" + q)).items;  // newest first
    const fresh = [];
    for (const e of items) {
      if (state.eventIds.has(e.id)) continue;
      state.eventIds.add(e.id);
      fresh.push(e);
      state.eventSince = Math.max(state.eventSince, e.timeMicros);
    }
    if (fresh.length === 0) return;
    fresh.sort((a, b) => b.timeMicros - a.timeMicros || b.id - a.id);
    for (const e of fresh) e.fresh = !first;
    state.events = fresh.concat(state.events).slice(0, MAX_EVENTS);
    state.eventIds = new Set(state.events.map((e) => e.id));
    renderEvents();
  }

  // Firing alerts from the Prometheus of alerts.prometheus_url, with their
  // runbooks (docs/runbooks.md); the server bounds the call.
  async function pollAlerts() {
    if (state.alertsBusy || Date.now() - state.alertsAt < ALERTS_MS) return;
    state.alertsBusy = true;
    state.alertsAt = Date.now();
    try {
      const res = await fetch(API + "/alerts", {
        headers: { Authorization: "Bearer " + state.key }, cache: "no-store",
      });
      let body = null;
      try { body = await res.json(); } catch (e) { /* not JSON */ }
      if (res.ok && body) state.alerts = body;
      else state.alerts = { error: (body && body.error && body.error.message) || "HTTP " + res.status };
    } catch (e) {
      state.alerts = { error: String(e.message || e) };
    } finally {
      state.alertsBusy = false;
    }
    renderAlerts();
  }

  function renderAlerts() {
    const a = state.alerts;
    const list = $("alerts");
    const card = $("alerts-card");
    list.textContent = "";
    $("alerts-source").textContent = a && a.source ? "from " + a.source : "";
    card.dataset.firing = String(a && a.items ? a.items.length : 0);
    if (!a) return;
    if (a.error) {
      list.appendChild(el("li", "empty error", "Cannot read alerts: " + a.error));
      return;
    }
    if (a.configured === false) {
      list.appendChild(el("li", "empty", a.message || "No Prometheus configured (alerts.prometheus_url)."));
      return;
    }
    for (const al of a.items) {
      const li = el("li", "alert sev-" + (al.severity || "none"));
      li.dataset.alert = al.name;
      const top = el("div", "alert-top");
      top.append(el("span", "alert-sev", al.severity || "-"), el("span", "alert-name", al.name));
      const labels = Object.entries(al.labels || {}).filter(([k]) => k !== "severity")
        .map(([k, v]) => k + "=" + v).join(" ");
      if (labels) top.appendChild(el("span", "alert-labels muted", labels));
      if (al.activeAt) top.appendChild(el("span", "alert-since muted", "since " + clock(al.activeAt)));
      li.append(top, el("div", "alert-msg", al.summary || al.description || ""));
      if (al.runbookUrl) {
        const link = el("a", "alert-runbook", "runbook");
        link.href = al.runbookUrl;
        link.target = "_blank";
        link.rel = "noopener noreferrer";
        li.appendChild(link);
      }
      list.appendChild(li);
    }
    if (a.omitted > 0) list.appendChild(el("li", "empty muted", a.omitted + " more not listed"));
    if (!list.firstChild) list.appendChild(el("li", "empty", "No alert firing."));
  }

  // --- rendering ---------------------------------------------------------
  function tenantsOf(deployment, tenants) {
    return tenants.filter((t) => {
      const models = (t.spec && t.spec.models) || [];
      return models.length === 0 || models.includes(deployment);
    }).map((t) => t.metadata.name);
  }

  function render(d) {
    for (const dep of d.deployments) colorOf(dep.metadata.name);
    computeRates(d);
    renderTiles(d);
    renderGpuMap(d);
    renderDeployments(d);
    renderRoutes(d);
    renderTenants(d);
    updateCharts(d);
  }

  function renderTiles(d) {
    const gpus = d.gpus;
    const milli = gpus.reduce((s, g) => s + g.allocatedMilli, 0);
    const used = gpus.filter((g) => g.allocatedMilli > 0).length;
    $("t-gpus").textContent = gpus.length ? (milli / 1000).toFixed(2) + " / " + gpus.length : "0";
    $("t-gpus-sub").textContent = gpus.length ? used + " GPUs in use · " + pct(milli / (1000 * gpus.length)) + " of compute" : "no GPUs (CPU-only replicas)";
    const mem = gpus.reduce((s, g) => s + g.allocatedMemoryMiB, 0);
    const memTotal = gpus.reduce((s, g) => s + g.memoryMiB, 0);
    $("t-mem").textContent = memTotal ? gib(mem) : "–";
    $("t-mem-sub").textContent = memTotal ? "of " + gib(memTotal) + " · " + pct(mem / memTotal) : "";
    const ready = d.replicas.filter((r) => r.state === "ready" || r.state === "external").length;
    $("t-replicas").textContent = ready + " / " + d.replicas.length;
    const notReady = d.replicas.filter((r) => r.state !== "ready" && r.state !== "external");
    $("t-replicas-sub").textContent = notReady.length
      ? notReady.map((r) => r.name + " " + r.state).slice(0, 3).join(", ") : d.deployments.length + " deployments";
    const rps = totalRate(d);
    $("t-rps").textContent = num(rps, 1);
    const done = (d.stats.deployments || []).reduce((s, x) => s + x.completed, 0);
    const rej = (d.stats.deployments || []).reduce((s, x) => s + x.rejected, 0);
    $("t-rps-sub").textContent = num(done) + " completed · " + num(rej) + " rejected";
    const queued = d.queues.reduce((s, q) => s + q.queued, 0);
    const inflight = d.queues.reduce((s, q) => s + q.inFlight, 0);
    $("t-queue").textContent = queued + " · " + inflight;
    $("t-queue-sub").textContent = d.queues.length + " queues";
  }

  function segment(bar, fraction, color, label, title, attrs) {
    const s = el("div", "seg", label);
    s.style.width = (Math.max(0, Math.min(1, fraction)) * 100).toFixed(3) + "%";
    s.style.background = color;
    s.title = title;
    for (const [k, v] of Object.entries(attrs || {})) s.dataset[k] = v;
    bar.appendChild(s);
    return s;
  }

  function renderGpuMap(d) {
    const root = $("gpumap");
    root.textContent = "";
    const legend = $("legend");
    legend.textContent = "";
    for (const dep of d.deployments) {
      const name = dep.metadata.name;
      const item = el("span");
      const sw = el("i", "swatch");
      sw.style.background = colorOf(name);
      item.append(sw, name);
      legend.appendChild(item);
    }
    if (d.nodes.length === 0) {
      root.appendChild(el("div", "empty", "No GPUs: replicas run CPU-only (no inventory declared and no NVML GPUs found)."));
      return;
    }
    const byNode = new Map();
    for (const g of d.gpus) {
      if (!byNode.has(g.node)) byNode.set(g.node, []);
      byNode.get(g.node).push(g);
    }
    for (const n of d.nodes) {
      const node = el("div", "node");
      node.dataset.node = n.name;
      const head = el("div", "node-head");
      const name = el("span", "node-name", n.name);
      const info = el("span", "muted",
        `${n.gpus} × ${n.gpuModel}${n.simulated ? " (declared)" : ""} · CPU ${num((n.cpuMilli - (n.cpuFreeMilli ?? n.cpuMilli)) / 1000, 1)}/${num(n.cpuMilli / 1000)} · memory ${gib(n.memoryMiB - (n.memoryFreeMiB ?? n.memoryMiB))}/${gib(n.memoryMiB)}`);
      head.append(name, info);
      // Capacity on demand: a pool node coming, going or being emptied.
      if (n.capacityState && n.capacityState !== "up") {
        node.classList.add("cap-" + n.capacityState);
        node.dataset.capacity = n.capacityState;
        const words = {
          powered_down: "powered down (capacity)", powering_up: "coming: powering up",
          powering_down: "going: given back", failed: "failed to come up",
          consolidating: "going: replicas moving off",
        };
        name.appendChild(el("span", "chip cap", (n.pool ? n.pool + " · " : "") + (words[n.capacityState] || n.capacityState)));
      } else if (n.pool) {
        name.appendChild(el("span", "chip cap", n.pool));
      }
      node.appendChild(head);
      const grid = el("div", "gpus");
      for (const g of byNode.get(n.name) || []) grid.appendChild(renderGpu(g, d));
      node.appendChild(grid);
      root.appendChild(node);
    }
  }

  function renderGpu(g, d) {
    const box = el("div", "gpu" + (g.healthy ? "" : " unhealthy"));
    box.dataset.gpu = g.node + "/" + g.index;
    const head = el("div", "gpu-head");
    const left = el("span");
    const dot = el("i", "dot" + (g.healthy ? "" : " bad"));
    dot.title = g.healthy ? "healthy" : "unhealthy";
    const b = el("b", null, "GPU " + g.index);
    left.append(dot, b, " ", g.model);
    const util = g.utilizationPct !== undefined ? " · util " + g.utilizationPct + "%" : "";
    head.append(left, el("span", "muted", gib(g.memoryMiB) + util));
    box.appendChild(head);

    box.appendChild(barLabel("compute", g.allocatedMilli + "m / 1000m"));
    const compute = el("div", "bar");
    const memLabelText = gib(g.allocatedMemoryMiB) + " / " + gib(g.memoryMiB) +
      (g.memoryUsedMiB !== undefined ? " (NVML used " + gib(g.memoryUsedMiB) + ")" : "");
    const memory = el("div", "bar thin");
    for (const r of g.replicas) {
      const tenants = tenantsOf(r.deployment, d.tenants);
      const who = tenants.length ? " · tenants: " + tenants.join(", ") : "";
      const what = r.mig ? "MIG " + r.mig : r.milli >= 1000 ? "whole GPU" : r.milli + "m";
      const title = `${r.name} (${r.deployment}${who}): ${what}, ${gib(r.memoryMiB)}`;
      const label = r.deployment + (tenants.length === 1 ? " · " + tenants[0] : "") + " " + (r.mig || (r.milli >= 1000 ? "" : r.milli + "m"));
      const attrs = { replica: r.name, deployment: r.deployment };
      const s = segment(compute, r.milli / 1000, colorOf(r.deployment), label.trim(), title, attrs);
      if (r.mig) s.classList.add("mig");
      segment(memory, g.memoryMiB ? r.memoryMiB / g.memoryMiB : 0, colorOf(r.deployment), "", title, attrs);
    }
    if (g.replicas.length === 0) compute.title = "free";
    box.appendChild(compute);
    box.appendChild(barLabel("memory", memLabelText));
    box.appendChild(memory);
    return box;
  }

  function barLabel(what, value) {
    const l = el("div", "bar-label");
    l.append(el("span", null, what), el("span", null, value));
    return l;
  }

  function statsOf(d, name) {
    return (d.stats.deployments || []).find((s) => s.deployment === name);
  }

  function resourcesText(spec) {
    const r = (spec && spec.resources) || {};
    if (r.whole !== undefined) return r.whole + " whole GPU" + (r.whole === 1 ? "" : "s");
    if (r.fraction) return r.fraction.milli + "m · " + r.fraction.memory;
    if (r.mig) return "MIG " + r.mig;
    return "CPU only";
  }

  // One row across the whole table, saying it is empty.
  function emptyRow(body, text) {
    const tr = el("tr");
    const td = el("td", "empty", text);
    td.colSpan = body.parentElement.tHead.rows[0].cells.length;
    tr.appendChild(td);
    body.appendChild(tr);
  }

  function renderDeployments(d) {
    const body = $("deployments").tBodies[0];
    body.textContent = "";
    if (d.deployments.length === 0) emptyRow(body, "No deployments. Apply one: gpusched apply -f manifest.yaml");
    for (const dep of d.deployments) {
      const name = dep.metadata.name;
      const st = dep.status || {};
      const s = statsOf(d, name);
      const tr = el("tr");
      tr.dataset.deployment = name;
      const nameCell = el("td");
      const sw = el("i", "swatch");
      sw.style.background = colorOf(name);
      nameCell.append(sw, " ", el("b", null, name));
      const engine = dep.spec && dep.spec.engine ? dep.spec.engine.template : "";
      nameCell.appendChild(el("div", "sub", "model " + (dep.spec ? dep.spec.model : "") + " · " + engine + (st.deleting ? " · deleting" : "")));
      if (st.message) nameCell.appendChild(el("div", "sub", st.message));
      const reps = el("td");
      reps.appendChild(el("div", "sub", (st.readyReplicas ?? 0) + " ready of " + (st.replicas ?? 0)));
      const chips = el("div", "chips");
      for (const r of st.replicaStatus || []) {
        const gpus = (r.gpuShare || []).map((x) => x.mig ? x.gpu + "(" + x.mig + ")" : x.milli >= 1000 ? String(x.gpu) : x.gpu + "(" + x.milli + "m)");
        const c = el("span", "chip st-" + r.state, r.name + " " + r.state);
        c.title = [r.node && "node " + r.node, gpus.length && "GPUs " + gpus.join(","),
          r.endpoint, r.restarts ? r.restarts + " restarts" : "", r.message].filter(Boolean).join(" · ");
        c.dataset.replica = r.name;
        c.dataset.state = r.state;
        chips.appendChild(c);
      }
      reps.appendChild(chips);
      const cells = [
        nameCell, el("td", null, resourcesText(dep.spec)), reps,
        el("td", "num", num(st.queued)), el("td", "num", num(st.inFlight)),
        el("td", "num rps", s ? num(s.requestsPerSecond, 1) : "–"),
        el("td", "num", s ? secs(s.ttftSeconds.p50) + " · " + secs(s.ttftSeconds.p90) : "–"),
        el("td", "num", s ? secs(s.e2eSeconds.p50) + " · " + secs(s.e2eSeconds.p90) : "–"),
        el("td", "num done", s ? num(s.completed) : "0"),
      ];
      tr.append(...cells);
      body.appendChild(tr);
    }
  }

  // A rollout's analysis figures for one version: requests, error rate and
  // the median and analysis percentile of TTFT.
  function figuresText(who, f, pct) {
    if (!f) return who + ": –";
    return `${who}: ${num(f.requests)} req · ${num(100 * f.errorRate, 2)}% errors · ` +
      `TTFT median ${num(1000 * (f.ttftMedianSeconds || 0))} ms, p${pct || 95} ${num(1000 * f.ttftSeconds)} ms · ` +
      `e2e median ${num(1000 * (f.e2eMedianSeconds || 0))} ms`;
  }

  const checkLabels = { ttft: "TTFT", e2e: "end-to-end", errors: "errors vs stable",
    errorRateCap: "error-rate cap", ttftCap: "TTFT cap", e2eCap: "end-to-end cap", slo: "SLO attainment" };

  function pValue(p) { return p === null || p === undefined ? "" : ` · p ${p < 0.001 ? p.toExponential(1) : num(p, 3)}`; }
  function times(x) { return x === null || x === undefined ? "∞" : num(x, 2) + "×"; }

  // One check of the analysis, with the numbers behind its verdict (the
  // server's why says the same in words; these are the figures).
  function checkLine(c, a) {
    const line = el("div", "check sub");
    line.dataset.check = c.name;
    line.dataset.verdict = c.verdict;
    const v = el("span", "chip v-" + c.verdict, c.verdict);
    line.append(v, " ", el("b", null, checkLabels[c.name] || c.name), " ");
    let text;
    if (c.verdict === "inconclusive") {
      text = c.why;
    } else if (c.test === "mann-whitney-u") {
      text = `p${a.percentile || 95} ${num(1000 * c.canary)} vs ${num(1000 * c.stable)} ms = ${times(c.effect)} ` +
        `(max ${times(c.threshold)}, slack ${num(c.slackMs)} ms) · medians ${num(1000 * c.canaryMedian)} vs ` +
        `${num(1000 * c.stableMedian)} ms · Mann-Whitney${pValue(c.pValue)} · n ${num(c.canarySamples)}/${num(c.stableSamples)}`;
    } else if (c.test === "cap") {
      text = `p${a.percentile || 95} ${num(1000 * c.canary)} ms (cap ${num(1000 * c.threshold)} ms) · n ${num(c.canarySamples)}`;
    } else if (c.name === "slo") {
      text = `${num(100 * c.canary, 1)}% (min ${num(100 * c.threshold, 1)}%) · binomial${pValue(c.pValue)} · n ${num(c.canarySamples)}`;
    } else {
      const against = c.name === "errors" ? ` vs ${num(100 * c.stable, 2)}% = ${times(c.effect)} (max ${times(c.threshold)})`
        : ` (cap ${num(100 * c.threshold, 2)}%)`;
      text = `${num(100 * c.canary, 2)}%${against} · ${c.test === "fisher-exact" ? "Fisher" : "binomial"}${pValue(c.pValue)}` +
        ` · n ${num(c.canarySamples)}/${num(c.stableSamples)}`;
    }
    line.append(text);
    return line;
  }

  function rolloutCells(ro) {
    if (!ro) return [el("td", "muted", "none"), el("td", "muted", "–")];
    const phase = el("td");
    const chip = el("span", "chip ph-" + ro.phase, ro.phase.replace(/_/g, " "));
    chip.dataset.phase = ro.phase;
    phase.append(chip, " ", `step ${ro.step} of ${(ro.steps || []).length}`);
    phase.appendChild(el("div", "sub", "steps " + (ro.steps || []).map((w) => w + "%").join(" → ")));
    const next = typeof ro.nextStepInSeconds === "number" ? ` · next in ${num(ro.nextStepInSeconds)} s` : "";
    const baseline = ro.baseline ? ` · baseline ${ro.baseline} (the analysis's reference)` : "";
    phase.appendChild(el("div", "sub", `canary ${ro.canary} at ${ro.canaryWeight}% · stable ${ro.stable}${baseline}${next}`));
    if (ro.reason) phase.appendChild(el("div", "sub", ro.reason));
    const a = ro.analysis;
    const analysis = el("td");
    if (!a) {
      analysis.textContent = "–";
    } else {
      const v = el("span", "chip v-" + a.verdict, a.verdict);
      v.dataset.verdict = a.verdict;
      analysis.appendChild(v);
      const checks = a.checks || [];
      // Waiting for data, or every check at once: the why in words.
      if (a.verdict === "inconclusive" || checks.length === 0) {
        analysis.append(" ", el("span", "sub", a.why || "not evaluated yet"));
      }
      if (typeof a.confidence === "number") {
        analysis.append(" ", el("span", "sub", `confidence ${num(100 * a.confidence, 2)}% · ≥ ${num(a.minSamples)} samples a version`));
      }
      for (const c of checks) analysis.appendChild(checkLine(c, a));
      analysis.append(el("div", "sub", figuresText("canary", a.canary, a.percentile)),
        el("div", "sub", figuresText(ro.baseline ? "baseline" : "stable", a.stable, a.percentile)));
    }
    return [phase, analysis];
  }

  function renderRoutes(d) {
    const body = $("routes").tBodies[0];
    body.textContent = "";
    if (d.routes.length === 0) emptyRow(body, "No routes. Apply a ModelRoute to split a model name over versions.");
    for (const r of d.routes) {
      const tr = el("tr");
      tr.dataset.route = r.name;
      const nameCell = el("td");
      nameCell.append(el("b", null, r.name), el("div", "sub", "generation " + r.generation));
      const split = el("td", "route-split");
      const bar = el("div", "bar");
      for (const t of r.targets || []) {
        if (!t.weight) continue;  // a 0% version would still draw its padding
        const label = `${t.version} (${t.deployment}) ${t.weight}%`;
        segment(bar, t.weight / 100, colorOf(t.deployment), label, label,
          { deployment: t.deployment, version: t.version, weight: t.weight });
      }
      split.appendChild(bar);
      tr.append(nameCell, split, el("td", null, r.sticky), ...rolloutCells(r.rollout));
      body.appendChild(tr);
    }
  }

  function limitsText(l) {
    if (!l) return "–";
    const parts = [];
    if (l.requestsPerMinute) parts.push(num(l.requestsPerMinute) + " req/min");
    if (l.tokensPerMinute) parts.push(num(l.tokensPerMinute) + " tok/min");
    if (l.maxQueued) parts.push("≤" + l.maxQueued + " queued");
    return parts.length ? parts.join(" · ") : "none";
  }

  function renderTenants(d) {
    const body = $("tenants").tBodies[0];
    body.textContent = "";
    const usage = new Map((d.stats.tenants || []).map((t) => [t.tenant, t]));
    if (d.tenants.length === 0) emptyRow(body, "No tenants.");
    for (const t of d.tenants) {
      const name = t.metadata.name;
      const spec = t.spec || {};
      const u = usage.get(name);
      const q = spec.quota || {};
      const quota = q.gpus || q.limit
        ? `${q.gpus} guaranteed${q.limit ? " · limit " + q.limit : ""} · over-quota weight ${q.overQuotaWeight}`
        : "none";
      const tr = el("tr");
      tr.dataset.tenant = name;
      tr.append(
        el("td", null, name),
        el("td", null, (spec.models || []).length ? spec.models.join(", ") : "all"),
        el("td", null, spec.priorityClass || ""),
        el("td", "num", num(spec.weight, 1)),
        el("td", null, quota),
        el("td", null, limitsText(spec.limits)),
        el("td", "num", u ? num(u.requests) : "0"),
        el("td", "num", u ? num(u.requestsPerSecond, 1) : "0.0"),
        el("td", "num", u ? num(u.inputTokens) + " · " + num(u.outputTokens) : "0 · 0"),
        el("td", "num", u ? num(u.rejected) : "0"),
        el("td", "num", t.status
          ? `${(t.status.gpuSeconds / 3600).toFixed(3)} · $${t.status.cost.toFixed(2)}`
          : "-"),
      );
      body.appendChild(tr);
    }
  }

  function eventClass(kind) {
    if (/unschedulable|unhealthy|exited|failed|rejected|orphan/.test(kind)) return "k-bad";
    if (/scaled|draining|configured/.test(kind)) return "k-scale";
    if (/ready/.test(kind)) return "k-ready";
    if (/created|applied|placed|started/.test(kind)) return "k-created";
    return "";
  }

  function renderEvents() {
    const select = $("event-kind");
    for (const e of state.events) {
      if (!state.eventKinds.has(e.kind)) {
        state.eventKinds.add(e.kind);
        const kinds = [...state.eventKinds].sort();
        const keep = select.value;
        select.textContent = "";
        select.appendChild(new Option("all kinds", ""));
        for (const k of kinds) select.appendChild(new Option(k, k));
        select.value = keep;
      }
    }
    const filter = select.value;
    const list = $("events");
    list.textContent = "";
    for (const e of state.events) {
      if (filter && e.kind !== filter) continue;
      const li = el("li", "event" + (e.fresh ? " fresh" : ""));
      li.dataset.kind = e.kind;
      const top = el("div", "event-top");
      top.append(el("span", "event-time", clock(e.time)), el("span", "event-kind " + eventClass(e.kind), e.kind));
      if (e.deployment) top.appendChild(el("span", "event-dep", e.deployment));
      if (e.tenant) top.appendChild(el("span", "event-dep muted", "tenant " + e.tenant));
      li.append(top, el("div", "event-msg", e.message));
      list.appendChild(li);
      e.fresh = false;
    }
    if (!list.firstChild) list.appendChild(el("li", "empty", "No events" + (filter ? " of kind " + filter : "") + " yet."));
  }

  // --- charts (uPlot) ----------------------------------------------------
  function totalRate(d) {
    let sum = 0;
    for (const s of d.stats.deployments || []) sum += s.rate || 0;
    return sum;
  }

  const CHARTS = {
    "chart-rps": (s) => s.rate,
    "chart-ttft": (s) => s.ttftSeconds.p50,
    "chart-e2e": (s) => s.e2eSeconds.p90,
    "chart-queue": (s, q) => q ? q.queued + q.inFlight : null,
  };

  // Throughput from the counters' deltas: exact per interval, no lag.
  function computeRates(d) {
    const now = Date.now() / 1000;
    const dt = state.lastPoll ? now - state.lastPoll : 0;
    state.lastPoll = now;
    d.now = now;
    for (const s of d.stats.deployments || []) {
      const before = state.lastCompleted.get(s.deployment);
      s.rate = before === undefined || dt <= 0 ? 0 : Math.max(0, s.completed - before) / dt;
      state.lastCompleted.set(s.deployment, s.completed);
    }
  }

  function updateCharts(d) {
    const now = d.now;
    const names = d.deployments.map((x) => x.metadata.name);
    const h = state.history;
    h.t.push(now);
    const drop = h.t.length > HISTORY ? h.t.length - HISTORY : 0;
    if (drop) h.t.splice(0, drop);
    for (const id of Object.keys(CHARTS)) {
      if (!h.series.has(id)) h.series.set(id, new Map());
      const per = h.series.get(id);
      for (const name of names) {
        if (!per.has(name)) per.set(name, new Array(h.t.length - 1 + drop).fill(null));
      }
      for (const [name, values] of per) {
        const s = statsOf(d, name);
        const q = d.queues.find((x) => x.deployment === name);
        let v = null;
        if (names.includes(name)) v = s ? CHARTS[id](s, q) : id === "chart-rps" ? 0 : CHARTS[id]({ ttftSeconds: {}, e2eSeconds: {} }, q);
        values.push(v === undefined ? null : v);
        if (drop) values.splice(0, drop);
        // A deleted deployment leaves the chart once its line has scrolled out.
        if (!names.includes(name) && values.every((x) => x === null)) per.delete(name);
      }
      drawChart(id, per);
    }
  }

  function drawChart(id, per) {
    const box = $(id);
    const names = [...per.keys()];
    const data = [state.history.t.slice(), ...names.map((n) => per.get(n).slice())];
    let c = state.charts[id];
    const width = Math.max(200, box.clientWidth);
    if (!c || c.names.join("\n") !== names.join("\n")) {
      if (c) c.plot.destroy();
      box.textContent = "";
      box.appendChild(el("div", "chart-title", box.dataset.title));
      const opts = {
        width, height: 170,
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max || 0, id === "chart-rps" || id === "chart-queue" ? 1 : 0.01) * 1.1] } },
        axes: [{ stroke: "#6b7685", grid: { stroke: "#eef1f5" }, ticks: { stroke: "#e2e6ec" } },
          { stroke: "#6b7685", grid: { stroke: "#eef1f5" }, ticks: { stroke: "#e2e6ec" }, size: 62,
            values: id === "chart-ttft" || id === "chart-e2e" ? (u, v) => v.map((x) => secs(x)) : undefined }],
        series: [{}, ...names.map((n) => ({ label: n, stroke: colorOf(n), width: 2, spanGaps: false,
          value: (u, v) => v === null ? "–" : id === "chart-ttft" || id === "chart-e2e" ? secs(v) : num(v, 1) }))],
      };
      c = { plot: new uPlot(opts, data, box), names, width };
      state.charts[id] = c;
    } else {
      if (c.width !== width) { c.plot.setSize({ width, height: 170 }); c.width = width; }
      c.plot.setData(data);
    }
    box.dataset.points = String(state.history.t.length);
    const last = data.slice(1).map((v) => v[v.length - 1]).filter((v) => v !== null);
    box.dataset.last = String(last.reduce((a, b) => a + b, 0));
  }

  // --- wiring ------------------------------------------------------------
  function start() {
    initKey();
    $("login-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const k = $("key-input").value.trim();
      if (!k) return;
      localStorage.setItem(KEY_STORE, k);
      state.key = k;
      $("key-input").value = "";
      setConn("wait", "connecting");
      poll();
    });
    $("signout").addEventListener("click", () => {
      localStorage.removeItem(KEY_STORE);
      state.key = "";
      showLogin("");
    });
    $("pause").addEventListener("click", () => {
      state.paused = !state.paused;
      $("pause").textContent = state.paused ? "Resume" : "Pause";
      setConn(state.paused ? "wait" : "ok", state.paused ? "paused" : "live");
    });
    $("event-kind").addEventListener("change", renderEvents);
    if (!state.key) showLogin("");
    else poll();
    setInterval(poll, POLL_MS);
  }
  start();
})();
