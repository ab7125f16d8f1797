# shellcheck shell=bash
# The local node (hack/cluster/cluster up --node): a kubelet with its own containerd (Debian's,
# CRI plugin), runc, and the CNI bridge/host-local/loopback plugins on a pod network that exists
# only inside this machine. Sourced by hack/cluster/cluster after build.sh and pki.sh.
#
# Everything the node makes, and what `down` removes again:
#   bridge $NODE_BRIDGE ($NODE_GATEWAY/24 of $POD_SUBNET), made by this script; the CNI bridge
#     plugin only plugs veths into it (isGateway false: it never turns on IP forwarding, pods get
#     no default route, only a route to the Service range via the gateway)
#   iptables chains SG-NODE-NAT (nat PREROUTING, -i bridge) and SG-NODE-FWD (filter FORWARD):
#     the API server reaches pods' `kubernetes` Service (10.0.0.1:443) and $NODE_GATEWAY:6443
#     by DNAT to 127.0.0.1:<apiserver port> (route_localnet=1 on the bridge only); nothing is
#     forwarded between the bridge and any other interface (no NAT, no masquerade)
#   containerd: image store in $NODE_CACHE/containerd (kept: a cache), state, sockets, runc root,
#     network namespaces (netns_mounts_under_state_dir) and CNI IPAM data under $NODE_DIR
#   kubelet: root dir, pod logs and certificates under $NODE_DIR; cgroup parent
#     /$NODE_CGROUP in every cgroup v1 hierarchy (cgroupfs driver)
#   StorageClass sendgroup-local (default) and hostPath PersistentVolumes under $NODE_DIR/volumes

NODE_NAME=${SENDGROUP_NODE_NAME:-sendgroup-node}
NODE_BRIDGE=${SENDGROUP_NODE_BRIDGE:-sg0}
POD_SUBNET=${SENDGROUP_POD_SUBNET:-10.244.0.0/24}
NODE_GATEWAY=${POD_SUBNET%.*}.1
NODE_PV_COUNT=${SENDGROUP_NODE_PV_COUNT:-8}
# The node's containerd keeps its image store here, across ups (images are imported once per
# build by `hack/images/build load`); everything else of it lives in the state dir.
NODE_CACHE=${SENDGROUP_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sendgroup-operator/node}
# SENDGROUP_NODE_IMAGES: all (pause, worker, operator via `hack/images/build load`) or pause.
NODE_IMAGES=${SENDGROUP_NODE_IMAGES:-all}
NODE_START_TIMEOUT=${NODE_START_TIMEOUT:-180}

node_dir() { echo "$STATE_DIR/node"; }

# Names derived from the bridge, so two nodes (two bridges) never share a chain, a cgroup or an
# image store. Called after cluster.env (which records the node's settings) is loaded.
node_names() {
	NODE_GATEWAY=${POD_SUBNET%.*}.1
	NAT_CHAIN="SG-${NODE_BRIDGE^^}-NAT"
	FWD_CHAIN="SG-${NODE_BRIDGE^^}-FWD"
	NODE_CGROUP="sendgroup-$NODE_BRIDGE"
	NODE_CONTAINERD_ROOT="$NODE_CACHE/$NODE_BRIDGE/containerd"
}
node_names

# Debian packages the node needs; installed with apt when missing.
node_require() {
	local need=()
	# containerd and ctr come in one package: named once, whichever is missing
	{ command -v containerd && command -v ctr; } >/dev/null || need+=(containerd)
	command -v runc >/dev/null || need+=(runc)
	[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
		need+=(containernetworking-plugins)
	command -v iptables >/dev/null || need+=(iptables)
	command -v ip >/dev/null || need+=(iproute2)
	command -v pgrep >/dev/null || need+=(procps)
	if ((${#need[@]})); then
		log "installing Debian packages: ${need[*]}"
		# No init system here: policy-rc.d keeps Debian's scripts from starting system daemons.
		local prc=/usr/sbin/policy-rc.d created=0
		if [[ ! -e $prc ]]; then
			printf '#!/bin/sh\nexit 101\n' >"$prc" && chmod +x "$prc" && created=1
		fi
		local alog=$STATE_DIR/logs/apt.log
		mkdir -p "$STATE_DIR/logs"
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" ||
			{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"; }; } >"$alog" 2>&1 ||
			{ tail -n 20 "$alog" >&2; die "apt-get install ${need[*]} failed (log above, $alog)"; }
		((created)) && rm -f "$prc"
	fi
	[[ -d /sys/fs/cgroup/cpu ]] || die "the node expects cgroup v1 hierarchies under /sys/fs/cgroup (found none)"
}

# ---------------------------------------------------------------- network

node_network_up() {
	local nd
	nd=$(node_dir)
	if ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
		bridge_orphaned || die "bridge $NODE_BRIDGE exists already and its node runs (state $(bridge_owner)): run its down, or set SENDGROUP_NODE_BRIDGE"
		log "bridge $NODE_BRIDGE is left over from a node that was killed without down (state $(bridge_owner)): removing it and its iptables chains"
		node_network_remove "$NODE_BRIDGE"
	fi
	ip link add "$NODE_BRIDGE" type bridge
	echo "$NODE_BRIDGE" >"$nd/bridge"
	mkdir -p "$BRIDGE_OWNERS"
	echo "$STATE_DIR" >"$BRIDGE_OWNERS/$NODE_BRIDGE"
	ip addr add "$NODE_GATEWAY/${POD_SUBNET#*/}" dev "$NODE_BRIDGE"
	ip link set "$NODE_BRIDGE" up
	# Packets from pods DNATed to 127.0.0.1 must be routable: allowed on this bridge only.
	sysctl -qw "net.ipv4.conf.$NODE_BRIDGE.route_localnet=1"
	iptables -w -t nat -N "$NAT_CHAIN"
	iptables -w -t nat -A "$NAT_CHAIN" -d "${SERVICE_CLUSTER_IP_RANGE%.*}.1" -p tcp --dport 443 \
		-j DNAT --to-destination "127.0.0.1:$APISERVER_PORT"
	iptables -w -t nat -A "$NAT_CHAIN" -d "$NODE_GATEWAY" -p tcp --dport 6443 \
		-j DNAT --to-destination "127.0.0.1:$APISERVER_PORT"
	iptables -w -t nat -I PREROUTING -i "$NODE_BRIDGE" -j "$NAT_CHAIN"
	iptables -w -N "$FWD_CHAIN"
	iptables -w -A "$FWD_CHAIN" -i "$NODE_BRIDGE" ! -o "$NODE_BRIDGE" -j DROP
	iptables -w -A "$FWD_CHAIN" -o "$NODE_BRIDGE" ! -i "$NODE_BRIDGE" -j DROP
	iptables -w -I FORWARD -j "$FWD_CHAIN"
	mkdir -p "$nd/cni/net.d" "$nd/cni/ipam"
	cat >"$nd/cni/net.d/10-sendgroup.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sendgroup",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": false,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$nd/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$NODE_GATEWAY"}]],
        "routes": [{"dst": "$SERVICE_CLUSTER_IP_RANGE", "gw": "$NODE_GATEWAY"}]
      }
    }
  ]
}
EOF
	log "pod network $POD_SUBNET on bridge $NODE_BRIDGE (gateway $NODE_GATEWAY), API server for pods at $NODE_GATEWAY:6443 and ${SERVICE_CLUSTER_IP_RANGE%.*}.1:443"
}

# Who made each bridge: /run/sendgroup-operator/node-bridges/BRIDGE holds that node's state
# directory (/run is emptied at boot, with the bridges).
BRIDGE_OWNERS=/run/sendgroup-operator/node-bridges

bridge_owner() { cat "$BRIDGE_OWNERS/$NODE_BRIDGE" 2>/dev/null || echo unknown; }

# True when the bridge's node is gone: its owner record names a state directory whose kubelet
# and containerd are not running (a node killed without down), or there is no record and
# nothing is attached to the bridge. A live node's bridge is never taken.
bridge_orphaned() {
	local owner name pid
	owner=$(cat "$BRIDGE_OWNERS/$NODE_BRIDGE" 2>/dev/null) || owner=""
	if [[ -z $owner ]]; then
		[[ -z $(ip -o link show master "$NODE_BRIDGE" 2>/dev/null) ]]
		return
	fi
	for name in kubelet containerd; do
		pid=$(cat "$owner/pids/$name.pid" 2>/dev/null) || continue
		alive "$pid" && return 1
	done
	return 0
}

# Remove bridge $1 and the iptables chains named after it (SG-<BRIDGE>-NAT/-FWD).
node_network_remove() {
	local nat="SG-${1^^}-NAT" fwd="SG-${1^^}-FWD"
	if iptables -w -t nat -S "$nat" >/dev/null 2>&1; then
		while iptables -w -t nat -D PREROUTING -i "$1" -j "$nat" 2>/dev/null; do :; done
		iptables -w -t nat -F "$nat"
		iptables -w -t nat -X "$nat"
	fi
	if iptables -w -S "$fwd" >/dev/null 2>&1; then
		while iptables -w -D FORWARD -j "$fwd" 2>/dev/null; do :; done
		iptables -w -F "$fwd"
		iptables -w -X "$fwd"
	fi
	ip link del "$1" 2>/dev/null || true
	rm -f "$BRIDGE_OWNERS/$1"
}

# Only what this node made: a node refused at start-up (its bridge name in use) never made the
# bridge, chains or cgroups named after it, and a killed node whose bridge the next node took
# over (the owner record names that node) no longer owns them; neither takes them down.
node_owns_bridge() {
	local nd owner
	nd=$(node_dir)
	[[ -f "$nd/bridge" ]] || return 1
	owner=$(cat "$BRIDGE_OWNERS/$(<"$nd/bridge")" 2>/dev/null) || return 0
	[[ $owner == "$STATE_DIR" ]]
}

node_network_down() {
	local nd bridge
	nd=$(node_dir)
	bridge=$(<"$nd/bridge")
	node_network_remove "$bridge"
	log "removed bridge $bridge and its iptables chains"
	rm -f "$nd/bridge"
}

# ---------------------------------------------------------------- containerd

CONTAINERD_SOCK_NAME=containerd.sock

node_containerd_sock() { echo "$(node_dir)/containerd/$CONTAINERD_SOCK_NAME"; }
node_ctr() { ctr --address "$(node_containerd_sock)" -n k8s.io "$@"; }

write_node_containerd_config() {
	local nd=$1
	mkdir -p "$nd/containerd/state" "$nd/runc" "$NODE_CONTAINERD_ROOT/root" "$NODE_CONTAINERD_ROOT/opt"
	cat >"$nd/containerd/config.toml" <<EOF
# written by hack/cluster/cluster up --node
version = 2
root = "$NODE_CONTAINERD_ROOT/root"
state = "$nd/containerd/state"
oom_score = 0

[grpc]
  address = "$(node_containerd_sock)"

[ttrpc]
  address = "$(node_containerd_sock).ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_CONTAINERD_ROOT/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/sendgroup-pause:3.10"
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  # This machine denies lowering oom_score_adj even to root: clamp to containerd's own value.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    discard_unpacked_layers = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$nd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$nd/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ""
EOF
}

containerd_answers() { ctr --address "$(node_containerd_sock)" version; }

node_containerd_up() {
	local nd
	nd=$(node_dir)
	write_node_containerd_config "$nd"
	start_program containerd "$(command -v containerd)" --config "$nd/containerd/config.toml"
	wait_until "containerd" 60 containerd containerd_answers || die "containerd did not start (log $STATE_DIR/logs/containerd.log)"
	# Images: hack/images builds what changed and imports it into this containerd (a build
	# already imported is skipped).
	local t0 img missing=() images=(sendgroup-pause:3.10)
	t0=$(now_s)
	local ilog=$STATE_DIR/logs/images-load.log
	if [[ $NODE_IMAGES == pause ]]; then
		log "images: hack/images/build pause, imported into the node's containerd"
		{ "$REPO/hack/images/build" pause && "$REPO/hack/images/build" docker save sendgroup-pause:3.10 |
			node_ctr images import - ; } >"$ilog" 2>&1 ||
			{ tail -n 30 "$ilog" >&2; die "importing the pause image failed (log $ilog)"; }
	else
		# the tag hack/images/build gives them (SENDGROUP_IMAGE_TAG, default dev)
		images+=("sendgroup-worker:${SENDGROUP_IMAGE_TAG:-dev}" "sendgroup-operator:${SENDGROUP_IMAGE_TAG:-dev}")
		log "images: hack/images/build load (into the node's containerd; a cold machine builds them first: 10 min measured on 2 cores under load)"
		# Its progress lines (`HH:MM:SS images: ...`) go to the terminal too, everything to the log.
		SENDGROUP_CONTAINERD_ADDRESS=$(node_containerd_sock) "$REPO/hack/images/build" load 2>&1 |
			tee "$ilog" | { grep -a --line-buffered -E '^[0-9:]{8} images: ' || true; } | sed -u 's/^/    /' >&2 ||
			{ tail -n 30 "$ilog" >&2; die "hack/images/build load failed (log above, $ilog)"; }
	fi
	log "images ready ($(elapsed "$t0"))"
	for img in "${images[@]}"; do
		node_ctr images ls -q "name==docker.io/library/$img" | grep . >/dev/null || missing+=("$img")
	done
	((${#missing[@]} == 0)) || die "images missing in containerd k8s.io: ${missing[*]} (hack/images/build load)"
}

# Remove every CRI container and sandbox of this node's containerd (kills their processes).
node_containers_remove() {
	local ids id
	containerd_answers >/dev/null 2>&1 || return 0
	ids=$(node_ctr containers ls -q 'labels."io.cri-containerd.kind"' 2>/dev/null || true)
	[[ -n "$ids" ]] || return 0
	# Application containers before sandboxes (the pause processes hold the namespaces).
	local kind
	for kind in container sandbox; do
		for id in $(node_ctr containers ls -q "labels.\"io.cri-containerd.kind\"==$kind"); do
			node_ctr tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		for id in $(node_ctr containers ls -q "labels.\"io.cri-containerd.kind\"==$kind"); do
			local i
			for ((i = 0; i < 50; i++)); do
				node_ctr tasks delete "$id" >/dev/null 2>&1 && break
				node_ctr tasks ls -q 2>/dev/null | grep -x "$id" >/dev/null || break
				sleep 0.1
			done
			node_ctr containers delete "$id" >/dev/null 2>&1 || log "could not delete container $id"
		done
	done
	log "removed $(wc -w <<<"$ids") CRI containers/sandboxes"
	# CNI results cached for sandboxes that got no CNI DEL (their netns went with them).
	for id in $ids; do
		rm -f /var/lib/cni/results/*-"$id"-*
	done
}

# ---------------------------------------------------------------- kubelet

node_cgroups_create() {
	local h
	for h in /sys/fs/cgroup/*/; do
		[[ -f "$h/cgroup.procs" ]] || continue
		mkdir -p "$h$NODE_CGROUP"
		if [[ -f "$h/cpuset.cpus" ]]; then
			cat "$h/cpuset.cpus" >"$h$NODE_CGROUP/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h$NODE_CGROUP/cpuset.mems"
		fi
	done
}

node_cgroups_remove() {
	local h left=0 d
	for h in /sys/fs/cgroup/*/; do
		[[ -d "$h$NODE_CGROUP" ]] || continue
		# Deepest first; a cgroup with processes left cannot go (reported, never forced).
		while read -r d; do
			rmdir "$d" 2>/dev/null || left=1
		done < <(find "$h$NODE_CGROUP" -mindepth 0 -type d | awk '{print length($0) "\t" $0}' | sort -rn | cut -f2-)
	done
	((left == 0)) || log "some cgroups under /$NODE_CGROUP are still in use"
}

node_kubelet_up() {
	local nd kp kh
	nd=$(node_dir)
	read -r kp kh <<<"$(free_ports 2)"
	{
		echo "KUBELET_PORT=$kp"
		echo "KUBELET_HEALTHZ_PORT=$kh"
	} >>"$STATE_DIR/cluster.env"
	KUBELET_HEALTHZ_PORT=$kh
	pki_client_cert kubelet "system:node:$NODE_NAME" system:nodes
	write_kubeconfig "$nd/kubelet.kubeconfig" kubelet
	mkdir -p "$nd/kubelet" "$nd/pod-logs" "$nd/kubelet-pki"
	node_cgroups_create
	cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_GATEWAY
port: $kp
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kh
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $STATE_DIR/pki/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$(node_containerd_sock)
cgroupDriver: cgroupfs
cgroupRoot: /$NODE_CGROUP
failCgroupV1: false
failSwapOn: false
resolvConf: ""
clusterDomain: cluster.local
podLogsDir: $nd/pod-logs
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
registerNode: true
serializeImagePulls: false
maxPods: 110
EOF
	start_program kubelet "$BIN_DIR/kubelet" \
		--config="$nd/kubelet.yaml" \
		--kubeconfig="$nd/kubelet.kubeconfig" \
		--root-dir="$nd/kubelet" \
		--cert-dir="$nd/kubelet-pki" \
		--hostname-override="$NODE_NAME" \
		--node-ip="$NODE_GATEWAY" \
		--v=1
}

kubelet_healthy() { curl -fsS "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" | grep -qx ok; }
# Ready, and schedulable: the node-lifecycle controller removed the not-ready taint.
node_ready() {
	"$BIN_DIR/kubectl" --kubeconfig="$STATE_DIR/kubeconfig" get node "$NODE_NAME" \
		-o jsonpath='{.status.conditions[?(@.type=="Ready")].status} taints={.spec.taints}' | grep -qx 'True taints='
}

# A default StorageClass without a provisioner and hostPath PersistentVolumes it binds claims
# to (any uid may write: pods run as 10001 and hostPath ignores fsGroup, as local-path does).
node_volumes_up() {
	local nd i pvs=""
	nd=$(node_dir)
	for ((i = 1; i <= NODE_PV_COUNT; i++)); do
		mkdir -p "$nd/volumes/pv-$i"
		chmod 0777 "$nd/volumes/pv-$i"
		pvs+="---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: sendgroup-local-pv-$i
  labels: {sendgroups.io/local-node: \"true\"}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce, ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: sendgroup-local
  hostPath: {path: $nd/volumes/pv-$i, type: Directory}
"
	done
	"$BIN_DIR/kubectl" --kubeconfig="$STATE_DIR/kubeconfig" apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: sendgroup-local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
reclaimPolicy: Retain
$pvs
EOF
	log "default StorageClass sendgroup-local with $NODE_PV_COUNT hostPath PersistentVolumes in $nd/volumes"
}

node_up() {
	node_require
	local nd t0
	t0=$(now_s)
	nd=$(node_dir)
	mkdir -p "$nd"
	node_names
	# Host paths the kubelet/CNI use whatever their settings (device plugins, container log
	# links, CNI result cache): `down` removes those this node created, once no kubelet runs.
	local p
	: >"$nd/created-dirs"
	for p in /var/lib/kubelet /var/log/containers /var/lib/cni; do
		[[ -e $p ]] || echo "$p" >>"$nd/created-dirs"
	done
	{
		echo "NODE_NAME=$NODE_NAME"
		echo "NODE_BRIDGE=$NODE_BRIDGE"
		echo "POD_SUBNET=$POD_SUBNET"
		echo "NODE_GATEWAY=$NODE_GATEWAY"
		echo "NODE_CGROUP=$NODE_CGROUP"
	} >>"$STATE_DIR/cluster.env"
	node_network_up
	node_containerd_up
	node_kubelet_up
	wait_until "kubelet /healthz" 120 kubelet kubelet_healthy || die "kubelet is not healthy (log $STATE_DIR/logs/kubelet.log)"
	wait_until "node $NODE_NAME Ready" "$NODE_START_TIMEOUT" kubelet node_ready ||
		die "node $NODE_NAME did not become Ready (log $STATE_DIR/logs/kubelet.log)"
	node_volumes_up
	log "node $NODE_NAME Ready in $(elapsed "$t0")"
	elapsed "$t0" | tr -d s >"$STATE_DIR/node-startup-seconds"
}

# True while any kubelet (this node's or another's) is alive; zombies do not count.
kubelet_running() {
	local pid
	for pid in $(pgrep -x kubelet || true); do
		alive "$pid" && return 0
	done
	return 1
}

# Everything below $1 that is a mount point, deepest first.
mounts_under() {
	awk -v p="$1" '{ m = $5; gsub(/\\040/, " ", m); if (m == p || index(m, p "/") == 1) print m }' /proc/self/mountinfo |
		awk '{print length($0) "\t" $0}' | sort -rn | cut -f2-
}

node_down() {
	local nd m pid
	nd=$(node_dir)
	[[ -d "$nd" ]] || return 0
	node_names
	stop_component kubelet
	node_containers_remove
	stop_component containerd
	# Shims whose containerd was killed before it could stop them.
	for pid in $(pgrep -f "containerd-shim.*-address $(node_containerd_sock)" || true); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	while read -r m; do
		[[ -n "$m" ]] || continue
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
	done < <(mounts_under "$nd")
	# Symlinks the kubelet made in /var/log/containers to its pod logs.
	if [[ -d /var/log/containers ]]; then
		find /var/log/containers -maxdepth 1 -type l -lname "$nd/*" -delete 2>/dev/null || true
	fi
	if node_owns_bridge; then
		node_network_down
		node_cgroups_remove
	fi
	if [[ -s "$nd/created-dirs" ]] && ! kubelet_running; then
		local p
		while read -r p; do
			[[ $p == /var/* ]] && rm -rf --one-file-system "$p"
		done <"$nd/created-dirs"
	fi
}
