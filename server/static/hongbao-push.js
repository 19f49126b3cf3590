/*
 * hongbao-push.js: a browser client for the hongbao push channel (docs/architecture.md section 7).
 * Plain JavaScript, no build step, no dependencies; served by the server at GET /v1/ws/client.js.
 *
 *   const push = new HongbaoPush({
 *     url: "wss://example.com/v1/ws",              // default: this page's origin + /v1/ws
 *     token: () => fetchMyJwt(),                    // a JWT or a Promise of one, asked before every connect
 *     onEvent: (ev) => show(ev),                    // {event, data, offset, epoch, topic}: once each, in order
 *     onReset: () => reloadOverHttp(),              // the history was lost: reload state over HTTP
 *   });
 *   push.start();  push.subscribe("news");  push.close();
 *
 * Options `offset` and `epoch` resume from a cursor the page kept (e.g. in sessionStorage); the
 * others (pingIntervalMs, backoffBaseMs, openTimeoutMs, maxAuthFailures...) default as in the constructor.
 *
 * What it does (times are in milliseconds, as everywhere in JavaScript):
 * - token: new WebSocket(url, ["bearer", jwt]); the server echoes only "bearer".
 * - acks {"type":"ack","offset":n} after onEvent returned; dedupe by a high-water offset per stream
 *   (the user's, and one per topic), since the server sends each stream in offset order.
 * - resume: every connect asks for ?hello=1 (the server's first frame {"type":"hello","epoch"} names the
 *   stream's epoch); a reconnect carries ?offset=<last>&epoch=<epoch> (only ?epoch= before the first
 *   message); {"type":"reset"}, a hello or a message of
 *   another epoch calls onReset and starts the marks over in the new epoch.
 * - app ping {"type":"ping"} every pingIntervalMs; no message within pongTimeoutMs of a ping drops
 *   the socket and reconnects.
 * - reconnect with exponential backoff and full jitter (AWS Architecture Blog, "Exponential Backoff
 *   And Jitter", 2015): retry n waits random(0, min(backoffCapMs, backoffBaseMs * 2^n)). A failed
 *   connect (the socket errors or closes before it opens, or is not open within openTimeoutMs) is
 *   retried the same way as a dropped connection, whether or not the client was ever connected:
 *   a server that is down, restarting or busy is waited out.
 * - a browser cannot read a failed handshake's status (it sees 1006), so from the preflightAfter-th
 *   failed connect in a row on, each failure asks GET /v1/ws/preflight (same token, as an
 *   Authorization header; given up after openTimeoutMs): 401 counts as an auth failure, and
 *   maxAuthFailures of them with no connection opened in between stop the client
 *   (onStopped("unauthorized"): the token is refused); 403 stops it (onStopped("forbidden"): this
 *   Origin is refused); 503 waits at least its Retry-After; no answer (server down) just retries.
 *   The preflight is a fetch to the url's origin: from a page of another origin it needs CORS there,
 *   which the server does not send, so it counts as no answer and a refused token is retried.
 * - topics: subscribe()/unsubscribe(), sent again after every reconnect; `subscribed` holds the topics
 *   the server confirmed on the current connection (none while there is no connection).
 * - close 4001 (a newer connection of this user took over) stops the client (onStopped("replaced"));
 *   close 4003 (token expired) reconnects at once with a fresh token.
 * - onState(state, detail): "connecting", "open", "retrying" (detail: the reason), "stopped"
 *   (detail: as onStopped), for a UI. onStopped(reason): "unauthorized", "forbidden", "replaced",
 *   "closed" (close() was called), "cannot connect: <error name>" (a malformed url, or a token that
 *   is no subprotocol token), "onEvent failed: <error>"; nothing else stops the client.
 */
(function (global) {
  "use strict";

  const CLOSE_REPLACED = 4001, CLOSE_TOKEN_EXPIRED = 4003;

  /** Full-jitter backoff: milliseconds to wait before retry number `attempt` (0-based). */
  function backoffDelay(attempt, baseMs, capMs, random) {
    return random() * Math.min(capMs, baseMs * Math.pow(2, Math.min(attempt, 62)));
  }

  function defaultUrl() {
    const loc = global.location;
    return (loc.protocol === "https:" ? "wss://" : "ws://") + loc.host + "/v1/ws";
  }

  class HongbaoPush {
    constructor(options) {
      const o = Object.assign({
        url: null, offset: null, epoch: null, topics: [], pingIntervalMs: 30000, pongTimeoutMs: 10000,
        backoffBaseMs: 500, backoffCapMs: 30000, stableAfterMs: 10000, openTimeoutMs: 10000,
        maxAuthFailures: 3, preflightAfter: 3, random: Math.random,
        onEvent: () => {}, onReset: () => {}, onRetry: () => {}, onState: () => {}, onStopped: () => {},
      }, options);
      if (typeof o.token !== "function") throw new TypeError("options.token must be a function returning a JWT");
      this.options = o;
      this.url = o.url || defaultUrl();
      this.topics = new Set(o.topics);
      this.subscribed = new Set();  // confirmed by the server on the current connection
      this.epoch = o.epoch;
      this.marks = new Map();  // stream (null = the user's) -> {epoch, offset}
      if (o.offset !== null) this.marks.set(null, { epoch: o.epoch, offset: o.offset });
      this.stats = { connects: 0, events: 0, duplicates: 0, acks: 0, resets: 0, preflights: 0 };
      this._conn = null; this._timer = null; this._pingTimer = null;
      this._attempt = 0; this._failedConnects = 0; this._authFailures = 0;
      this._stopped = true;
    }

    /** The highest offset of the user's stream delivered in this epoch, or null. */
    get lastOffset() {
      const mark = this.marks.get(null);
      return mark ? mark.offset : null;
    }

    start() {
      if (!this._stopped) return;
      this._stopped = false;
      this._connect();
    }

    /** Close (1000) and stop for good. */
    close() { this._stop("closed"); }

    subscribe(topic) {
      this.topics.add(topic);
      this._send({ type: "subscribe", topic });
    }

    unsubscribe(topic) {
      this.topics.delete(topic);
      this._send({ type: "unsubscribe", topic });
    }

    resumeUrl() {
      const last = this.lastOffset;
      let query = "hello=1";
      if (this.epoch) query += (last === null ? "" : "&offset=" + last) + "&epoch=" + encodeURIComponent(this.epoch);
      return this.url + (this.url.includes("?") ? "&" : "?") + query;
    }

    async _connect() {
      this.options.onState("connecting");
      let token;
      try {
        token = await this.options.token();
      } catch (err) {
        return this._retry("token provider failed: " + err, 0);
      }
      if (this._stopped) return;
      // One record per socket: its token, when it opened, when a message last came, and the
      // promise chain that runs its messages one at a time, in order.
      let ws;
      try {
        ws = new WebSocket(this.resumeUrl(), ["bearer", token]);
      } catch (err) {  // a malformed URL, or a token that is not a valid subprotocol token
        return this._stop("cannot connect: " + err.name);
      }
      const conn = { ws, token, openedAt: null, lastRx: 0, chain: Promise.resolve() };
      this._conn = conn;
      conn.openTimer = setTimeout(() => {  // no 101 in time (a server that hangs): a failed connect
        if (conn.openedAt !== null || conn !== this._conn) return;
        conn.ws.close();
        this._onClose(conn, 1006);
      }, this.options.openTimeoutMs);
      conn.ws.onopen = () => {
        clearTimeout(conn.openTimer);
        conn.openedAt = Date.now();
        this._failedConnects = 0; this._authFailures = 0;
        this.stats.connects += 1;
        this.subscribed.clear();
        this.options.onState("open");
        for (const topic of this.topics) this._send({ type: "subscribe", topic });
        this._schedulePing(conn, this.options.pingIntervalMs);
      };
      conn.ws.onmessage = (msg) => {
        conn.lastRx = Date.now();
        conn.chain = conn.chain.then(() => this._onMessage(msg.data)).catch((err) => this._stop("onEvent failed: " + err));
      };
      conn.ws.onclose = (ev) => this._onClose(conn, ev.code);
    }

    async _onClose(conn, code) {
      if (conn !== this._conn) return;  // given up already (ping or open timeout)
      this._conn = null;
      clearTimeout(this._pingTimer); clearTimeout(conn.openTimer);
      this.subscribed.clear();
      if (this._stopped) return;
      if (code === CLOSE_REPLACED) return this._stop("replaced");
      if (conn.openedAt !== null) {
        const stable = Date.now() - conn.openedAt >= this.options.stableAfterMs;
        if (stable) this._attempt = 0;
        if (stable && code === CLOSE_TOKEN_EXPIRED) return this._connect();
        return this._retry("closed " + code, 0);
      }
      this._failedConnects += 1;
      let waitMs = 0;
      if (this._failedConnects >= this.options.preflightAfter) {
        const answer = await this._preflight(conn.token);
        if (answer.status === 403) return this._stop("forbidden");
        if (answer.status === 401 && ++this._authFailures >= this.options.maxAuthFailures) {
          return this._stop("unauthorized");
        }
        waitMs = answer.retryAfterMs;
      }
      this._retry("connect failed", waitMs);
    }

    /** GET /v1/ws/preflight with the token: {status, retryAfterMs}; status 0 without an answer
     *  (unreachable, none within openTimeoutMs, or one that CORS hides from another origin). */
    async _preflight(token) {
      this.stats.preflights += 1;
      const base = this.url.replace(/^ws/, "http").split("?")[0];
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), this.options.openTimeoutMs);
      try {
        const res = await fetch(base + "/preflight", {
          headers: { Authorization: "Bearer " + token }, signal: abort.signal,
        });
        const after = Number(res.headers.get("Retry-After"));
        return { status: res.status, retryAfterMs: Number.isFinite(after) ? after * 1000 : 0 };
      } catch (err) {
        return { status: 0, retryAfterMs: 0 };
      } finally {
        clearTimeout(timer);
      }
    }

    _retry(reason, waitMs) {
      if (this._stopped) return;
      const o = this.options;
      const delay = Math.max(waitMs, backoffDelay(this._attempt, o.backoffBaseMs, o.backoffCapMs, o.random));
      o.onRetry(this._attempt, delay, reason);
      o.onState("retrying", reason);
      this._attempt += 1;
      this._timer = setTimeout(() => this._connect(), delay);
    }

    _stop(reason) {
      if (this._stopped) return;
      this._stopped = true;
      clearTimeout(this._timer); clearTimeout(this._pingTimer);
      if (this._conn) { clearTimeout(this._conn.openTimer); this._conn.ws.close(1000); }
      this._conn = null;
      this.options.onState("stopped", reason);
      this.options.onStopped(reason);
    }

    _schedulePing(conn, delayMs) {
      this._pingTimer = setTimeout(() => {
        const sent = Date.now();
        this._send({ type: "ping" });
        this._pingTimer = setTimeout(() => {
          if (conn.lastRx >= sent) return this._schedulePing(conn, this.options.pingIntervalMs - this.options.pongTimeoutMs);
          conn.ws.close();  // a dead link may take minutes to report its close: reconnect now
          this._onClose(conn, 1006);
        }, this.options.pongTimeoutMs);
      }, delayMs);
    }

    async _onMessage(raw) {
      let message;
      try { message = JSON.parse(raw); } catch (err) { return; }
      if (message === null || typeof message !== "object") return;
      if (message.type === "reset") return this._reset(message.epoch);
      if (message.type === "hello" && typeof message.epoch === "string") return this._hello(message.epoch);
      if (Number.isInteger(message.offset) && typeof message.event === "string") return this._deliver(message);
      if (message.type === "subscribed") this.subscribed.add(message.topic);
      if (message.type === "unsubscribed") this.subscribed.delete(message.topic);
    }

    async _hello(epoch) {
      if (this.epoch !== null && epoch !== this.epoch) await this._reset(epoch);
      this.epoch = epoch;
    }

    async _reset(epoch) {
      this.epoch = epoch === undefined ? null : epoch;
      this.marks.delete(null);
      this.stats.resets += 1;
      await this.options.onReset();
    }

    async _deliver(message) {
      const topic = message.topic === undefined ? null : message.topic;
      const epoch = message.epoch === undefined ? null : message.epoch;
      if (topic === null && epoch !== this.epoch) {
        if (this.epoch !== null) await this._reset(epoch);
        this.epoch = epoch;
      }
      const mark = this.marks.get(topic);
      if (mark && mark.epoch === epoch && message.offset <= mark.offset) {
        this.stats.duplicates += 1;
      } else {
        await this.options.onEvent({ event: message.event, data: message.data, offset: message.offset, epoch, topic });
        this.marks.set(topic, { epoch, offset: message.offset });
        this.stats.events += 1;
      }
      if (topic === null && this._send({ type: "ack", offset: message.offset })) this.stats.acks += 1;
    }

    _send(message) {
      const conn = this._conn;
      if (!conn || conn.ws.readyState !== WebSocket.OPEN) return false;
      conn.ws.send(JSON.stringify(message));
      return true;
    }
  }

  HongbaoPush.backoffDelay = backoffDelay;
  global.HongbaoPush = HongbaoPush;
})(globalThis);
