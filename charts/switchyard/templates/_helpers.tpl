{{/*
Chart name, truncated to 63 characters (the DNS label limit of some name fields).
*/}}
{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: the release name when it already contains the chart name (so
release "switchyard" gives "switchyard"), otherwise "<release>-<chart>". Truncated to 63.
*/}}
{{- define "switchyard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "switchyard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "switchyard.labels" -}}
helm.sh/chart: {{ include "switchyard.chart" . }}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: switchyard
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels: the Deployment's selector and the metrics Service's selector. Immutable on a
Deployment, so never add to them.
*/}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the ServiceAccount the operator runs as. Without serviceAccount.create a name is
required: falling back to the namespace's "default" ServiceAccount would grant the operator's
cluster-wide permissions to every pod that uses it.
*/}}
{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name }}
{{- else if .Values.serviceAccount.name }}
{{- .Values.serviceAccount.name }}
{{- else }}
{{- fail "serviceAccount.name must be set when serviceAccount.create is false" }}
{{- end }}
{{- end }}

{{/*
An image reference: (dict "image" IMAGE-VALUES "registry" GLOBAL-REGISTRY "appVersion" DEFAULT-TAG).
global.imageRegistry replaces the repository's registry (its first path element when that names a
host: it has a dot or a colon, or is localhost) or, for a Docker Hub name, goes in front of it. A
digest wins over the tag: the node pulls exactly the image that was released.
*/}}
{{- define "switchyard.imageRef" -}}
{{- $repo := .image.repository -}}
{{- $registry := trimSuffix "/" (.registry | default "") -}}
{{- if $registry -}}
{{- $parts := splitList "/" $repo -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $repo = printf "%s/%s" $registry (join "/" (rest $parts)) -}}
{{- else -}}
{{- $repo = printf "%s/%s" $registry $repo -}}
{{- end -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.image.tag | default .appVersion) -}}
{{- end -}}
{{- end }}

{{/*
Operator image reference.
*/}}
{{- define "switchyard.image" -}}
{{- include "switchyard.imageRef" (dict "image" .Values.image "registry" (.Values.global).imageRegistry "appVersion" .Chart.AppVersion) }}
{{- end }}

{{/*
Sidecar image reference, passed to the operator as --sidecar-image: the registry reaches the
sidecars the operator injects through it.
*/}}
{{- define "switchyard.sidecarImage" -}}
{{- include "switchyard.imageRef" (dict "image" .Values.sidecar.image "registry" (.Values.global).imageRegistry "appVersion" .Chart.AppVersion) }}
{{- end }}

{{/*
nats-server image reference.
*/}}
{{- define "switchyard.natsImage" -}}
{{- include "switchyard.imageRef" (dict "image" .Values.jetstream.image "registry" (.Values.global).imageRegistry "appVersion" .Chart.AppVersion) }}
{{- end }}

{{/*
Name of the namespaced Role and RoleBinding for the leader-election Lease.
*/}}
{{- define "switchyard.leaderElectionRoleName" -}}
{{- printf "%s-leader-election" (include "switchyard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the metrics Service.
*/}}
{{- define "switchyard.metricsServiceName" -}}
{{- printf "%s-metrics" (include "switchyard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the control-plane Service sidecars connect to.
*/}}
{{- define "switchyard.controlPlaneServiceName" -}}
{{- printf "%s-control-plane" (include "switchyard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
URL of the control plane as sidecars see it: controlPlane.url, or the Service's cluster DNS name.
*/}}
{{- define "switchyard.controlPlaneUrl" -}}
{{- if .Values.controlPlane.url }}
{{- .Values.controlPlane.url }}
{{- else }}
{{- printf "%s://%s.%s.svc:%d" (ternary "https" "http" .Values.meshTLS.enabled) (include "switchyard.controlPlaneServiceName" .) .Release.Namespace (int .Values.controlPlane.port) }}
{{- end }}
{{- end }}

{{/*
The operator's rules on namespaced resources: in the ClusterRole for a cluster-wide install, in a
Role of each namespace of watchNamespaces otherwise. One list, so the two modes grant the same.
*/}}
{{- define "switchyard.namespacedRules" -}}
# The custom resources the operator reconciles. It never creates or deletes them.
- apiGroups: ["switchyard.dev"]
  resources: ["routers", "managers"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["switchyard.dev"]
  resources: ["routers/status", "managers/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["switchyard.dev"]
  resources: ["managers/scale", "routers/scale"]
  verbs: ["get", "patch", "update"]
# The workloads it owns for each Router and Manager.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Each Router's and Manager's own ServiceAccount, which its pods run as (server-side applied
# before its Deployment; deleted with it by the garbage collector).
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["create", "patch"]
# Not an API call: the right the chart's ValidatingAdmissionPolicy asks of whoever writes a
# Deployment, ReplicaSet or Pod whose ownerReferences name a Router or Manager (admissionPolicy).
- apiGroups: ["switchyard.dev"]
  resources: ["routers", "managers"]
  verbs: ["own"]
# Manager pods' IPs and readiness for the control plane's routing tables (read only; the cache
# holds only pods labelled app.kubernetes.io/name=switchyard-manager).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# A Manager's namespace, for its labels (switchyard.dev/allow-privileged-templates), read only
# when the Manager's pod template escalates. In a Role this grants get on that namespace alone.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get"]
# The NetworkPolicy it makes for each Router's and Manager's pods.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- if .Values.meshTLS.enabled }}
# Certifying a sidecar: after the TokenReview (cluster-scoped, see switchyard.clusterRules), its
# pod and the owner chain pod -> ReplicaSet -> Deployment -> Router/Manager are read one object each.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get"]
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["get"]
{{- end }}
# Kubernetes Events about the resources it reconciles.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
The operator's rules on cluster-scoped resources, needed in both modes: only the TokenReview that
certifies a sidecar, with mesh TLS on. Empty otherwise.
*/}}
{{- define "switchyard.clusterRules" -}}
{{- if .Values.meshTLS.enabled }}
# Certifying a sidecar: its projected token is checked by TokenReview.
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
{{- end }}
{{- end }}

{{/*
Name of the chart's NATS JetStream StatefulSet and of its headless Service.
*/}}
{{- define "switchyard.nats" -}}
{{- printf "%s-nats" (include "switchyard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Whether the chart's JetStream servers run behind the mesh's identity ("true"/"false"): with mesh
TLS, they serve a certificate from the mesh CA, take only clients with a mesh certificate, and map
each to the NATS user the operator writes for it (the access Secret).
*/}}
{{- define "switchyard.natsTLS" -}}
{{- and .Values.jetstream.enabled .Values.meshTLS.enabled }}
{{- end }}

{{/*
The chart's JetStream servers by their stable names under the headless Service, comma-separated:
their route hosts, and the DNS names of the certificate the operator issues them.
*/}}
{{- define "switchyard.natsRouteHosts" -}}
{{- $name := include "switchyard.nats" . }}
{{- $hosts := list }}
{{- range $i := until (int .Values.jetstream.cluster.replicas) }}
{{- $hosts = append $hosts (printf "%s-%d.%s.%s.svc" $name $i $name $.Release.Namespace) }}
{{- end }}
{{- join "," $hosts }}
{{- end }}

{{/*
The SPIFFE identity in the servers' certificate (the operator's nats_access::SERVER_NAME): the only
peer their cluster routes accept.
*/}}
{{- define "switchyard.natsServerId" -}}
{{- printf "spiffe://%s/ns/%s/jetstream/nats" .Values.meshTLS.trustDomain .Release.Namespace }}
{{- end }}

{{/*
The Secret the operator keeps for the chart's JetStream servers: certificate, trust bundle, users.
*/}}
{{- define "switchyard.natsAccess" -}}
{{- printf "%s-access" (include "switchyard.nats" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The JetStream URL(s) given to the operator (--jetstream-url): each server of the chart's cluster
by its stable name under the headless Service, or jetstream.url; empty: no durable delivery.
*/}}
{{- define "switchyard.jetstreamUrl" -}}
{{- if .Values.jetstream.enabled }}
{{- $name := include "switchyard.nats" . }}
{{- $scheme := ternary "tls" "nats" (include "switchyard.natsTLS" . | eq "true") }}
{{- if .Values.jetstream.clusterIP }}
{{- printf "%s://%s:%d" $scheme .Values.jetstream.clusterIP (int .Values.jetstream.port) }}
{{- else }}
{{- $urls := list }}
{{- range $i := until (int .Values.jetstream.cluster.replicas) }}
{{- $urls = append $urls (printf "%s://%s-%d.%s.%s.svc:%d" $scheme $name $i $name $.Release.Namespace (int $.Values.jetstream.port)) }}
{{- end }}
{{- join "," $urls }}
{{- end }}
{{- else }}
{{- .Values.jetstream.url }}
{{- end }}
{{- end }}

{{/*
Replicas of each stream: jetstream.streamReplicas, else the chart's cluster size, else 1.
*/}}
{{- define "switchyard.streamReplicas" -}}
{{- if .Values.jetstream.streamReplicas }}
{{- .Values.jetstream.streamReplicas }}
{{- else if .Values.jetstream.enabled }}
{{- .Values.jetstream.cluster.replicas }}
{{- else }}
{{- 1 }}
{{- end }}
{{- end }}

{{/*
Labels of the NATS pods (and their selector).
*/}}
{{- define "switchyard.natsSelectorLabels" -}}
app.kubernetes.io/name: switchyard-nats
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The nats-server configuration of the chart's JetStream cluster.
*/}}
{{- define "switchyard.natsConf" -}}
server_name: $POD_NAME
pid_file: /var/run/nats/nats.pid
listen: 0.0.0.0:{{ .Values.jetstream.port }}
http: 0.0.0.0:8222
# Lets a server leave without dropping clients mid-request on a rollout.
lame_duck_grace_period: 10s
lame_duck_duration: 30s
# The largest durable event a Manager accepts (16 MiB, the Router's event limit) with its headers;
# NATS's default of 1 MiB refused every larger durable publish.
max_payload: {{ int64 .Values.jetstream.maxPayload }}
# The store fills at most its volume; each stream holds at most 1,000,000 events and its Manager's
# spec.durable.maxBytes, which the server reserves from the store (a publish past either is refused,
# never an old event dropped). sync_interval `always` writes every event to disk
# before its PubAck (and so before its 202): see jetstream.syncInterval.
jetstream {
  store_dir: /data
  sync_interval: {{ .Values.jetstream.syncInterval }}
}
{{- if eq (include "switchyard.natsTLS" .) "true" }}
# Mutual TLS with the mesh CA: a client without a mesh certificate is refused at the handshake, and
# each certificate's SPIFFE URI is its NATS user, whose permissions the operator writes from its
# Manager's routing table (docs/security.md, JetStream behind the mesh's identity). The operator
# renews the certificate and rewrites the users; the reloader beside the server applies both.
tls {
  cert_file: /etc/nats-access/tls.crt
  key_file: /etc/nats-access/tls.key
  ca_file: /etc/nats-access/ca.crt
  verify_and_map: true
  timeout: 2
}
include ../nats-access/access.conf
{{- end }}
{{- if gt (int .Values.jetstream.cluster.replicas) 1 }}
cluster {
  name: {{ include "switchyard.nats" . }}
  listen: 0.0.0.0:6222
  {{- if eq (include "switchyard.natsTLS" .) "true" }}
  # A route carries every account's messages and the JetStream cluster's state: mutual TLS with the
  # mesh CA, and only the servers' own identity may route (a sidecar's mesh certificate is refused).
  # The certificate also names each server's route host (--jetstream-server-names), which a server
  # checks when it dials a route.
  tls {
    cert_file: /etc/nats-access/tls.crt
    key_file: /etc/nats-access/tls.key
    ca_file: /etc/nats-access/ca.crt
    verify_and_map: true
    timeout: 2
  }
  authorization {
    user: {{ include "switchyard.natsServerId" . | quote }}
  }
  {{- end }}
  routes: [
    {{- range (include "switchyard.natsRouteHosts" . | splitList ",") }}
    nats://{{ . }}:6222
    {{- end }}
  ]
}
{{- end }}
{{- end }}

{{/*
Name of the ValidatingAdmissionPolicy (and its binding) that keeps ownerReferences to Routers and
Managers to the operator.
*/}}
{{- define "switchyard.ownerPolicyName" -}}
{{- printf "%s-owner-references" (include "switchyard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
