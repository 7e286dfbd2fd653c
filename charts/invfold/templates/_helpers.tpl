{{- define "invfold.labels" -}}
app.kubernetes.io/part-of: invfold
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image: (list root name tag), with its digest from images.digests (keyed by the name
without "invfold-") when one is set. */}}
{{- define "invfold.image" -}}
{{- $root := index . 0 -}}{{- $name := index . 1 -}}{{- $tag := index . 2 -}}
{{- $digest := get $root.Values.images.digests (trimPrefix "invfold-" $name) -}}
{{ $root.Values.images.registry }}/{{ $name }}:{{ $tag | default $root.Values.images.tag }}{{ if $digest }}@{{ $digest }}{{ end }}
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
{{- $root := index . 0 }}{{- $r := $root.Values.runtimes }}{{- $image := index . 1 }}{{- $sshd := index . 2 }}{{- $command := index . 3 -}}
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

{{/* Whether the chart may ask the cluster (lookup) about objects outside the release's namespace:
only an install with cluster rights (cluster-scoped runtimes); a tenant's lookup there would be
refused (Forbidden), which fails the whole render. */}}
{{- define "invfold.mayLookAround" -}}{{ if eq .Values.runtimes.kind "ClusterTrainingRuntime" }}true{{ end }}{{- end -}}

{{/* The object store's S3 endpoint: storage.endpoint, or with "auto" KFP's store as the cluster
serves it (kubeflow/pipelines manifests/kustomize/third-party/seaweedfs: KFP 2.16+ ships Service
`seaweedfs`, S3 on 8333; up to 2.15 `minio-service` on 9000). Without a cluster to ask (helm
template, lookup answers nothing; a tenant's install) the KFP 2.16+ name. */}}
{{- define "invfold.storageEndpoint" -}}
{{- $endpoint := .Values.storage.endpoint -}}
{{- if eq $endpoint "auto" -}}
{{- $ns := .Values.networkPolicies.kfpNamespace -}}
{{- if not (include "invfold.mayLookAround" .) -}}http://seaweedfs.{{ $ns }}:8333
{{- else if lookup "v1" "Service" $ns "seaweedfs" -}}http://seaweedfs.{{ $ns }}:8333
{{- else if lookup "v1" "Service" $ns "minio-service" -}}http://minio-service.{{ $ns }}:9000
{{- else -}}http://seaweedfs.{{ $ns }}:8333
{{- end -}}
{{- else -}}{{ $endpoint }}{{- end -}}
{{- end -}}

{{/* Where the jobs write: storage.root, or a root under the namespace's own keys in KFP's store.
In a profile namespace the profile controller's per-namespace credentials may write only
mlpipeline/{artifacts,private-artifacts/<ns>,private/<ns>,shared}/* (kubeflow/pipelines 2.17.0
manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py): another root
in that bucket fails the first write (AccessDenied), so it is refused here. */}}
{{- define "invfold.storageRoot" -}}
{{- $ns := .Release.Namespace -}}
{{- $root := .Values.storage.root -}}
{{- if and (not $root) (include "invfold.storageEndpoint" .) -}}
{{- $root = printf "s3://mlpipeline/private/%s/invfold" $ns -}}
{{- end -}}
{{- if and (hasPrefix "s3://mlpipeline/" $root) (ne $ns .Values.networkPolicies.kfpNamespace) -}}
{{- $allowed := list "s3://mlpipeline/artifacts/" "s3://mlpipeline/shared/" (printf "s3://mlpipeline/private/%s/" $ns) (printf "s3://mlpipeline/private-artifacts/%s/" $ns) -}}
{{- $ok := false -}}
{{- range $allowed -}}{{- if hasPrefix . (printf "%s/" (trimSuffix "/" $root)) -}}{{- $ok = true -}}{{- end -}}{{- end -}}
{{- if not $ok -}}
{{- fail (printf "storage.root %s: the profile's credentials in KFP's store may write only under %s (e.g. s3://mlpipeline/private/%s/invfold)" $root (join ", " $allowed) $ns) -}}
{{- end -}}
{{- end -}}
{{- $root -}}
{{- end -}}

{{/* NetworkPolicy egress rules to addresses outside the cluster: a list of {cidr, ports}. */}}
{{- define "invfold.ipEgress" -}}
{{- range . }}
- to:
    - ipBlock: {cidr: {{ .cidr }}}
  ports:
    {{- range (.ports | default (list 443)) }}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
{{- end }}
{{- end -}}

{{/* Trainer preflight: (list root crd), crd = the cluster's trainjobs.trainer.kubeflow.org CRD
(lookup; empty without a cluster to ask or without Trainer). The runtimes and the train step rely
on TrainJob.spec.runtimePatches (GPU placement, the workspace volume), which Trainer v2.1 lacks
(kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go: added in v2.2.0): the API server
would prune it silently. */}}
{{- define "invfold.trainerCheck" -}}
{{- $crd := index . 1 -}}
{{- if $crd -}}
{{- $found := false -}}
{{- range $crd.spec.versions -}}
{{- if eq .name "v1alpha1" -}}
{{- if hasKey (((.schema).openAPIV3Schema).properties.spec).properties "runtimePatches" -}}{{- $found = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail "Kubeflow Trainer v2.3 or later is needed: this cluster's TrainJob API (trainjobs.trainer.kubeflow.org v1alpha1) has no spec.runtimePatches (Trainer v2.1, as bundled by kubeflow/manifests 26.03), which would drop GPU placement and the workspace volume silently; upgrade Trainer" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether MLflow runs its basic-auth app: mlflow.auth.enabled, "auto" = in a profile namespace
(the release's namespace is not KFP's): "true" or "". */}}
{{- define "invfold.mlflowAuth" -}}
{{- $enabled := .Values.mlflow.auth.enabled -}}
{{- if eq (toString $enabled) "auto" -}}
{{- if ne .Release.Namespace .Values.networkPolicies.kfpNamespace -}}true{{- end -}}
{{- else if $enabled -}}true{{- end -}}
{{- end -}}
{{- define "invfold.mlflowAuthConfig" -}}{{ .Release.Name }}-mlflow-auth-config{{- end -}}
{{- define "invfold.mlflowServerSecret" -}}{{ .Release.Name }}-mlflow-server{{- end -}}
{{/* The internal database's URI without its password (libpq reads PGPASSWORD). */}}
{{- define "invfold.postgresUri" -}}
postgresql://{{ .Values.postgresql.username }}@{{ include "invfold.postgresName" . }}:5432/{{ .Values.postgresql.database }}
{{- end -}}
