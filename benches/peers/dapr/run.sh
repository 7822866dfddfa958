#!/usr/bin/env bash
# Dapr's service invocation in front of the example app, for benches/run (standalone, self-hosted mode):
#   bash benches/peers/dapr/run.sh BASE_PORT LOGDIR        # foreground; SIGTERM stops every process
# client -> daprd "client" -> daprd "handlers" -> switchyard-example-app, all on 127.0.0.1:
#   BASE     the example app (CloudEvents over HTTP, as the manager sidecar delivers them)
#   BASE+1   daprd handlers: HTTP API; +2 gRPC API; +3 internal gRPC (sidecar to sidecar)
#   BASE+4   daprd client:   HTTP API; +5 gRPC API; +6 internal gRPC
# The call benches/run measures (Dapr keeps the verb and the headers, so the app sees the same event):
#   POST http://127.0.0.1:$((BASE+4))/v1.0/invoke/handlers/method/events  with `ce-type: noop`
# Name resolution: the `kubernetes` resolver with a template that maps app id `handlers` to
# 127.0.0.1:BASE+3. It only formats that string; the standalone default, mDNS, multicasts on the
# machine's network and is never loaded. No placement, no scheduler, no metrics, no tracing, no components.
# daprd comes from build.sh (DAPRD overrides it); switchyard-example-app from PATH.
# Prints "daprd VERSION" before starting.
set -euo pipefail
BASE="${1:?usage: run.sh BASE_PORT LOGDIR}"
LOGS="${2:?usage: run.sh BASE_PORT LOGDIR}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DAPRD="${DAPRD:-$(bash "$HERE/build.sh")}"
mkdir -p "$LOGS"
work="$(mktemp -d)"
app=$BASE
b_http=$((BASE + 1)) b_grpc=$((BASE + 2)) b_int=$((BASE + 3))
a_http=$((BASE + 4)) a_grpc=$((BASE + 5)) a_int=$((BASE + 6))

pids=()
stop_all() {
  trap - TERM INT EXIT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap 'stop_all; exit 0' TERM INT
trap stop_all EXIT

mkdir -p "$work/resources" # no components: service invocation needs none
cat > "$work/config.yaml" <<YAML
apiVersion: dapr.io/v1alpha1
kind: Configuration
metadata:
  name: bench
spec:
  nameResolution:
    component: kubernetes
    configuration:
      template: '{{ if eq .ID "handlers" }}127.0.0.1:$b_int{{ end }}'
  # Dapr at its leanest: no tracing, no metrics (it records them by default).
  tracing:
    samplingRate: "0"
  metric:
    enabled: false
YAML

echo "daprd $("$DAPRD" --version 2>/dev/null | head -1)"

common=(--mode standalone --config "$work/config.yaml" --resources-path "$work/resources"
  --dapr-listen-addresses 127.0.0.1 --dapr-internal-grpc-listen-address 127.0.0.1
  --app-channel-address 127.0.0.1 --enable-metrics=false --placement-host-address ""
  --log-level warn)

switchyard-example-app --port "$app" > "$LOGS/dapr-app.log" 2>&1 &
pids+=($!)
"$DAPRD" "${common[@]}" --app-id handlers --app-port "$app" --app-protocol http \
  --dapr-http-port "$b_http" --dapr-grpc-port "$b_grpc" --dapr-internal-grpc-port "$b_int" \
  > "$LOGS/daprd-handlers.log" 2>&1 &
pids+=($!)
"$DAPRD" "${common[@]}" --app-id client \
  --dapr-http-port "$a_http" --dapr-grpc-port "$a_grpc" --dapr-internal-grpc-port "$a_int" \
  > "$LOGS/daprd-client.log" 2>&1 &
pids+=($!)

# Any of the three ending ends the peer (benches/run sees this process gone and reports it).
wait -n "${pids[@]}" || true
echo "a Dapr process stopped; see $LOGS/daprd-*.log and $LOGS/dapr-app.log" >&2
exit 1
