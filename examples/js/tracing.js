// OpenTelemetry for the JavaScript handler, loaded before the app (`node --require ./tracing.js`)
// so the node:http instrumentation wraps the server: it continues the sidecar's traceparent in a
// SERVER span per event. On only when OTEL_EXPORTER_OTLP_ENDPOINT is set (switchyard up sets it for
// the apps of a traced Router); the service is OTEL_SERVICE_NAME.
"use strict";

if (process.env.OTEL_EXPORTER_OTLP_ENDPOINT) {
  const os = require("node:os");
  const { context, diag, DiagConsoleLogger, DiagLogLevel, propagation, trace } = require("@opentelemetry/api");
  const { AsyncLocalStorageContextManager } = require("@opentelemetry/context-async-hooks");
  const { W3CTraceContextPropagator } = require("@opentelemetry/core");
  const { OTLPTraceExporter } = require("@opentelemetry/exporter-trace-otlp-grpc");
  const { registerInstrumentations } = require("@opentelemetry/instrumentation");
  const { HttpInstrumentation } = require("@opentelemetry/instrumentation-http");
  const { resourceFromAttributes } = require("@opentelemetry/resources");
  const { BatchSpanProcessor, TracerProvider } = require("@opentelemetry/sdk-trace");

  // Export failures are reported, not swallowed.
  diag.setLogger(new DiagConsoleLogger(), DiagLogLevel.WARN);
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const provider = new TracerProvider({
    resource: resourceFromAttributes({
      "service.name": process.env.OTEL_SERVICE_NAME || "switchyard-example-js",
    }),
    // The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT itself.
    spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter() })],
  });
  trace.setGlobalTracerProvider(provider);
  registerInstrumentations({ instrumentations: [new HttpInstrumentation()] });

  // Flush what is buffered on SIGTERM (switchyard up, the kubelet) before exiting.
  process.once("SIGTERM", () => {
    provider
      .shutdown()
      .catch((e) => console.error("switchyard-example-js: trace export did not flush:", e))
      .finally(() => process.exit(128 + os.constants.signals.SIGTERM));
  });
}
