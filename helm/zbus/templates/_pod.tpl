{{/*
The pod of one service, shared by the StatefulSets and the Deployments; call with
(dict "root" $ "name" "catalog").
*/}}
{{- define "zbus.podTemplate" -}}
{{- $root := .root }}
{{- $name := .name }}
{{- $values := get $root.Values $name }}
{{- $c := fromYaml (include "zbus.component" .) }}
{{- $image := get $root.Values $c.image }}
{{- $fullname := include "zbus.fullname" $root }}
{{- $k8sSpark := and (eq $name "sparkworker") (eq (include "zbus.sparkOnKubernetes" $root) "true") -}}
metadata:
  labels:
    {{- include "zbus.componentSelectorLabels" . | nindent 4 }}
    {{- with $root.Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    {{- include "zbus.podAnnotations" . | nindent 4 }}
spec:
  {{- if eq $name "sparkworker" }}
  serviceAccountName: {{ include "zbus.sparkServiceAccountName" $root }}
  {{- end }}
  automountServiceAccountToken: {{ $k8sSpark | ternary true false }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ eq $name "sparkworker" | ternary 60 30 }}
  containers:
    - name: {{ $name }}
      image: {{ include "zbus.image" (dict "root" $root "key" $c.image) | quote }}
      imagePullPolicy: {{ $image.pullPolicy }}
      args: [{{ $name | quote }}]
      envFrom:
        - configMapRef:
            name: {{ $fullname }}-{{ $name }}
      {{- with include "zbus.env" . | trim }}
      env:
        {{- . | nindent 8 }}
      {{- end }}
      ports:
        - name: admin
          containerPort: {{ $c.adminPort }}
          protocol: TCP
        {{- range $c.ports }}
        - name: {{ .name }}
          containerPort: {{ .port }}
          protocol: {{ .protocol }}
        {{- end }}
        {{- if and (eq $name "eventbus") $root.Values.replication.enabled }}
        - name: replication
          containerPort: {{ include "zbus.replicationPort" $root }}
          protocol: TCP
        {{- end }}
        {{- if $k8sSpark }}
        - name: spark-driver
          containerPort: {{ $root.Values.sparkworker.spark.kubernetes.driverPort }}
          protocol: TCP
        - name: spark-blocks
          containerPort: {{ $root.Values.sparkworker.spark.kubernetes.blockManagerPort }}
          protocol: TCP
        {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: admin
        periodSeconds: {{ $root.Values.probes.startup.periodSeconds }}
        failureThreshold: {{ $root.Values.probes.startup.failureThreshold }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: admin
        periodSeconds: {{ $root.Values.probes.liveness.periodSeconds }}
        timeoutSeconds: {{ $root.Values.probes.liveness.timeoutSeconds }}
        failureThreshold: {{ $root.Values.probes.liveness.failureThreshold }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: admin
        periodSeconds: {{ $root.Values.probes.readiness.periodSeconds }}
        timeoutSeconds: {{ $root.Values.probes.readiness.timeoutSeconds }}
        failureThreshold: {{ $root.Values.probes.readiness.failureThreshold }}
      resources:
        {{- toYaml $values.resources | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        - name: data
          mountPath: /var/lib/zbus
        {{- if $root.Values.curve.enabled }}
        - name: keys
          mountPath: /etc/zbus/keys
          readOnly: true
        {{- end }}
        {{- if and $root.Values.archive.existingClaim (has $name (list "eventbus" "sparkworker")) }}
        - name: archive
          mountPath: /var/lib/zbus-archive
        {{- end }}
        {{- if $k8sSpark }}
        - name: spark-templates
          mountPath: /etc/zbus/spark
          readOnly: true
        {{- end }}
  volumes:
    - name: tmp
      emptyDir: {}
    {{- if eq $c.kind "Deployment" }}
    {{- if and (eq $name "sparkworker") $values.persistence.existingClaim }}
    - name: data
      persistentVolumeClaim:
        claimName: {{ $values.persistence.existingClaim }}
    {{- else }}
    - name: data
      emptyDir: {}
    {{- end }}
    {{- else if not $values.persistence.enabled }}
    - name: data
      emptyDir: {}
    {{- end }}
    {{- if $root.Values.curve.enabled }}
    - name: keys
      secret:
        secretName: {{ include "zbus.secretName" $root }}
        defaultMode: 0440
        items:
          - key: {{ $name }}.key_secret
            path: {{ $name }}.key_secret
          {{- range (list "catalog" "eventbus" "broker") }}
          - key: {{ . }}.key
            path: {{ . }}.key
          {{- end }}
          {{- if has $name (list "catalog" "eventbus" "broker") }}
          {{- range $root.Values.curve.allowedClients }}
          - key: {{ . }}.key
            path: allowed/{{ . }}.key
          {{- end }}
          {{- end }}
    {{- end }}
    {{- if and $root.Values.archive.existingClaim (has $name (list "eventbus" "sparkworker")) }}
    - name: archive
      persistentVolumeClaim:
        claimName: {{ $root.Values.archive.existingClaim }}
    {{- end }}
    {{- if $k8sSpark }}
    - name: spark-templates
      configMap:
        name: {{ $fullname }}-spark-executor
    {{- end }}
  {{- with (default $root.Values.nodeSelector $values.nodeSelector) }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with (default $root.Values.tolerations $values.tolerations) }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with include "zbus.affinity" . }}
  affinity:
    {{- . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* The container's env beyond its ConfigMap: the Secret and the downward API. */}}
{{- define "zbus.env" -}}
{{- $root := .root }}
{{- $name := .name }}
{{- if or $root.Values.adminToken $root.Values.existingSecret }}
- name: ZBUS_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "zbus.secretName" $root }}
      key: admin-token
      optional: true
{{- end }}
{{- if has $name (list "worker" "sparkworker") }}
# Replicas register with the catalog under their own pod's name.
- name: ZBUS_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- if and (eq $name "eventbus") $root.Values.replication.enabled }}
# Each replica of the event bus is named after its pod, in its group (ZBUS_REPLICAS) and
# in the catalog.
- name: ZBUS_REPLICA_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: ZBUS_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- if eq $name "sparkworker" }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- with include "zbus.sparkConf" $root }}
- name: ZBUS_SPARK_CONF
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
