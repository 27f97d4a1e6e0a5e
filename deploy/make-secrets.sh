#!/bin/sh
# make-secrets.sh DIR [NAME...]: throw-away credentials for shoald, made with openssl into DIR:
#   ca.pem, ca.key          a private CA (P-256, 1 year) that signs the two certificates below
#   server.pem, server.key  shoald's certificate: SAN localhost, 127.0.0.1, shoal, and each NAME
#                           (an IP address or a DNS name, e.g. the Service's DNS name)
#   client.pem, client.key  a client certificate, for server.tls_client_ca (mutual TLS)
#   api-keys                one random API key (server.api_key_file's format)
#   scrape-key              the same key alone, for Prometheus (credentials_file)
# For docker-compose.secure.yml (deploy/secrets) and the Kubernetes Secrets (see the
# StatefulSet), and the TLS tests, which run it into a temporary directory. A real deployment
# should use its own CA; this one's private key sits next to the certificates.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 DIR [NAME...]" >&2; exit 2; }
dir=$1
shift
mkdir -p "$dir"
cd "$dir"
umask 077
san="DNS:localhost,IP:127.0.0.1,DNS:shoal"
for name in "$@"; do
  case $name in
    *[!0-9.]*) san="$san,DNS:$name" ;;
    *) san="$san,IP:$name" ;;
  esac
done
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -days 365 -subj "/CN=Shoal throw-away CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.pem
# sign NAME CN EXTENSIONS: NAME.key and NAME.pem, signed by the CA.
sign() {
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
sign server localhost "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=$san"
sign client shoal-client "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
rm -f ca.srl
[ -f api-keys ] || {
  openssl rand -hex 32 >scrape-key
  { echo "# one API key per line; shoald re-reads this file on SIGHUP" && cat scrape-key; } >api-keys
}
chmod 644 ca.pem server.pem client.pem
echo "make-secrets: CA, server and client certificates and api-keys in $PWD"
