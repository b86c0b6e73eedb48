// The person's chat page: history from GET …/messages, new turns by POST …/turns, and the
// conversation live from GET …/stream (server-sent events). Every text is written with
// textContent: nothing a message holds is ever read as markup.
(function () {
  "use strict";
  var root = document.getElementById("chat");
  if (!root) { return; }
  var base = "/v1/delegates/" + encodeURIComponent(root.getAttribute("data-delegate")) +
    "/conversation";
  var list = document.getElementById("messages");
  var empty = document.getElementById("empty");
  var earlier = document.getElementById("earlier");
  var statusLine = document.getElementById("status");
  var form = document.getElementById("compose");
  var box = document.getElementById("text");
  var sendError = document.getElementById("send-error");
  var replying = document.getElementById("replying");
  var replyingText = document.getElementById("replying-text");
  var replyCancel = document.getElementById("reply-cancel");
  var byId = {};      // message id -> its <li>
  var questions = {}; // question id -> its <li>
  var answered = {};  // question id -> true once a message of the person answers it
  var replyTo = null; // the question the next message answers
  var drafts = {};    // turn id -> {item, part, text}: a reply being written
  var before = null;  // cursor of the page before the oldest shown
  var STATUS = { idle: "Idle", answering: "Writing a reply…", busy: "Busy with background work" };
  var STATES = {
    queued: "waiting", running: "being answered", answered: "answered", failed: "failed"
  };

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = text; }
    return node;
  }

  function when(iso) {
    var date = new Date(iso);
    return isNaN(date.getTime()) ? "" : date.toLocaleString([], {
      month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
    });
  }

  function atBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  }

  function scrollDown(force) {
    if (force) { window.scrollTo(0, document.body.scrollHeight); }
  }

  function describe(item, message) {
    var meta = item.querySelector(".meta");
    var parts = [];
    if (message.kind === "question") {
      parts.push(answered[message.question.id] ? "a question · answered" : "a question for you");
    } else if (message.proactive) {
      parts.push("sent on its own");
    }
    if (message.in_reply_to) { parts.push("your answer to a question"); }
    if (message.role === "person" && message.state) { parts.push(STATES[message.state] || ""); }
    if (message.interrupted && message.state !== "answered") {
      parts.push("paused, will resume");
    }
    var at = when(message.at);
    meta.textContent = [at].concat(parts).filter(Boolean).join(" · ");
    var reason = item.querySelector(".reason");
    if (message.state === "failed" && message.reason) {
      if (!reason) { reason = el("p", "reason"); item.appendChild(reason); }
      reason.textContent = message.reason;
    } else if (reason) {
      reason.remove();
    }
    item.setAttribute("data-state", message.state || "");
  }

  function build(message) {
    var item = el("li", "message " + (message.role === "person" ? "person" : "assistant"));
    if (message.proactive) { item.className += " proactive"; }
    if (message.kind === "question" || message.kind === "notice") {
      item.className += " " + message.kind;
    }
    item.setAttribute("data-id", message.id);
    if (message.turn_id) { item.setAttribute("data-turn", message.turn_id); }
    var who = el("span", "who", message.role === "person" ? "You" : "Assistant");
    item.appendChild(who);
    if (message.kind === "question" && message.question) {
      var about = message.question.about;
      item.appendChild(el("p", "about", about ? "Question about " + about : "Question"));
    }
    if (message.kind === "notice" && message.subject) {
      item.appendChild(el("p", "subject", message.subject));
    }
    item.appendChild(el("p", "text", message.text));
    item.appendChild(el("p", "meta"));
    if (message.kind === "question" && message.question && message.question.id) {
      var id = message.question.id;
      var answer = el("button", "answer", "Answer");
      answer.type = "button";
      answer.setAttribute("aria-label", "Answer this question");
      answer.addEventListener("click", function () { startReply(id, message.text); });
      item.appendChild(answer);
      questions[id] = item;
      item.setAttribute("data-question", id);
      if (answered[id]) {
        item.setAttribute("data-answered", "true");
        answer.textContent = "Answer again";
      }
    }
    if (message.in_reply_to) {
      item.setAttribute("data-reply", message.in_reply_to);
      markAnswered(message.in_reply_to);
    }
    describe(item, message);
    return item;
  }

  function markAnswered(questionId) {
    answered[questionId] = true;
    var asked = questions[questionId];
    if (!asked) { return; }
    asked.setAttribute("data-answered", "true");
    asked.querySelector(".answer").textContent = "Answer again";
    var meta = asked.querySelector(".meta");
    if (meta && meta.textContent.indexOf("answered") < 0) {
      meta.textContent = meta.textContent.replace("a question for you", "a question · answered");
    }
  }

  function startReply(questionId, text) {
    replyTo = questionId;
    replyingText.textContent = text.length > 120 ? text.slice(0, 119) + "…" : text;
    replying.hidden = false;
    box.focus();
  }

  function stopReply() {
    replyTo = null;
    replying.hidden = true;
    replyingText.textContent = "";
  }

  function show(message, where) {
    var found = byId[message.id];
    if (found) {
      found.querySelector(".text").textContent = message.text;
      describe(found, message);
      return found;
    }
    var item = build(message);
    byId[message.id] = item;
    if (where === "top") {
      list.insertBefore(item, list.firstChild);
    } else {
      var draft = message.turn_id && drafts[message.turn_id];
      if (message.role === "assistant" && draft) {
        list.replaceChild(item, draft.item);
        delete drafts[message.turn_id];
      } else {
        list.appendChild(item);
      }
    }
    empty.hidden = true;
    return item;
  }

  function turnChanged(change) {
    var item = byId[change.turn_id];
    if (!item) { return; }
    describe(item, {
      role: "person", state: change.state, reason: change.reason,
      interrupted: change.interrupted, at: item.getAttribute("data-at"),
      in_reply_to: item.getAttribute("data-reply")
    });
    if (change.state === "failed" || change.state === "answered") { dropDraft(change.turn_id); }
  }

  function dropDraft(turnId) {
    var draft = drafts[turnId];
    if (draft) { draft.item.remove(); delete drafts[turnId]; }
  }

  function delta(event) {
    var follow = atBottom();
    var draft = drafts[event.turn_id];
    if (!draft) {
      var item = el("li", "message assistant draft");
      item.setAttribute("aria-busy", "true");
      item.appendChild(el("span", "who", "Assistant"));
      item.appendChild(el("p", "text", ""));
      item.appendChild(el("p", "meta", "writing…"));
      list.appendChild(item);
      draft = drafts[event.turn_id] = { item: item, part: event.part, text: "" };
      empty.hidden = true;
    }
    if (event.part !== draft.part) {  // a new model call writes the reply again
      draft.part = event.part;
      draft.text = "";
    }
    draft.text += event.text;
    draft.item.querySelector(".text").textContent = draft.text;
    scrollDown(follow);
  }

  function aborted(event) {
    var draft = drafts[event.turn_id];
    if (!draft) { return; }
    draft.item.querySelector(".meta").textContent =
      event.then === "resumed" ? "interrupted · the reply will be written again" : "stopped";
    draft.item.removeAttribute("aria-busy");
    draft.part = null;
    draft.text = "";
  }

  function status(state) {
    statusLine.textContent = STATUS[state] || STATUS.idle;
    statusLine.setAttribute("data-state", state);
  }

  function loadEarlier(first) {
    var url = base + "/messages" + (before ? "?before=" + encodeURIComponent(before) : "");
    return fetch(url, { credentials: "same-origin" }).then(function (response) {
      if (response.status === 401) { window.location.reload(); return null; }
      return response.ok ? response.json() : null;
    }).then(function (page) {
      if (!page) { return; }
      var keep = document.body.scrollHeight - window.scrollY;
      for (var i = page.items.length - 1; i >= 0; i -= 1) {
        var item = show(page.items[i], "top");
        item.setAttribute("data-at", page.items[i].at);
      }
      before = page.before;
      earlier.hidden = !before;
      if (first) {
        empty.hidden = list.children.length > 0;
        scrollDown(true);
      } else {
        window.scrollTo(0, document.body.scrollHeight - keep);
      }
    });
  }

  function parse(event) {
    try { return JSON.parse(event.data); } catch (error) { return null; }
  }

  function connect() {
    var source = new EventSource(base + "/stream");
    source.addEventListener("message", function (event) {
      var message = parse(event);
      if (!message) { return; }
      var follow = atBottom() || message.role === "person";
      show(message).setAttribute("data-at", message.at);
      scrollDown(follow);
    });
    source.addEventListener("turn", function (event) {
      var change = parse(event);
      if (change) { turnChanged(change); }
    });
    source.addEventListener("delta", function (event) {
      var piece = parse(event);
      if (piece) { delta(piece); }
    });
    source.addEventListener("aborted", function (event) {
      var piece = parse(event);
      if (piece) { aborted(piece); }
    });
    source.addEventListener("status", function (event) {
      var state = parse(event);
      if (state) { status(state.state); }
    });
    source.addEventListener("reset", function () { window.location.reload(); });
  }

  function newKey() {
    if (window.crypto && window.crypto.randomUUID) { return window.crypto.randomUUID(); }
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) {
      return ("0" + b.toString(16)).slice(-2);
    }).join("");
  }

  function send(text, key, attempt, answering) {
    return fetch(base + "/turns", {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        "Idempotency-Key": key,
        "X-Inner-Plane-UI": "1"
      },
      body: JSON.stringify(answering ?
        { text: text, channel: "app", in_reply_to: answering } : { text: text, channel: "app" })
    }).then(function (response) {
      return response.json().then(function (body) { return [response, body]; });
    }).catch(function (error) {
      if (attempt < 3) {  // the same key: a retry is the same turn, never a second one
        return new Promise(function (resolve) { setTimeout(resolve, 1000 * (attempt + 1)); })
          .then(function () { return send(text, key, attempt + 1, answering); });
      }
      throw error;
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var text = box.value;
    if (!text.trim()) { return; }
    sendError.hidden = true;
    box.disabled = true;
    var answering = replyTo;
    send(text, newKey(), 0, answering).then(function (answer) {
      var response = answer[0], body = answer[1];
      if (response.status === 202) {
        box.value = "";
        if (answering === replyTo) { stopReply(); }
        var item = show({
          id: body.turn_id, role: "person", kind: "message", text: text,
          turn_id: body.turn_id, in_reply_to: answering, state: body.state,
          at: new Date().toISOString()
        });
        item.setAttribute("data-at", new Date().toISOString());
        scrollDown(true);
      } else {
        sendError.textContent = body.message || "Your message was not sent.";
        sendError.hidden = false;
      }
    }).catch(function () {
      sendError.textContent = "Your message was not sent: the connection failed. Try again.";
      sendError.hidden = false;
    }).then(function () {
      box.disabled = false;
      box.focus();
    });
  });

  box.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    } else if (event.key === "Escape" && replyTo) {
      event.preventDefault();
      stopReply();
    }
  });

  replyCancel.addEventListener("click", function () { stopReply(); box.focus(); });

  earlier.addEventListener("click", function () { loadEarlier(false); });

  loadEarlier(true).then(connect, connect);
  box.focus();
}());
