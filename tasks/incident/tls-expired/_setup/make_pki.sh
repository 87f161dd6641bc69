#!/usr/bin/env bash
# Setup only: the internal CA, api.internal's key and CSR, and a certificate for it that was
# valid for 90 days and expired yesterday (issued with openssl ca's explicit dates).
set -euo pipefail
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout pki/ca.key -out pki/ca.pem -days 3650 -sha256 \
  -subj "/O=Shop/CN=Shop Internal CA" 2>/dev/null
openssl req "${ec[@]}" -keyout pki/server.key -out pki/server.csr -sha256 \
  -subj "/O=Shop/CN=api.internal" 2>/dev/null
chmod 0600 pki/ca.key pki/server.key
mkdir -p _setup/ca && : > _setup/ca/index.txt && echo 1001 > _setup/ca/serial
openssl ca -batch -notext -config _setup/ca.cnf -in pki/server.csr -out pki/server.pem \
  -extfile pki/server.ext \
  -startdate "$(date -u -d '-91 days' +%Y%m%d%H%M%SZ)" \
  -enddate "$(date -u -d '-1 day' +%Y%m%d%H%M%SZ)" 2>/dev/null
