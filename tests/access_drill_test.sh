#!/usr/bin/env bash
# The access and audit drill (docs/access.md), on the real binary with a
# reference engine on 127.0.0.1 port 0:
#  - roles: a tenant key infers but cannot scale (403 naming
#    deployments.scale); a key bound to `viewer` by a RoleBinding reads but
#    cannot change; a custom Role with a bad verb is refused naming it;
#  - single sign-on: keys made here with `openssl` (RSA 2048 and EC P-256),
#    a JWKS file, tokens signed with `openssl dgst`: RS256 and ES256 tokens
#    infer and act by their claims; a bad signature, alg none, a wrong
#    issuer or audience, an expired token, a key id not in the JWKS and a
#    token that maps to no role are each refused; the CLI sends
#    $GPUSCHED_TOKEN; the JWKS comes from a URL (an HTTP server the drill
#    runs), and a key the IdP adds later is picked up without a restart;
#  - audit: the scale and the refusals are recorded with who, role, peer and
#    diff, `gpusched audit` finds them, the JSON-lines export has them, the
#    log survives a restart, and `gpusched audit verify` passes, then fails
#    naming the record once the state file is edited behind gpusched's back;
#  - secrets: every output of the drill (the server's logs, every answer,
#    the events, the audit records and export, the CLI's output) is searched
#    for every key, token and private key it used: none appears.
# Usage: access_drill_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"
out="$tmp/outputs"  # every output the drill collects, searched at the end
mkdir -p "$out"

# --- Keys and tokens, made with openssl ----------------------------------
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$tmp/rsa.pem" 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/ec.pem" 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$tmp/stranger.pem" 2>/dev/null
modulus=$(openssl rsa -in "$tmp/rsa.pem" -noout -modulus | cut -d= -f2)
ecpub=$(openssl pkey -in "$tmp/ec.pem" -pubout -outform DER | tail -c 65 | od -An -tx1 | tr -d ' \n')
python3 - "$modulus" "$ecpub" >"$tmp/jwks.json" <<'PY'
import base64, json, sys
b = lambda h: base64.urlsafe_b64encode(bytes.fromhex(h)).rstrip(b"=").decode()
mod, ec = sys.argv[1], sys.argv[2]
print(json.dumps({"keys": [
    {"kty": "RSA", "kid": "rsa-1", "alg": "RS256", "use": "sig", "n": b(mod), "e": b("010001")},
    {"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": b(ec[2:66]), "y": b(ec[66:130])}]}))
PY
now=$(date +%s)
# mint ALG KID KEYFILE CLAIMS-JSON -> a JWT
mint() {
  local header payload sig
  header=$(printf '{"alg":"%s","kid":"%s","typ":"JWT"}' "$1" "$2" | basenc --base64url -w0 | tr -d '=')
  payload=$(printf '%s' "$4" | basenc --base64url -w0 | tr -d '=')
  printf '%s.%s' "$header" "$payload" >"$tmp/signing"
  if [ "$1" = ES256 ]; then
    # openssl signs DER; a JWT carries r || s.
    sig=$(openssl dgst -sha256 -sign "$3" "$tmp/signing" | python3 -c '
import sys, base64
d = sys.stdin.buffer.read()
def take(d, i):
    assert d[i] == 2; n = d[i + 1]; return d[i + 2:i + 2 + n], i + 2 + n
r, i = take(d, 2); s, _ = take(d, i)
raw = r.lstrip(b"\0").rjust(32, b"\0") + s.lstrip(b"\0").rjust(32, b"\0")
print(base64.urlsafe_b64encode(raw).rstrip(b"=").decode())')
  else
    sig=$(openssl dgst -sha256 -sign "$3" "$tmp/signing" | basenc --base64url -w0 | tr -d '=')
  fi
  printf '%s.%s.%s' "$header" "$payload" "$sig"
}
claims() {  # sub groups-json [extra json fields]
  printf '{"iss":"https://idp.test","aud":"gpusched","sub":"%s","groups":%s,"team":"team-a","exp":%d,"nbf":%d%s}' \
    "$1" "$2" $((now + 600)) $((now - 60)) "${3:-}"
}
tok_user=$(mint RS256 rsa-1 "$tmp/rsa.pem" "$(claims alice '["ml"]')")
tok_ec=$(mint ES256 ec-1 "$tmp/ec.pem" "$(claims bob '["ml"]')")
tok_ops=$(mint RS256 rsa-1 "$tmp/rsa.pem" "$(claims carol '["platform"]')")
tok_badsig=$(mint RS256 rsa-1 "$tmp/stranger.pem" "$(claims mallory '["platform"]')")
tok_none="$(printf '{"alg":"none","kid":"rsa-1"}' | basenc --base64url -w0 | tr -d '=').$(claims mallory '["platform"]' | basenc --base64url -w0 | tr -d '=')."
tok_iss=$(mint RS256 rsa-1 "$tmp/rsa.pem" "$(claims mallory '["platform"]' | sed 's#idp.test#evil.test#')")
tok_aud=$(mint RS256 rsa-1 "$tmp/rsa.pem" "$(claims mallory '["platform"]' | sed 's#"aud":"gpusched"#"aud":"other"#')")
tok_expired=$(mint RS256 rsa-1 "$tmp/rsa.pem" "$(printf '{"iss":"https://idp.test","aud":"gpusched","sub":"mallory","groups":["platform"],"exp":%d}' $((now - 3600)))")
tok_kid=$(mint RS256 rsa-9 "$tmp/rsa.pem" "$(claims mallory '["platform"]')")
tok_nothing=$(mint RS256 rsa-1 "$tmp/rsa.pem" "$(claims mallory '["marketing"]')")
admin="gs-$(head -c 30 /dev/urandom | basenc --base64url -w0)"

# The IdP's JWKS, served over HTTP from $tmp/idp (a key added there later is
# a key rotation). The server is ours: ended by pid at the end.
mkdir -p "$tmp/idp"
cp "$tmp/jwks.json" "$tmp/idp/jwks.json"
python3 - "$tmp/idp" "$tmp/idp.port" <<'PY' 2>"$tmp/idp.log" &
import functools, http.server, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
open(sys.argv[2], "w").write(str(server.server_address[1]))
server.serve_forever()
PY
idp_pid=$!
trap 'kill "$idp_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -s "$tmp/idp.port" ] && break; sleep 0.1; done
idp_port=$(cat "$tmp/idp.port")

cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
admin_key: $admin
audit: {export_path: $tmp/audit.jsonl}
oidc:
  issuer: https://idp.test
  audience: gpusched
  jwks_url: http://127.0.0.1:$idp_port/jwks.json
  tenant_claim: team
  claim_roles:
  - {claim: groups, value: ml, role: tenant-user}
  - {claim: groups, value: platform, role: operator}
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "16"]}
    replicas: 1
    tenant: team-a
tenants:
  - name: team-a
    models: [chat]
YAML
start_serve "$tmp/serve.yaml"
served_or_finish access_drill
tenant_key=$key
n=0
# credential method path [body]: the status in $code, the body in $last
# ($out/N.json; set here, not in a subshell, so later checks can read it).
call() {
  n=$((n + 1))
  last="$out/$n.json"
  code=$(curl -s -m 20 -o "$last" -w '%{http_code}' -X "$2" "$url$3" \
    -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
    ${4:+--data-binary "$4"})
}
expect() {  # what status credential method path [body]
  call "$3" "$4" "$5" "${6:-}"
  [ "$code" = "$2" ] || fail "$1: expected $2, got $code: $(cat "$last")"
}
chat='{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":2}'

# --- Roles ------------------------------------------------------------------
expect "tenant key infers" 200 "$tenant_key" POST /v1/chat/completions "$chat"
expect "tenant key scales" 403 "$tenant_key" POST /api/v1/deployments/chat/scale '{"replicas":1}'
expect_contains "$last" "lacks 'deployments.scale' on deployment/chat"
expect "admin makes a key" 201 "$admin" POST /api/v1/tenants/team-a/keys '{"name":"oncall"}'
made=$(jq_py 'j["secret"]' <"$last")
made_id=$(jq_py 'j["id"]' <"$last")
rm -f "$last"  # the one answer that carries a secret, by design
cat >"$tmp/roles.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: RoleBinding
metadata: {name: oncall}
spec:
  role: viewer
  subjects: [{kind: Key, name: $made_id}]
YAML
expect "admin binds viewer" 200 "$admin" POST /api/v1/apply "$(cat "$tmp/roles.yaml")"
expect "viewer reads gpus" 200 "$made" GET /api/v1/gpus
expect "viewer scales" 403 "$made" POST /api/v1/deployments/chat/scale '{"replicas":1}'
expect_contains "$last" "(viewer) lacks 'deployments.scale'"
expect "viewer infers" 403 "$made" POST /v1/chat/completions "$chat"
expect_contains "$last" "lacks 'models.infer'"
expect "viewer reads the audit log" 403 "$made" GET /api/v1/audit
expect "a role with a bad verb" 422 "$admin" POST /api/v1/apply \
  "$(printf 'apiVersion: gpusched.io/v1\nkind: Role\nmetadata: {name: r}\nspec:\n  rules:\n  - {verbs: [scal], resources: [deployments]}\n')"
expect_contains "$last" "Role/r: spec.rules[0].verbs[0]: unknown verb 'scal'"

# --- Tokens -----------------------------------------------------------------
expect "RS256 token infers" 200 "$tok_user" POST /v1/chat/completions "$chat"
expect "ES256 token infers" 200 "$tok_ec" POST /v1/chat/completions "$chat"
expect "user token scales" 403 "$tok_user" POST /api/v1/deployments/chat/scale '{"replicas":1}'
expect "operator token scales" 200 "$tok_ops" POST /api/v1/deployments/chat/scale '{"replicas":1}'
expect "operator token lists keys" 403 "$tok_ops" GET /api/v1/keys
expect_contains "$last" "lacks 'keys.list'"
for t in badsig:bad\ signature none:"alg 'none' is refused" iss:"is not https://idp.test" \
  aud:"audience is not gpusched" expired:"expired at" kid:"key id 'rsa-9' is not in the JWKS"; do
  name=${t%%:*}
  var="tok_$name"
  expect "token $name" 401 "${!var}" GET /api/v1/deployments
  expect_contains "$last" "${t#*:}"
done
expect "token mapping to nothing" 403 "$tok_nothing" GET /api/v1/deployments
expect_contains "$last" "maps to no role"
# Key rotation: the IdP adds rsa-2; a token signed with it is refused until
# gpusched reads the JWKS again (a kid it lacks makes it read, at most once
# per 10 s), then accepted, without a restart.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$tmp/rsa2.pem" 2>/dev/null
python3 - "$tmp/idp/jwks.json" "$(openssl rsa -in "$tmp/rsa2.pem" -noout -modulus | cut -d= -f2)" <<'PY'
import base64, json, sys
b = lambda h: base64.urlsafe_b64encode(bytes.fromhex(h)).rstrip(b"=").decode()
j = json.load(open(sys.argv[1]))
j["keys"].append({"kty": "RSA", "kid": "rsa-2", "alg": "RS256", "n": b(sys.argv[2]), "e": b("010001")})
open(sys.argv[1] + ".new", "w").write(json.dumps(j))
PY
mv "$tmp/idp/jwks.json.new" "$tmp/idp/jwks.json"
tok_rotated=$(mint RS256 rsa-2 "$tmp/rsa2.pem" "$(claims dave '["ml"]')")
rotated=""
for _ in $(seq 60); do
  call "$tok_rotated" POST /v1/chat/completions "$chat"
  if [ "$code" = 200 ]; then rotated=yes; break; fi
  sleep 1
done
[ -n "$rotated" ] || fail "a token of the rotated-in key rsa-2 was never accepted: $code $(cat "$last")"
grep -q '"GET /jwks.json' "$tmp/idp.log" || fail "the JWKS was not read over HTTP: $(cat "$tmp/idp.log")"
GPUSCHED_TOKEN=$tok_ops "$bin" get deployments --server "$url" >"$out/cli-get.txt" 2>&1 ||
  fail "gpusched get with \$GPUSCHED_TOKEN: $(cat "$out/cli-get.txt")"
expect_contains "$out/cli-get.txt" chat

# --- Audit ------------------------------------------------------------------
GPUSCHED_KEY=$admin "$bin" audit --server "$url" --resource deployment/chat --verb scale \
  >"$out/audit.txt" 2>&1 || fail "gpusched audit: $(cat "$out/audit.txt")"
expect_contains "$out/audit.txt" "token:carol"
expect_contains "$out/audit.txt" "operator"
expect_contains "$out/audit.txt" "127.0.0.1:"
GPUSCHED_KEY=$admin "$bin" audit --server "$url" --outcome denied -o json >"$out/denied.json" 2>&1
expect_contains "$out/denied.json" "lacks 'deployments.scale'"
expect_contains "$out/denied.json" "key:$made_id"
GPUSCHED_KEY=$admin "$bin" audit --server "$url" --resource rolebinding -o json >"$out/rb.json" 2>&1
expect_contains "$out/rb.json" '"verb": "apply"'
expect_contains "$out/rb.json" "\"name\": \"$made_id\""
expect_contains "$tmp/audit.jsonl" '"who":"token:carol"'
expect_contains "$tmp/audit.jsonl" '"diff":{"replicas":1}'
GPUSCHED_KEY=$admin "$bin" audit verify --server "$url" >"$out/verify.txt" 2>&1 ||
  fail "audit verify: $(cat "$out/verify.txt")"
expect_contains "$out/verify.txt" "audit log intact"
call "$admin" GET /api/v1/events
cp "$tmp/audit.jsonl" "$out/"
kill -TERM "$pid"
wait "$pid"
cp "$tmp/out" "$out/serve.out"
cp "$tmp/err" "$out/serve.err"

# The log survives a restart; an edit behind gpusched's back is found.
python3 - "$tmp/state.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("""UPDATE audit SET record = replace(record, '"who":"token:carol"', '"who":"token:dave"')""")
db.commit()
PY
start_serve "$tmp/serve.yaml"
served_or_finish access_drill
GPUSCHED_KEY=$admin "$bin" audit --server "$url" --verb scale >"$out/audit2.txt" 2>&1
expect_contains "$out/audit2.txt" "token:dave"
GPUSCHED_KEY=$admin "$bin" audit verify --server "$url" >"$out/verify2.txt" 2>&1
[ $? -eq 1 ] || fail "audit verify after tampering: expected exit 1"
expect_contains "$out/verify2.txt" "audit log TAMPERED: record"
expect_contains "$out/verify2.txt" "changed"
kill -TERM "$pid"
wait "$pid"
cat "$tmp/out" >>"$out/serve.out"
cat "$tmp/err" >>"$out/serve.err"
cp -r "$tmp/logs" "$out/engine-logs" 2>/dev/null

# --- Secrets ------------------------------------------------------------------
# serve hands a tenant's new key out once at start, on stdout: its
# "tenant T key:" line and the "try: curl" line that shows its use. Those are
# how the key is given, like the answer of POST .../keys; nothing else may
# hold a secret.
sed -i -e '/^tenant .* key: gs-/d' -e '/^try: curl /d' "$out/serve.out"
secrets=("$admin" "$tenant_key" "$made" "$tok_user" "$tok_ec" "$tok_ops" "$tok_badsig"
  "$tok_none" "$tok_iss" "$tok_aud" "$tok_expired" "$tok_kid" "$tok_nothing" "$tok_rotated")
for t in "$tok_user" "$tok_ec" "$tok_ops"; do secrets+=("${t##*.}"); done  # signatures
while read -r line; do secrets+=("$line"); done < <(grep -v -- '-----' "$tmp/rsa.pem" "$tmp/ec.pem" "$tmp/rsa2.pem" | cut -d: -f2)
files=$(find "$out" -type f | wc -l)
for s in "${secrets[@]}"; do
  [ ${#s} -ge 16 ] || continue
  hits=$(grep -rlF -- "$s" "$out" || true)
  [ -z "$hits" ] || fail "a secret (${s:0:6}...) appears in: $hits"
done
echo "searched $files outputs for ${#secrets[@]} secrets"
finish access_drill
