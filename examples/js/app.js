// A Switchyard handler in JavaScript: CloudEvents over node:http (binary mode) with the official SDK.
//
// Answers `noop` ({"ok": true}) and `echo` (the event data back); on `echo` it also publishes a
// `noop` event through its manager sidecar's local API (SWITCHYARD_LOCAL_API). With tracing on
// (tracing.js), each event gets a `handle <type>` span and the publish a `publish <type>` span.
//
// Run it with `switchyard up -f examples/js.yaml` (examples/js/run installs the dependencies).
"use strict";

const http = require("node:http");
const { context, propagation, trace, SpanKind } = require("@opentelemetry/api");
const { CloudEvent, HTTP } = require("cloudevents");

const tracer = trace.getTracer("switchyard-example-js");
const LOCAL_API = process.env.SWITCHYARD_LOCAL_API || "";
// Largest event data read; more gets 413 rather than unbounded buffering.
const MAX_BODY = 4 * 1024 * 1024;

function send(res, status, body, contentType = "application/json") {
  res.writeHead(status, { "content-type": contentType });
  res.end(body);
}

function problem(res, status, title, detail) {
  send(res, status, JSON.stringify({ type: "about:blank", title, status, detail }), "application/problem+json");
}

/** Publishes a CloudEvent fire-and-forget through the local API, carrying the trace. */
async function publish(type, data) {
  const event = new CloudEvent({ type, source: "/examples/js", datacontenttype: "application/json", data });
  const message = HTTP.binary(event);
  return tracer.startActiveSpan(`publish ${type}`, { kind: SpanKind.PRODUCER }, async (span) => {
    try {
      const headers = { ...message.headers };
      propagation.inject(context.active(), headers);
      const r = await fetch(`${LOCAL_API}/v1/publish/${type}`, {
        method: "POST",
        headers,
        body: message.body,
        signal: AbortSignal.timeout(5000),
      });
      if (!r.ok) throw new Error(`the local API answered ${r.status}: ${await r.text()}`);
    } finally {
      span.end();
    }
  });
}

async function handle(req, body, res) {
  let event;
  try {
    event = HTTP.toEvent({ headers: req.headers, body });
  } catch (e) {
    return problem(res, 400, "Not a CloudEvent", String(e.message || e));
  }
  await tracer.startActiveSpan(`handle ${event.type}`, async (span) => {
    span.setAttribute("cloudevents.event_type", event.type);
    span.setAttribute("cloudevents.event_id", event.id);
    try {
      if (event.type === "noop") return send(res, 200, JSON.stringify({ ok: true }));
      if (event.type === "echo") {
        if (LOCAL_API) {
          try {
            await publish("noop", { echoed: true });
          } catch (e) {
            return problem(res, 502, "Publish failed", `the local API refused the publish: ${e.message}`);
          }
        }
        return send(res, 200, body, event.datacontenttype || "application/json");
      }
      return problem(res, 404, "Unknown event type", `no handler for event type ${event.type}`);
    } finally {
      span.end();
    }
  });
}

const server = http.createServer((req, res) => {
  if (req.method !== "POST") return problem(res, 405, "Method Not Allowed", "events are POSTed");
  const chunks = [];
  let size = 0;
  req.on("data", (c) => {
    size += c.length;
    if (size > MAX_BODY) {
      problem(res, 413, "Event data too large", `event data is limited to ${MAX_BODY} bytes`);
      req.destroy();
      return;
    }
    chunks.push(c);
  });
  req.on("end", () => {
    if (size > MAX_BODY) return;
    handle(req, Buffer.concat(chunks), res).catch((e) => problem(res, 500, "Handler failed", String(e)));
  });
});

const port = Number(process.env.PORT || 8000);
server.listen(port, "127.0.0.1", () => console.error(`switchyard-example-js: listening on 127.0.0.1:${port}`));
// Without tracing there is nothing to flush: stop on SIGTERM right away.
if (!process.env.OTEL_EXPORTER_OTLP_ENDPOINT) process.once("SIGTERM", () => server.close(() => process.exit(0)));
