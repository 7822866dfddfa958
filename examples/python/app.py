"""A Switchyard handler in Python: CloudEvents over HTTP (binary mode) with the official SDK.

Answers `noop` ({"ok": true}) and `echo` (the event data back); on `echo` it also publishes a `noop`
event through its manager sidecar's local API (SWITCHYARD_LOCAL_API). With OTEL_EXPORTER_OTLP_ENDPOINT
set, Flask's OpenTelemetry instrumentation continues the sidecar's traceparent, and each event gets a
`handle <type>` span (and the publish a `publish <type>` span) of its own.

Run it with `switchyard up -f examples/python.yaml` (examples/python/run installs the dependencies).
"""

import json
import os
import signal
import sys

import requests
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.exceptions import BaseCloudEventException
from cloudevents.core.v1.event import CloudEvent
from flask import Flask, request
from opentelemetry import propagate, trace

app = Flask(__name__)
tracer = trace.get_tracer("switchyard-example-python")
LOCAL_API = os.environ.get("SWITCHYARD_LOCAL_API", "")


def setup_tracing():
    """Exports spans over OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT is set (switchyard up sets it
    for the apps of a traced Router); the service is OTEL_SERVICE_NAME."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    os.environ.setdefault("OTEL_SERVICE_NAME", "switchyard-example-python")
    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    FlaskInstrumentor().instrument_app(app)


def problem(status, title, detail):
    body = json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail})
    return body, status, {"content-type": "application/problem+json"}


def publish(event_type, data):
    """Publishes a CloudEvent fire-and-forget through the local API, carrying the trace."""
    event = CloudEvent(
        {"type": event_type, "source": "/examples/python", "datacontenttype": "application/json"},
        data,
    )
    message = ce_http.to_binary_event(event)
    headers = dict(message.headers)
    with tracer.start_as_current_span(f"publish {event_type}", kind=trace.SpanKind.PRODUCER):
        propagate.inject(headers)
        r = requests.post(
            f"{LOCAL_API}/v1/publish/{event_type}", headers=headers, data=message.body, timeout=5
        )
        r.raise_for_status()


@app.post("/events")
def events():
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        event = ce_http.from_http_event(ce_http.HTTPMessage(headers=headers, body=request.get_data()))
    except (BaseCloudEventException, ValueError) as e:
        return problem(400, "Not a CloudEvent", str(e))
    kind = event.get_type()
    with tracer.start_as_current_span(f"handle {kind}") as span:
        span.set_attribute("cloudevents.event_type", kind)
        span.set_attribute("cloudevents.event_id", event.get_id())
        if kind == "noop":
            return json.dumps({"ok": True}), 200, {"content-type": "application/json"}
        if kind == "echo":
            if LOCAL_API:
                try:
                    publish("noop", {"echoed": True})
                except requests.RequestException as e:
                    return problem(502, "Publish failed", f"the local API refused the publish: {e}")
            ct = event.get_datacontenttype() or "application/json"
            return request.get_data(), 200, {"content-type": ct}
        return problem(404, "Unknown event type", f"no handler for event type {kind}")


def main():
    setup_tracing()
    # SIGTERM (switchyard up, the kubelet) exits through atexit, which flushes the spans.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    port = int(os.environ.get("PORT", "8000"))
    app.run(host="127.0.0.1", port=port, threaded=True)


if __name__ == "__main__":
    main()
