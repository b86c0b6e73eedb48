// inner-plane operator UI: follows the live feed (server-sent events) and runs operator
// actions. Every value from the journal is written with textContent, or arrives as HTML the
// server escaped; nothing here builds markup from strings.
"use strict";

(function () {
  const UI_HEADER = { "X-Inner-Plane-UI": "1", "Content-Type": "application/json" };

  function setStatus(state, text) {
    const el = document.getElementById("live-status");
    if (!el) return;
    el.dataset.state = state;
    el.textContent = text;
  }

  function follow(params, handlers) {
    const url = "/v1/events?" + new URLSearchParams(params).toString();
    const source = new EventSource(url);
    source.addEventListener("open", function () {
      setStatus("live", "live");
      if (handlers.open) handlers.open();
    });
    source.addEventListener("error", function () {
      setStatus("down", "reconnecting…");
    });
    source.addEventListener("reset", function () {
      window.location.reload();
    });
    for (const name of Object.keys(handlers)) {
      if (name !== "open") source.addEventListener(name, handlers[name]);
    }
    return source;
  }

  // --- the timeline's filter: entries of an unticked group are hidden (new ones too) ---
  function hiddenGroups() {
    const hidden = new Set();
    for (const box of document.querySelectorAll('#timeline-filter input[name="group"]')) {
      if (!box.checked) hidden.add(box.value);
    }
    return hidden;
  }

  function applyFilter(root) {
    const hidden = hiddenGroups();
    for (const item of root.querySelectorAll("li.entry")) {
      item.hidden = hidden.has(item.dataset.group);
    }
  }

  // --- the timeline: append new entries in order, as the server renders them ---
  function timeline(list) {
    const delegate = list.dataset.delegate;
    let last = Number(list.dataset.lastSeq || "0");
    // Quiet entries (signal arrivals and decisions) are fetched by time, and kept once each.
    let since = list.dataset.quietSince || "";
    let running = false;
    let again = false;

    async function fetchNew() {
      if (running) { again = true; return; }
      running = true;
      try {
        do {
          again = false;
          const asked = new Date().toISOString();
          const query = new URLSearchParams({ after: String(last) });
          if (since) query.set("since", since);
          const response = await fetch(
            "/ui/delegates/" + encodeURIComponent(delegate) + "/entries?" + query.toString(),
            { credentials: "same-origin" }
          );
          if (!response.ok) break;
          const holder = document.createElement("template");
          holder.innerHTML = await response.text(); // escaped by the server's templates
          const hidden = hiddenGroups();
          for (const item of holder.content.querySelectorAll("li.entry")) {
            const seq = Number(item.dataset.seq || "0");
            const key = item.dataset.key;
            if (item.dataset.seq) {
              if (seq <= last) continue;
              last = seq;
            } else if (list.querySelector('li.entry[data-key="' + CSS.escape(key) + '"]')) {
              continue;
            }
            item.hidden = hidden.has(item.dataset.group);
            list.appendChild(item);
          }
          // A little overlap (the clocks of browser and server differ); duplicates are skipped.
          since = new Date(Date.parse(asked) - 60000).toISOString();
          list.dataset.lastSeq = String(last);
          const empty = document.getElementById("empty");
          if (empty && list.children.length > 0) empty.remove();
        } while (again);
      } finally {
        running = false;
      }
    }

    function notice(event) {
      const record = (JSON.parse(event.data).data) || {};
      if (!record.type) return;
      const notices = document.getElementById("live-notices");
      const item = document.createElement("li");
      item.className = "notice";
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = "Inner Plane";
      const label = document.createElement("span");
      label.className = "label";
      label.textContent = record.type;
      const text = document.createElement("span");
      text.className = "summary";
      const payload = record.payload || {};
      text.textContent = String(payload.status || "") + (payload.error ? ": " + payload.error : "");
      item.append(badge, " ", label, " ", text);
      notices.prepend(item);
      while (notices.children.length > 20) notices.lastChild.remove();
    }

    follow(
      { delegate: delegate, topic: "timeline,live,signals" },
      { open: fetchNew, timeline: fetchNew, live: notice, signals: fetchNew }
    );
  }

  // --- the dashboard: refresh the overview rows when something changes (at most 1/s) ---
  function dashboard(body) {
    let timer = null;
    async function refresh() {
      timer = null;
      // The same page as shown: the search and the cursor of the page's address.
      const response = await fetch("/ui/overview" + window.location.search, { credentials: "same-origin" });
      if (!response.ok) return;
      const holder = document.createElement("template");
      holder.innerHTML = "<table><tbody>" + (await response.text()) + "</tbody></table>";
      body.replaceChildren(...holder.content.querySelectorAll("tbody > tr"));
    }
    function soon() { if (timer === null) timer = setTimeout(refresh, 1000); }
    follow({ topic: "signals,activations,user_turns" }, { signals: soon, activations: soon, user_turns: soon });
  }

  // --- operator actions ---
  function confirmForm(id) {
    return document.querySelector('form.confirm[data-for="' + CSS.escape(id) + '"]');
  }

  async function act(button) {
    const action = button.dataset.action;
    const id = button.dataset.signal || button.dataset.activation;
    const result = document.querySelector('.action-result[data-for="' + CSS.escape(id) + '"]');
    let url;
    let body = null;
    if (action === "dismiss-ask" || action === "dismiss-cancel") {
      // Dismissing is for good: it asks first, with the reason the history will keep.
      const form = confirmForm(id);
      if (!form) return;
      form.hidden = action === "dismiss-cancel";
      if (!form.hidden) form.querySelector('input[name="reason"]').focus();
      return;
    }
    if (action === "retry") url = "/v1/signals/" + id + "/retry";
    else if (action === "dismiss") {
      const form = confirmForm(id);
      const input = form ? form.querySelector('input[name="reason"]') : null;
      const reason = input ? input.value.trim() : "";
      if (!reason) {
        if (result) { result.textContent = "give a reason to dismiss"; result.dataset.ok = "false"; }
        if (input) input.focus();
        return;
      }
      url = "/v1/signals/" + id + "/dismiss";
      body = JSON.stringify({ reason: reason });
    } else if (action === "retry-dead") url = "/v1/activations/" + id + "/retry-dead";
    else return;
    button.disabled = true;
    const response = await fetch(url, {
      method: "POST", credentials: "same-origin", headers: UI_HEADER, body: body,
    });
    if (response.status === 401) {
      window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname));
      return;
    }
    let answer = {};
    try { answer = await response.json(); } catch (e) { answer = {}; }
    if (result) {
      result.textContent = response.ok
        ? (action === "dismiss" ? "dismissed" : "retried") + " by " + answer.operator
        : "refused: " + (answer.message || response.status);
      result.dataset.ok = String(response.ok);
    }
    const row = button.closest(".dead-signal");
    if (row && response.ok) {
      row.dataset.state = action === "dismiss" ? "dismissed" : "retried";
      for (const other of row.querySelectorAll("button, input")) other.disabled = true;
      const form = confirmForm(id);
      if (form) form.hidden = true;
    } else if (!response.ok) {
      button.disabled = false;
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    const list = document.getElementById("timeline");
    if (list) timeline(list);
    const rows = document.getElementById("overview-rows");
    if (rows) dashboard(rows);
    for (const button of document.querySelectorAll("button[data-action]")) {
      button.addEventListener("click", function (event) {
        event.preventDefault();
        act(button);
      });
    }
    for (const form of document.querySelectorAll("form.confirm")) {
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        const button = form.querySelector('button[data-action="dismiss"]');
        if (button) act(button);
      });
    }
    const filter = document.getElementById("timeline-filter");
    if (filter) {
      filter.addEventListener("change", function () { applyFilter(document); });
      applyFilter(document);
    }
  });
})();
