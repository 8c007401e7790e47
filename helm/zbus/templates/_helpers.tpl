{{/*
Names, labels and the facts about each service that every template shares.
*/}}

{{- define "zbus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: the release name, or "<release>-<chart>" when the
release name does not contain the chart's. Kept to 40 characters so that
"<prefix>-sparkworker-driver" still fits a DNS label.
*/}}
{{- define "zbus.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "zbus.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "zbus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "zbus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "zbus.labels" -}}
helm.sh/chart: {{ include "zbus.chart" . }}
{{ include "zbus.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: zbus
{{- end }}

{{/* Labels of one service's objects; call with (dict "root" $ "name" "catalog"). */}}
{{- define "zbus.componentLabels" -}}
{{ include "zbus.labels" .root }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{- define "zbus.componentSelectorLabels" -}}
{{ include "zbus.selectorLabels" .root }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{/*
Every service: its kind, its image, its admin port and its ZeroMQ ports. The ports are
the images' (docs/deploy.md); `env` holds the settings that bind them.
*/}}
{{- define "zbus.components" -}}
catalog:
  kind: StatefulSet
  image: image
  adminPort: 8701
  ports:
    - {name: dbp, port: 5246, protocol: TCP}
    - {name: heartbeat, port: 5246, protocol: UDP}
    - {name: beacon, port: 5245, protocol: UDP}
  env:
    ZBUS_PORT: "5246"
    ZBUS_UDP_PORT: "5246"
    ZBUS_BEACON_PORT: "5245"
eventbus:
  kind: StatefulSet
  image: image
  adminPort: 8702
  ports:
    - {name: snapshot, port: 5556, protocol: TCP}
    - {name: publisher, port: 5557, protocol: TCP}
    - {name: collector, port: 5558, protocol: TCP}
    - {name: stream, port: 5559, protocol: TCP}
    - {name: mc0, port: 61616, protocol: TCP}
    - {name: pppp, port: 5560, protocol: TCP}
  env:
    ZBUS_PORT: "5556"
    ZBUS_MC0_PORT: "61616"
    ZBUS_PPPP_PORT: "5560"
broker:
  kind: StatefulSet
  image: image
  adminPort: 8703
  ports:
    - {name: clients, port: 47291, protocol: TCP}
    - {name: workers, port: 47290, protocol: TCP}
  env:
    ZBUS_CLIENT_PORT: "47291"
    ZBUS_WORKER_PORT: "47290"
worker:
  kind: Deployment
  image: image
  adminPort: 8705
  ports: []
  env: {}
sparkworker:
  kind: Deployment
  image: sparkImage
  adminPort: 8704
  ports: []
  env: {}
{{- end }}

{{- define "zbus.component" -}}
{{- get (fromYaml (include "zbus.components" .root)) .name | toYaml }}
{{- end }}

{{/* "repository:tag" of an image key ("image" or "sparkImage"). */}}
{{- define "zbus.image" -}}
{{- $image := get .root.Values .key }}
{{- printf "%s:%s" $image.repository (default .root.Chart.AppVersion $image.tag) }}
{{- end }}

{{- define "zbus.catalogEndpoint" -}}
tcp://{{ include "zbus.fullname" . }}-catalog:5246
{{- end }}
{{- define "zbus.eventbusEndpoint" -}}
{{- if .Values.replication.enabled }}
{{- $items := list }}
{{- range $index := until (int (include "zbus.busReplicas" .)) }}
{{- $host := include "zbus.podHost" (dict "root" $ "name" "eventbus" "index" $index) }}
{{- $items = append $items (printf "tcp://%s:5556" $host) }}
{{- end }}
{{- join "," $items }}
{{- else }}
{{- printf "tcp://%s-eventbus:5556" (include "zbus.fullname" .) }}
{{- end }}
{{- end }}
{{- define "zbus.brokerEndpoint" -}}
tcp://{{ include "zbus.fullname" . }}-broker:47290
{{- end }}

{{/*
The replicated event bus (values `replication`): three replicas, each named after its pod
and reached at its stable DNS name through the headless Service, on the replication
port; etcd's three members the same way, or the URLs of an external etcd.
*/}}
{{- define "zbus.busReplicas" -}}3{{- end }}
{{- define "zbus.replicationPort" -}}5561{{- end }}
{{- define "zbus.etcdMembers" -}}3{{- end }}

{{/* A StatefulSet pod's DNS name; call with (dict "root" $ "name" "eventbus" "index" 0). */}}
{{- define "zbus.podHost" -}}
{{- $fullname := include "zbus.fullname" .root }}
{{- printf "%s-%s-%d.%s-%s-headless.%s.svc" $fullname .name (int .index) $fullname .name .root.Release.Namespace }}
{{- end }}

{{/* ZBUS_REPLICAS: NAME=HOST:PORT of every replica, the name being its pod's. */}}
{{- define "zbus.replicas" -}}
{{- $fullname := include "zbus.fullname" . }}
{{- $items := list }}
{{- range $index := until (int (include "zbus.busReplicas" .)) }}
{{- $host := include "zbus.podHost" (dict "root" $ "name" "eventbus" "index" $index) }}
{{- $items = append $items (printf "%s-eventbus-%d=%s:%s" $fullname $index $host (include "zbus.replicationPort" $)) }}
{{- end }}
{{- join "," $items }}
{{- end }}

{{/* True when the chart runs etcd itself (no external endpoints given). */}}
{{- define "zbus.ownEtcd" -}}
{{- if and .Values.replication.enabled (not .Values.replication.etcd.endpoints) }}true{{ end }}
{{- end }}

{{/* ZBUS_ETCD_ENDPOINTS: the external etcd's URLs, or the chart's members'. */}}
{{- define "zbus.etcdEndpoints" -}}
{{- if .Values.replication.etcd.endpoints }}
{{- join "," .Values.replication.etcd.endpoints }}
{{- else }}
{{- $items := list }}
{{- range $index := until (int (include "zbus.etcdMembers" .)) }}
{{- $items = append $items (printf "http://%s:2379" (include "zbus.podHost" (dict "root" $ "name" "etcd" "index" $index))) }}
{{- end }}
{{- join "," $items }}
{{- end }}
{{- end }}

{{/*
ZBUS_REPLICATION_GROUP: the group's keys in etcd are under /zbus/<group>/, so that two
releases sharing an external etcd never meet. eventbus.config may set another.
*/}}
{{- define "zbus.replicationGroup" -}}
{{- printf "%s-%s-eventbus" .Release.Namespace (include "zbus.fullname" .) | trunc 64 | trimSuffix "-" }}
{{- end }}

{{/*
Keeps one service's pods on different nodes (values `replication.podAntiAffinity`);
call with (dict "root" $ "name" "eventbus").
*/}}
{{- define "zbus.podAntiAffinity" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (fromYaml (include "zbus.componentSelectorLabels" .))) }}
{{- if eq .root.Values.replication.podAntiAffinity "hard" }}
requiredDuringSchedulingIgnoredDuringExecution:
  {{- toYaml (list $term) | nindent 2 }}
{{- else }}
preferredDuringSchedulingIgnoredDuringExecution:
  {{- toYaml (list (dict "weight" 100 "podAffinityTerm" $term)) | nindent 2 }}
{{- end }}
{{- end }}

{{/*
A pod's affinity: the service's own, else every pod's; for a replicated service (the
event bus's replicas, etcd's members) with an anti-affinity between its pods unless the
affinity given has one.
*/}}
{{- define "zbus.affinity" -}}
{{- $root := .root }}
{{- $values := get $root.Values .name | default dict }}
{{- $affinity := default $root.Values.affinity $values.affinity }}
{{- $grouped := or (eq .name "etcd") (and (eq .name "eventbus") $root.Values.replication.enabled) }}
{{- if and $grouped (not (hasKey $affinity "podAntiAffinity")) }}
{{- $affinity = merge (dict "podAntiAffinity" (fromYaml (include "zbus.podAntiAffinity" .))) $affinity }}
{{- end }}
{{- with $affinity }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{- define "zbus.secretName" -}}
{{- default (printf "%s-secret" (include "zbus.fullname" .)) .Values.existingSecret }}
{{- end }}

{{- define "zbus.sparkServiceAccountName" -}}
{{- if .Values.sparkworker.serviceAccount.create }}
{{- default (printf "%s-sparkworker" (include "zbus.fullname" .)) .Values.sparkworker.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.sparkworker.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "zbus.sparkOnKubernetes" -}}
{{- if hasPrefix "k8s://" .Values.sparkworker.spark.master }}true{{ end }}
{{- end }}

{{/*
A setting's value as the service reads it: whole numbers without an exponent (values
arrive as floats, and 16777216 would otherwise read "1.6777216e+07").
*/}}
{{- define "zbus.settingValue" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) }}
{{- int64 . }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}

{{/*
The non-secret ZBUS_* settings of one service, as a map: what the deployment decides,
then the values' `config`, then the service's own `config`.
*/}}
{{- define "zbus.settings" -}}
{{- $root := .root }}
{{- $name := .name }}
{{- $c := fromYaml (include "zbus.component" .) }}
{{- $env := dict "ZBUS_HOST" "0.0.0.0" "ZBUS_ADMIN_PORT" (toString $c.adminPort) "ZBUS_DATA_DIR" "/var/lib/zbus" }}
{{- $_ := set $env "ZBUS_EVENTBUS_ENDPOINT" (include "zbus.eventbusEndpoint" $root) }}
{{- if ne $name "catalog" }}
{{- $_ := set $env "ZBUS_CATALOG_ENDPOINT" (include "zbus.catalogEndpoint" $root) }}
{{- end }}
{{- if has $name (list "worker" "sparkworker") }}
{{- $_ := set $env "ZBUS_BROKER_ENDPOINT" (include "zbus.brokerEndpoint" $root) }}
{{- end }}
{{- if eq $name "sparkworker" }}
{{- $_ := set $env "ZBUS_SPARK_MASTER" $root.Values.sparkworker.spark.master }}
{{- end }}
{{- if has $name (list "eventbus" "sparkworker") }}
{{- if $root.Values.archive.path }}
{{- $_ := set $env "ZBUS_ARCHIVE_PATH" $root.Values.archive.path }}
{{- else if $root.Values.archive.existingClaim }}
{{- $_ := set $env "ZBUS_ARCHIVE_PATH" "/var/lib/zbus-archive" }}
{{- end }}
{{- end }}
{{- if and (eq $name "eventbus") $root.Values.replication.enabled }}
{{- $_ := set $env "ZBUS_REPLICAS" (include "zbus.replicas" $root) }}
{{- $_ := set $env "ZBUS_ETCD_ENDPOINTS" (include "zbus.etcdEndpoints" $root) }}
{{- $_ := set $env "ZBUS_REPLICATION_GROUP" (include "zbus.replicationGroup" $root) }}
{{- end }}
{{- range $key, $value := $c.env }}
{{- $_ := set $env $key $value }}
{{- end }}
{{- range $key, $value := $root.Values.config }}
{{- $_ := set $env $key (include "zbus.settingValue" $value) }}
{{- end }}
{{- range $key, $value := (get $root.Values $name).config }}
{{- $_ := set $env $key (include "zbus.settingValue" $value) }}
{{- end }}
{{- if $root.Values.curve.enabled }}
{{- $_ := set $env "ZBUS_CURVE_SECRET_KEY" (printf "/etc/zbus/keys/%s.key_secret" $name) }}
{{- if has $name (list "catalog" "eventbus" "broker") }}
{{- $_ := set $env "ZBUS_CURVE_ALLOWED_CLIENTS" "/etc/zbus/keys/allowed" }}
{{- end }}
{{- if ne $name "catalog" }}
{{- $_ := set $env "ZBUS_CATALOG_PUBLIC_KEY" "/etc/zbus/keys/catalog.key" }}
{{- end }}
{{- $_ := set $env "ZBUS_EVENTBUS_PUBLIC_KEY" "/etc/zbus/keys/eventbus.key" }}
{{- if has $name (list "worker" "sparkworker") }}
{{- $_ := set $env "ZBUS_BROKER_PUBLIC_KEY" "/etc/zbus/keys/broker.key" }}
{{- end }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
ZBUS_SPARK_CONF of the sparkworker: the values' spark.* settings and, with a k8s://
master, what running executors as pods takes. $(POD_IP) and $(POD_NAME) are
filled in by Kubernetes from the downward API.
*/}}
{{- define "zbus.sparkConf" -}}
{{- $root := . }}
{{- $conf := dict }}
{{- if include "zbus.sparkOnKubernetes" $root }}
{{- $k := $root.Values.sparkworker.spark.kubernetes }}
{{- $_ := set $conf "spark.driver.host" "$(POD_IP)" }}
{{- $_ := set $conf "spark.driver.port" (toString $k.driverPort) }}
{{- $_ := set $conf "spark.blockManager.port" (toString $k.blockManagerPort) }}
{{- $_ := set $conf "spark.executor.instances" (toString $k.executorInstances) }}
{{- $_ := set $conf "spark.kubernetes.namespace" $root.Release.Namespace }}
{{- $_ := set $conf "spark.kubernetes.driver.pod.name" "$(POD_NAME)" }}
{{- $_ := set $conf "spark.kubernetes.container.image" (include "zbus.image" (dict "root" $root "key" "sparkImage")) }}
{{- $_ := set $conf "spark.kubernetes.container.image.pullPolicy" $root.Values.sparkImage.pullPolicy }}
{{- $_ := set $conf "spark.kubernetes.authenticate.driver.serviceAccountName" (include "zbus.sparkServiceAccountName" $root) }}
{{- $_ := set $conf "spark.kubernetes.executor.podTemplateFile" "/etc/zbus/spark/executor-pod.yaml" }}
{{- $_ := set $conf "spark.kubernetes.executor.podTemplateContainerName" "spark-executor" }}
{{- end }}
{{- range $key, $value := $root.Values.sparkworker.spark.conf }}
{{- $_ := set $conf $key (include "zbus.settingValue" $value) }}
{{- end }}
{{- $items := list }}
{{- range $key, $value := $conf }}
{{- $items = append $items (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $items }}
{{- end }}

{{- define "zbus.podAnnotations" -}}
{{- $root := .root }}
{{- $c := fromYaml (include "zbus.component" .) }}
{{- $annotations := merge (dict) ((get $root.Values .name).podAnnotations | default dict) ($root.Values.podAnnotations | default dict) }}
{{- if $root.Values.metrics.podAnnotations }}
{{- $_ := set $annotations "prometheus.io/scrape" "true" }}
{{- $_ := set $annotations "prometheus.io/port" (toString $c.adminPort) }}
{{- $_ := set $annotations "prometheus.io/path" "/metrics" }}
{{- end }}
{{- $_ := set $annotations "checksum/config" (include "zbus.settings" . | sha256sum) }}
{{- toYaml $annotations }}
{{- end }}
