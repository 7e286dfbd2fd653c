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

{{/* images.pullSecrets as a pod spec's imagePullSecrets (nothing when none): every pod the chart
renders carries it (tests/deploy/test_pull_secrets.py walks them all). */}}
{{- define "invfold.imagePullSecrets" -}}
{{- with .Values.images.pullSecrets -}}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* The names of images.pullSecrets as a JSON list (the upload hook's IMAGE_PULL_SECRETS). */}}
{{- define "invfold.pullSecretNames" -}}
{{- $names := list -}}{{- range .Values.images.pullSecrets -}}{{- $names = append $names .name -}}{{- end -}}{{ toJson $names }}
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
  {{- with include "invfold.imagePullSecrets" $root }}{{ . | nindent 2 }}{{ end }}
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

{{/* A location in KFP's store that a profile's keys may write: (list root uri field endpoint).
In a profile namespace the profile controller's per-namespace credentials may write only
mlpipeline/{artifacts,private-artifacts/<ns>,private/<ns>,shared}/* (kubeflow/pipelines 2.16.0
and 2.17.0 manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py):
another key in that bucket fails the first write (AccessDenied). KFP's store itself (endpoint
seaweedfs.<kfp ns> or minio-service.<kfp ns>) holds only the bucket `mlpipeline` (its init
creates no other: manifests/kustomize/third-party/seaweedfs/base/seaweedfs/seaweedfs-deployment.yaml).
Either is refused here; renders nothing. */}}
{{- define "invfold.kfpStoreCheck" -}}
{{- $root := index . 0 -}}{{- $uri := index . 1 -}}{{- $field := index . 2 -}}{{- $endpoint := index . 3 -}}
{{- $ns := $root.Release.Namespace -}}{{- $kfp := $root.Values.networkPolicies.kfpNamespace -}}
{{- $host := regexReplaceAll "^[a-z]+://([^/:]+).*$" $endpoint "${1}" -}}
{{- $kfpStore := has $host (list (printf "seaweedfs.%s" $kfp) (printf "seaweedfs.%s.svc" $kfp) (printf "seaweedfs.%s.svc.cluster.local" $kfp) (printf "minio-service.%s" $kfp) (printf "minio-service.%s.svc" $kfp) (printf "minio-service.%s.svc.cluster.local" $kfp)) -}}
{{- if and $kfpStore (hasPrefix "s3://" $uri) (not (hasPrefix "s3://mlpipeline/" $uri)) -}}
{{- fail (printf "%s %s: KFP's store at %s has only the bucket mlpipeline (KFP creates no other); use s3://mlpipeline/private/%s/... or another store" $field $uri $endpoint $ns) -}}
{{- end -}}
{{- if and (hasPrefix "s3://mlpipeline/" $uri) (ne $ns $kfp) -}}
{{- $allowed := list "s3://mlpipeline/artifacts/" "s3://mlpipeline/shared/" (printf "s3://mlpipeline/private/%s/" $ns) (printf "s3://mlpipeline/private-artifacts/%s/" $ns) -}}
{{- $ok := false -}}
{{- range $allowed -}}{{- if hasPrefix . (printf "%s/" (trimSuffix "/" $uri)) -}}{{- $ok = true -}}{{- end -}}{{- end -}}
{{- if not $ok -}}
{{- fail (printf "%s %s: the profile's credentials in KFP's store may write only under %s (e.g. s3://mlpipeline/private/%s/invfold)" $field $uri (join ", " $allowed) $ns) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Where the jobs write: storage.root, or a root under the namespace's own keys in KFP's store
(checked by invfold.kfpStoreCheck). */}}
{{- define "invfold.storageRoot" -}}
{{- $ns := .Release.Namespace -}}
{{- $root := .Values.storage.root -}}
{{- if and (not $root) (include "invfold.storageEndpoint" .) -}}
{{- $root = printf "s3://mlpipeline/private/%s/invfold" $ns -}}
{{- end -}}
{{- include "invfold.kfpStoreCheck" (list . $root "storage.root" (include "invfold.storageEndpoint" .)) -}}
{{- $root -}}
{{- end -}}

{{/* MLflow's artifact store: mlflow.artifacts.s3EndpointUrl, "auto" = the steps' store
(invfold.storageEndpoint; "" there is AWS S3). */}}
{{- define "invfold.mlflowS3Endpoint" -}}
{{- $url := .Values.mlflow.artifacts.s3EndpointUrl -}}
{{- if eq $url "auto" -}}{{ include "invfold.storageEndpoint" . }}{{- else -}}{{ $url }}{{- end -}}
{{- end -}}

{{/* Where MLflow keeps artifacts: mlflow.artifacts.destination, or, on KFP's store, a prefix the
namespace's keys may write (s3://mlpipeline/private/<ns>/mlflow); checked as storage.root is. */}}
{{- define "invfold.mlflowArtifacts" -}}
{{- $dest := .Values.mlflow.artifacts.destination -}}
{{- $endpoint := include "invfold.mlflowS3Endpoint" . -}}
{{- if not $dest -}}
{{- $dest = printf "s3://mlpipeline/private/%s/mlflow" .Release.Namespace -}}
{{- end -}}
{{- include "invfold.kfpStoreCheck" (list . $dest "mlflow.artifacts.destination" $endpoint) -}}
{{- $dest -}}
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

{{/* Whether MLflow runs its basic-auth app (mlflow.auth.enabled, on by default in every namespace,
KFP's own included, where every KFP pod may reach it): "true" or "". */}}
{{- define "invfold.mlflowAuth" -}}{{ if .Values.mlflow.auth.enabled }}true{{ end }}{{- end -}}
{{- define "invfold.mlflowAuthConfig" -}}{{ .Release.Name }}-mlflow-auth-config{{- end -}}
{{/* MLflow's admin account (MLFLOW_AUTH_ADMIN_*): only the MLflow server holds it. The steps and
`helm test` hold mlflow.auth.clientSecret, an account without admin rights (mlflowStepsUser). */}}
{{- define "invfold.mlflowAdminSecret" -}}{{ .Release.Name }}-mlflow-admin{{- end -}}
{{- define "invfold.mlflowStepsUser" -}}invfold-steps{{- end -}}
{{- define "invfold.mlflowServerSecret" -}}{{ .Release.Name }}-mlflow-server{{- end -}}
{{/* The internal database's URI without its password (libpq reads PGPASSWORD). The driver is
named: SQLAlchemy 2.1 takes `postgresql://` for psycopg 3, and the MLflow image has psycopg2. */}}
{{- define "invfold.postgresUri" -}}
postgresql+psycopg2://{{ .Values.postgresql.username }}@{{ include "invfold.postgresName" . }}:5432/{{ .Values.postgresql.database }}
{{- end -}}

{{/* An IPv4 address as an integer. */}}
{{- define "invfold.ipv4" -}}
{{- $p := splitList "." . -}}{{ add (mul (atoi (index $p 0)) 16777216) (mul (atoi (index $p 1)) 65536) (mul (atoi (index $p 2)) 256) (atoi (index $p 3)) }}
{{- end -}}

{{/* Whether an IPv4 CIDR holds an address: (list cidr ip) -> "true" or "" (IPv6: not judged, "true"). */}}
{{- define "invfold.cidrHas" -}}
{{- $cidr := index . 0 -}}{{- $ip := index . 1 -}}
{{- if or (contains ":" $cidr) (contains ":" $ip) -}}true
{{- else -}}
{{- $net := splitList "/" $cidr -}}
{{- $size := 1 -}}{{- range until (sub 32 (atoi (index $net 1)) | int) -}}{{- $size = mul $size 2 -}}{{- end -}}
{{- if eq (div (atoi (include "invfold.ipv4" (index $net 0))) $size) (div (atoi (include "invfold.ipv4" $ip)) $size) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* The CIDRs step pods reach the Kubernetes API at, as JSON: (list root endpoints), endpoints =
Endpoints `kubernetes` in `default` (lookup at install; empty without a cluster to ask).
networkPolicies.kubeApiCidrs, else the API server's endpoint addresses (/32, /128): a pod's
packets to the `kubernetes` Service leave it for those addresses (kube-proxy's DNAT happens before
policy), so the Service IP itself admits nothing. Given CIDRs that miss an endpoint address are
refused. Without endpoints (helm template, a tenant's install) and without values: the private
ranges, which admit every private address on 443/6443 (set the value). */}}
{{- define "invfold.kubeApiCidrs" -}}
{{- $root := index . 0 -}}{{- $endpoints := index . 1 -}}
{{- $given := $root.Values.networkPolicies.kubeApiCidrs -}}
{{- $addresses := list -}}
{{- range ($endpoints | default dict).subsets -}}
{{- range .addresses -}}{{- $addresses = append $addresses .ip -}}{{- end -}}
{{- end -}}
{{- range $given -}}
{{- if or (eq . "0.0.0.0/0") (eq . "::/0") -}}
{{- fail "networkPolicies.kubeApiCidrs must name the API server's endpoint addresses (kubectl get endpoints kubernetes), not the whole internet" -}}
{{- end -}}
{{- end -}}
{{- range $ip := $addresses -}}
{{- if $given -}}
{{- $covered := false -}}
{{- range $given -}}{{- if include "invfold.cidrHas" (list . $ip) -}}{{- $covered = true -}}{{- end -}}{{- end -}}
{{- if not $covered -}}
{{- fail (printf "networkPolicies.kubeApiCidrs %s does not hold the API server's endpoint address %s (kubectl get endpoints kubernetes): step pods reach the API there after the Service's DNAT, not at the Service IP; set it to %s/32 or leave it empty to use the endpoints" (join "," $given) $ip $ip) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $given -}}{{ toJson $given }}
{{- else if $addresses -}}
{{- $cidrs := list -}}{{- range $addresses -}}{{- $cidrs = append $cidrs (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}{{- end -}}{{ toJson $cidrs }}
{{- else -}}["10.0.0.0/8","172.16.0.0/12","192.168.0.0/16"]
{{- end -}}
{{- end -}}

{{/* A claim's StorageClass exists: (list classes name field), classes = the cluster's StorageClass
list (lookup at install; empty without a cluster to ask, which skips the check). An empty name takes
the class marked storageclass.kubernetes.io/is-default-class: "true", and a cluster without one
(EKS clusters made since Kubernetes 1.30 mark none) would leave the claim Pending: refused, as is a
named class the cluster lacks. Renders nothing. */}}
{{- define "invfold.storageClassCheck" -}}
{{- $classes := index . 0 -}}{{- $name := index . 1 -}}{{- $field := index . 2 -}}
{{- if hasKey ($classes | default dict) "items" -}}
{{- $names := list -}}{{- $default := "" -}}
{{- range $classes.items -}}
{{- $names = append $names .metadata.name -}}
{{- if eq (index (.metadata.annotations | default dict) "storageclass.kubernetes.io/is-default-class" | default "") "true" -}}{{- $default = .metadata.name -}}{{- end -}}
{{- end -}}
{{- if and (not $name) (not $default) -}}
{{- fail (printf "%s is empty and this cluster has no default StorageClass (kubectl get storageclass; classes: %s): set %s to one of them (EKS: gp3 or gp2 with the EBS CSI driver; GKE: standard-rwo; AKS: managed-csi; docs/deploy.md, \"Storage classes per cloud\")" $field (join ", " $names | default "none") $field) -}}
{{- end -}}
{{- if and $name (not (has $name $names)) -}}
{{- fail (printf "%s %s: this cluster has no such StorageClass (kubectl get storageclass; classes: %s)" $field $name (join ", " $names | default "none")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
