# shellcheck shell=bash
# Certificates and keys for one local cluster, made with openssl (Debian's). Sourced by
# hack/cluster/cluster. Layout in $STATE_DIR/pki (as envtest's control plane, one CA for
# serving and client certificates):
#   ca.crt/ca.key                 cluster CA (signs the serving cert and every client cert)
#   apiserver.crt/.key            serving cert: 127.0.0.1, localhost, kubernetes.default.svc...
#   sa.key/sa.pub                 service-account token signing key pair (RSA 2048)
#   <user>.crt/.key               client certs: admin (system:masters), kube-controller-manager,
#                                 kube-scheduler, apiserver-kubelet-client (for the node step)

pki_client_cert() { # name CN [O]
	local d=$STATE_DIR/pki name=$1 cn=$2 org=${3:-} subj
	subj="/CN=$cn"
	[[ -n "$org" ]] && subj="/O=$org$subj"
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$d/$name.key" -subj "$subj" -out "$d/$name.csr" 2>/dev/null
	openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
		-days 3650 -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') \
		-out "$d/$name.crt" 2>/dev/null
	rm -f "$d/$name.csr"
}

pki_generate() {
	local d=$STATE_DIR/pki
	mkdir -p "$d"
	chmod 700 "$d"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$d/ca.key" -out "$d/ca.crt" -days 3650 -subj "/CN=sendgroup-local-ca" \
		-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$d/apiserver.key" -subj "/CN=kube-apiserver" -out "$d/apiserver.csr" 2>/dev/null
	openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
		-extfile <(printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature,keyEncipherment' \
			'extendedKeyUsage=serverAuth' \
			"subjectAltName=IP:127.0.0.1,IP:${SERVICE_CLUSTER_IP_RANGE%.*}.1,IP:$NODE_GATEWAY,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local") \
		-out "$d/apiserver.crt" 2>/dev/null
	rm -f "$d/apiserver.csr"
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$d/sa.key" 2>/dev/null
	openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
	pki_client_cert admin admin system:masters
	pki_client_cert kube-controller-manager system:kube-controller-manager
	pki_client_cert kube-scheduler system:kube-scheduler
	pki_client_cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
}

# write_kubeconfig FILE USER: kubeconfig for the client cert pki/USER.{crt,key}, certs embedded.
write_kubeconfig() {
	local file=$1 user=$2 d=$STATE_DIR/pki
	cat >"$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$d/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$d/$user.crt")
    client-key-data: $(base64 -w0 "$d/$user.key")
contexts:
- name: $user@local
  context:
    cluster: local
    user: $user
current-context: $user@local
KC
	chmod 600 "$file"
}
