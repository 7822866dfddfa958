// A Switchyard handler in Go: CloudEvents over HTTP (binary mode) with the official SDK
// (github.com/cloudevents/sdk-go/v2) and its OpenTelemetry integration.
//
// Answers `noop` ({"ok": true}) and `echo` (the event data back); on `echo` it also publishes a
// `noop` event through its manager sidecar's local API (SWITCHYARD_LOCAL_API). With
// OTEL_EXPORTER_OTLP_ENDPOINT set, the SDK's observed HTTP protocol continues the sidecar's
// traceparent, and each event gets a `handle <type>` span of its own.
//
// Run it with `switchyard up -f examples/go.yaml` (examples/go/run builds it).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	otelobs "github.com/cloudevents/sdk-go/observability/opentelemetry/v2/client"
	obshttp "github.com/cloudevents/sdk-go/observability/opentelemetry/v2/http"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/client"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

var tracer = otel.Tracer("switchyard-example-go")

// setupTracing exports spans over OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT is set (switchyard up
// sets it for the apps of a traced Router); the service is OTEL_SERVICE_NAME. It returns the flush.
func setupTracing(ctx context.Context) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return func(context.Context) error { return nil }, nil
	}
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		os.Setenv("OTEL_SERVICE_NAME", "switchyard-example-go")
	}
	exporter, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// handler answers events and publishes through the local API with `publisher`.
type handler struct {
	publisher client.Client
	localAPI  string
}

func (h *handler) publish(ctx context.Context, eventType string, data any) error {
	ev := cloudevents.NewEvent()
	ev.SetType(eventType)
	ev.SetSource("/examples/go")
	if err := ev.SetData(cloudevents.ApplicationJSON, data); err != nil {
		return err
	}
	ctx = cloudevents.ContextWithTarget(ctx, h.localAPI+"/v1/publish/"+eventType)
	if res := h.publisher.Send(ctx, ev); !cloudevents.IsACK(res) {
		return fmt.Errorf("the local API refused the publish: %w", res)
	}
	return nil
}

func reply(data any) *cloudevents.Event {
	ev := cloudevents.NewEvent()
	ev.SetType("reply")
	ev.SetSource("/examples/go")
	_ = ev.SetData(cloudevents.ApplicationJSON, data)
	return &ev
}

func (h *handler) receive(ctx context.Context, ev cloudevents.Event) (*cloudevents.Event, cloudevents.Result) {
	ctx, span := tracer.Start(ctx, "handle "+ev.Type(), trace.WithAttributes(
		attribute.String("cloudevents.event_type", ev.Type()),
		attribute.String("cloudevents.event_id", ev.ID()),
	))
	defer span.End()
	switch ev.Type() {
	case "noop":
		return reply(map[string]bool{"ok": true}), cehttp.NewResult(http.StatusOK, "")
	case "echo":
		if h.localAPI != "" {
			if err := h.publish(ctx, "noop", map[string]bool{"echoed": true}); err != nil {
				return nil, cehttp.NewResult(http.StatusBadGateway, "%s", err)
			}
		}
		out := cloudevents.NewEvent()
		out.SetType("echo.reply")
		out.SetSource("/examples/go")
		ct := ev.DataContentType()
		if ct == "" {
			ct = cloudevents.ApplicationJSON
		}
		if err := out.SetData(ct, ev.Data()); err != nil {
			return nil, cehttp.NewResult(http.StatusInternalServerError, "%s", err)
		}
		return &out, cehttp.NewResult(http.StatusOK, "")
	default:
		return nil, cehttp.NewResult(http.StatusNotFound, "no handler for event type %s", ev.Type())
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	flush, err := setupTracing(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// A fresh context: the signal has cancelled ctx by now.
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := flush(c); err != nil {
			log.Printf("trace export did not flush: %v", err)
		}
	}()
	port := os.Getenv("PORT")
	if port == "" {
		port = "8000"
	}
	// In a pod only the sidecar next to the app calls it: loopback is enough.
	listener, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		return err
	}
	server, err := obshttp.NewObservedHTTP(cehttp.WithListener(listener), cehttp.WithPath("/events"))
	if err != nil {
		return err
	}
	obs := client.WithObservabilityService(otelobs.NewOTelObservabilityService())
	receiver, err := cloudevents.NewClient(server, obs)
	if err != nil {
		return err
	}
	sender, err := obshttp.NewObservedHTTP()
	if err != nil {
		return err
	}
	publisher, err := cloudevents.NewClient(sender, obs, client.WithUUIDs(), client.WithTimeNow())
	if err != nil {
		return err
	}
	h := &handler{publisher: publisher, localAPI: os.Getenv("SWITCHYARD_LOCAL_API")}
	log.Printf("listening on %s", listener.Addr())
	if err := receiver.StartReceiver(ctx, h.receive); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func main() {
	log.SetPrefix("switchyard-example-go: ")
	log.SetFlags(0)
	if err := run(); err != nil {
		log.Fatal(err)
	}
}
