#!/usr/bin/env bash
# A kind node image for machines that reach no image registry, assembled from Debian's packages, kind's own node
# files (they ship in the kind Go module) and Kubernetes built from Go modules. `kind build node-image` cannot do
# this offline: it fetches images inside its build container. Prints the node image's name on the last line.
#
# Steps, each cached (binaries in ~/.cache/tierpool, images in the Docker engine):
#   1. kind, kubelet, kubeadm, kube-scheduler, kube-proxy, kubectl, CoreDNS from Go modules (versions stamped:
#      kubeadm refuses an unstamped build); kube-apiserver, kube-controller-manager, etcd from
#      hack/build-control-plane.sh;
#   2. one image per control-plane component, tagged as `kubeadm config images list` names them;
#   3. a node base image: Debian's systemd, containerd 1.6, runc, CNI plugins + kind's node files;
#   4. the node image: binaries in /usr/bin, every image imported into its containerd (no unpack), committed.
# Differences from kind's own image, all for this machine: containerd runs with restrict_oom_score_adj (the VM
# lacks CAP_SYS_RESOURCE), and the pod network is a static ptp conflist (kindnetd is not on the module proxy), so
# clusters use `networking.disableDefaultCNI: true` and one node (hack/kind-ci.yaml).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s_version="${TIERPOOL_K8S_VERSION:-1.34.4}"
kind_version="${TIERPOOL_KIND_VERSION:-0.30.0}"
coredns_version="${TIERPOOL_COREDNS_VERSION:-1.12.1}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tierpool/kind"
bin="$cache/k8s-$k8s_version/bin"
node_image="tierpool-local/kind-node:v$k8s_version"
debian=tierpool-local/debian:bookworm
have() { docker image inspect "$1" >/dev/null 2>&1; }
log() { echo "build-kind-node: $*" >&2; }
start=$(date +%s)

if have "$node_image"; then echo "$node_image"; exit 0; fi
bash "$here/build-local-bases.sh" >/dev/null
cp_bin=$(bash "$here/build-control-plane.sh" | tail -1)
mkdir -p "$bin"

build_binaries() {
  [ -x "$bin/kind" ] || GOBIN="$bin" GOFLAGS=-mod=mod go install "sigs.k8s.io/kind@v$kind_version"
  [ -x "$bin/coredns" ] || GOBIN="$bin" CGO_ENABLED=0 go install -ldflags "-s -w" "github.com/coredns/coredns@v$coredns_version"
  local want=(kubelet kubeadm kube-scheduler kube-proxy kubectl) missing=() b
  for b in "${want[@]}"; do [ -x "$bin/$b" ] || missing+=("k8s.io/kubernetes/cmd/$b"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local src="$cache/src/k8s-$k8s_version" minor="0.${k8s_version#1.}" gomod stamp=""
  mkdir -p "$src" && cd "$src"
  go mod download -json "k8s.io/kubernetes@v$k8s_version" >/dev/null
  gomod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$k8s_version.mod"
  { printf 'module tierpool.local/kindnode\n\ngo 1.24\n\nrequire k8s.io/kubernetes v%s\n\n' "$k8s_version"
    grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v v="v$minor" '{print "replace " $1 " => " $1 " " v}'
  } > go.mod
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp="$stamp -X $p.gitVersion=v$k8s_version -X $p.gitMajor=${k8s_version%%.*} -X $p.gitMinor=$(cut -d. -f2 <<<"$k8s_version")"
    stamp="$stamp -X $p.gitTreeState=clean"
  done
  log "go build ${missing[*]}"
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $stamp" -o "$bin/" "${missing[@]}"
}

component_images() {
  local ctx image name
  ctx=$(mktemp -d)
  cp "$cp_bin"/{kube-apiserver,kube-controller-manager,etcd} "$bin"/{kube-scheduler,kube-proxy,coredns} "$ctx/"
  while read -r image; do
    name=${image##*/}; name=${name%%:*}
    have "$image" && continue
    case "$name" in
      kube-proxy) printf 'FROM %s\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables conntrack ipset kmod >/dev/null && rm -rf /var/lib/apt/lists/*\nCOPY kube-proxy /usr/local/bin/\n' "$debian" ;;
      coredns) printf 'FROM %s\nCOPY coredns /usr/local/bin/\nENTRYPOINT ["/usr/local/bin/coredns"]\n' "$debian" ;;
      pause) printf 'FROM %s\nSTOPSIGNAL SIGKILL\nENTRYPOINT ["sleep", "infinity"]\n' "$debian" ;;
      *) printf 'FROM %s\nCOPY %s /usr/local/bin/\n' "$debian" "$name" ;;
    esac > "$ctx/Dockerfile"
    log "image $image"
    docker build -q -t "$image" "$ctx" >/dev/null
  done < <("$bin/kubeadm" config images list --kubernetes-version "v$k8s_version")
  rm -rf "$ctx"
}

node_base_image() {
  local base="tierpool-local/kind-node-base:v$kind_version" ctx pause kind_src
  have "$base" && return 0
  ctx=$(mktemp -d)
  kind_src=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@v$kind_version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  cp -r "$kind_src/images/base/files" "$ctx/files"
  chmod -R u+w "$ctx/files"
  pause=$("$bin/kubeadm" config images list --kubernetes-version "v$k8s_version" | grep /pause:)
  sed -i -e "s|sandbox_image = .*|sandbox_image = \"$pause\"|" \
         -e 's|restrict_oom_score_adj = false|restrict_oom_score_adj = true|' "$ctx/files/etc/containerd/config.toml"
  cp "$here/kind-node-cni.conflist" "$ctx/10-ptp.conflist"
  cat > "$ctx/Dockerfile" <<DOCKER
FROM $debian
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 pigz fuse-overlayfs \
      e2fsprogs bash ca-certificates curl jq procps containerd runc containernetworking-plugins >/dev/null \
 && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/*
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY 10-ptp.conflist /etc/cni/net.d/10-ptp.conflist
RUN chmod 0755 /usr/local/bin/* /kind/bin/* \
 && ln -sf /usr/bin/containerd /usr/local/bin/containerd \
 && mkdir -p /opt/cni/bin && cp /usr/lib/cni/* /opt/cni/bin/ \
 && ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
 && ln -sf "\$(command -v systemd || echo /lib/systemd/systemd)" /sbin/init \
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
DOCKER
  log "node base image $base"
  docker build -q -t "$base" "$ctx" >/dev/null
  rm -rf "$ctx"
}

node_image() {
  local base="tierpool-local/kind-node-base:v$kind_version" cid image
  cid=$(docker run -d --privileged --tmpfs /run --tmpfs /tmp --entrypoint sleep "$base" infinity)
  # the id goes into the trap now: at exit the function's local is gone, and set -u failed the build on it
  trap "docker rm -f $cid >/dev/null 2>&1 || true" EXIT  # also when a step fails under set -e
  docker cp "$bin/kubeadm" "$cid:/usr/bin/kubeadm"
  docker cp "$bin/kubelet" "$cid:/usr/bin/kubelet"
  docker cp "$bin/kubectl" "$cid:/usr/bin/kubectl"
  docker exec "$cid" sh -c "echo v$k8s_version > /kind/version"
  docker exec -d "$cid" sh -c 'containerd >/tmp/containerd.log 2>&1'
  for _ in $(seq 1 30); do docker exec "$cid" ctr version >/dev/null 2>&1 && break; sleep 1; done
  while read -r image; do
    log "import $image"
    docker save "$image" | docker exec -i "$cid" ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests -
  done < <("$bin/kubeadm" config images list --kubernetes-version "v$k8s_version")
  docker exec "$cid" sh -c 'pkill containerd; sleep 2; rm -rf /tmp/*'
  docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' --change 'CMD []' \
    "$cid" "$node_image" >/dev/null
}

build_binaries
component_images
node_base_image
node_image
log "built in $(( $(date +%s) - start ))s"
echo "$node_image"
