{{- define "invfold.labels" -}}
app.kubernetes.io/part-of: invfold
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "invfold.image" -}}
{{- $root := index . 0 -}}{{- $name := index . 1 -}}{{- $tag := index . 2 -}}
{{ $root.Values.images.registry }}/{{ $name }}:{{ $tag | default $root.Values.images.tag }}
{{- end -}}

{{- define "invfold.mlflowName" -}}{{ .Release.Name }}-mlflow{{- end -}}
{{- define "invfold.postgresName" -}}{{ .Release.Name }}-postgresql{{- end -}}
{{- define "invfold.postgresSecret" -}}{{ .Values.postgresql.existingSecret | default (include "invfold.postgresName" .) }}{{- end -}}
{{/* Host headers MLflow accepts (--allowed-hosts; since MLflow 3.5 the default is localhost and
private IPs only): the Service's in-cluster names with and without the port, loopback for
port-forward, the ingress host, and mlflow.allowedHosts. /health is exempt upstream. */}}
{{- define "invfold.mlflowAllowedHosts" -}}
{{- $svc := include "invfold.mlflowName" . -}}{{- $ns := .Release.Namespace -}}{{- $port := .Values.mlflow.port -}}
{{- $hosts := list -}}
{{- range $name := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- $hosts = append $hosts $name -}}{{- $hosts = append $hosts (printf "%s:%v" $name $port) -}}
{{- end -}}
{{- $hosts = concat $hosts (list "localhost" "localhost:*" "127.0.0.1" "127.0.0.1:*") -}}
{{- if .Values.mlflow.ingress.enabled -}}
{{- $hosts = concat $hosts (list .Values.mlflow.ingress.host (printf "%s:*" .Values.mlflow.ingress.host)) -}}
{{- end -}}
{{- join "," (concat $hosts .Values.mlflow.allowedHosts) -}}
{{- end -}}

{{- define "invfold.trackingUri" -}}http://{{ include "invfold.mlflowName" . }}.{{ .Release.Namespace }}.svc.cluster.local:{{ .Values.mlflow.port }}{{- end -}}

{{/* Pod-level security context: non-root, RuntimeDefault seccomp; volumes (the RWX workspace,
PostgreSQL's data) group-writable by the images' gid, re-owned only when their root is not yet
(a recursive chown of a large shared volume at every pod start would stall the job). */}}
{{- define "invfold.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "invfold.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* A trainer pod template: (list root image sshd command). */}}
{{- define "invfold.trainerPod" }}
{{- $root := index . 0 }}{{- $r := $root.Values.runtimes }}{{- $image := index . 1 }}{{- $sshd := index . 2 }}{{- $command := index . 3 }}
metadata:
  labels:
    app.kubernetes.io/part-of: invfold
    app.kubernetes.io/instance: {{ $root.Release.Name }}
    invfold.dev/role: trainer
  # No Istio sidecar: it would intercept sshd, torchrun's rendezvous and NCCL/Gloo traffic between
  # pods and keep a finished pod running (KFP sets the same on its own pods).
  annotations:
    sidecar.istio.io/inject: "false"
spec:
  terminationGracePeriodSeconds: {{ $r.terminationGracePeriodSeconds }}
  {{- if $root.Values.priorityClasses.create }}
  priorityClassName: {{ $root.Values.priorityClasses.training }}
  {{- end }}
  automountServiceAccountToken: false
  securityContext: {{- include "invfold.podSecurityContext" $root | nindent 4 }}
  {{- if $r.gpu.enabled }}
  nodeSelector: {{- toYaml $r.gpu.nodeSelector | nindent 4 }}
  tolerations: {{- toYaml $r.gpu.tolerations | nindent 4 }}
  {{- end }}
  containers:
    - name: node
      image: {{ $image }}
      imagePullPolicy: {{ $root.Values.images.pullPolicy }}
      command: {{- toJson $command | nindent 8 }}
      env:
        # An emptyDir (the root filesystem is read-only): caches (torch, triton, DeepSpeed) and
        # ssh's home; Trainer mounts the MPI key pair inside it at sshAuthMountPath.
        - {name: HOME, value: /home/invfold}
        {{- if $r.gpu.enabled }}
        - {name: TORCH_NCCL_ASYNC_ERROR_HANDLING, value: "1"}
        - {name: NCCL_DEBUG, value: WARN}
        {{- end }}
      ports:
        {{- if $sshd }}
        - {name: sshd, containerPort: 2222, protocol: TCP}
        {{- else }}
        - {name: rendezvous, containerPort: 29500, protocol: TCP}
        {{- end }}
      {{- if $sshd }}
      readinessProbe:
        tcpSocket: {port: 2222}
        initialDelaySeconds: 2
        periodSeconds: 5
      {{- end }}
      resources:
        requests:
          {{- toYaml $r.resources.requests | nindent 10 }}
          {{- if $r.gpu.enabled }}
          nvidia.com/gpu: {{ $r.gpu.perNode | quote }}
          {{- end }}
        limits:
          {{- toYaml $r.resources.limits | nindent 10 }}
          {{- if $r.gpu.enabled }}
          nvidia.com/gpu: {{ $r.gpu.perNode | quote }}
          {{- end }}
      securityContext: {{- include "invfold.containerSecurityContext" $root | nindent 8 }}
      volumeMounts:
        - {name: tmp, mountPath: /tmp}
        - {name: home, mountPath: /home/invfold}
        - {name: dshm, mountPath: /dev/shm}
  volumes:
    - name: tmp
      emptyDir: {}
    - name: home
      emptyDir: {}
    - name: dshm
      emptyDir: {medium: Memory, sizeLimit: {{ $r.sharedMemory }}}
{{- end }}
