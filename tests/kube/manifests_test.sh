#!/usr/bin/env bash
# The Kubernetes manifests of deploy/kubernetes/, checked without a cluster:
#  1. every object validates against the API's JSON Schemas
#     (tests/kube/schemas/, standalone-strict: unknown fields are errors) with
#     tests/kube/validate.mjs (ajv, from tests/e2e/node_modules); every kind
#     here has a schema (none may be validated without one). ClusterRole and
#     ClusterRoleBinding are also checked here by hand: only the fields of
#     rbac.authorization.k8s.io/v1, verbs from the API's set, no wildcards,
#     and exactly the grants gpusched needs;
#  2. the validator really rejects: a Pod with an unknown field (spec.foo), a
#     Pod whose image is a number, an unknown kind, a kustomization naming a
#     missing file, a ClusterRole rule with an unknown field, a
#     ClusterRoleBinding without roleRef;
#  3. kustomization.yaml lists every manifest there and each file it lists
#     exists;
#  4. the ConfigMap's serve.yaml is YAML with the serve config's fields, and
#     the objects agree with each other (names, labels, image, mount paths);
#     the HA shape of docs/ha.md: three gpusched instances (RollingUpdate
#     that never goes below three ready, readiness on /readyz, each one's id
#     and address from its Pod), a PodDisruptionBudget over them and one over
#     etcd, and serve.yaml's etcd endpoints naming exactly the members of the
#     etcd StatefulSet behind its headless Service.
# Nothing is applied to a cluster. Skips (exit 0) when node or
# tests/e2e/node_modules is missing; scripts/install-deps.sh installs both.
# Usage: manifests_test.sh SOURCE_DIR
set -u
src="${1:?usage: manifests_test.sh SOURCE_DIR}"
dir="$src/deploy/kubernetes"
e2e="$src/tests/e2e"
validate="$src/tests/kube/validate.mjs"
source "$src/tests/lib.sh"

if ! command -v node >/dev/null 2>&1; then
  echo "skipped: node is not installed (scripts/install-deps.sh installs it)"
  exit 0
fi
for p in ajv ajv-formats yaml; do
  if [ ! -f "$e2e/node_modules/$p/package.json" ]; then
    echo "skipped: no $p in $e2e/node_modules (scripts/install-deps.sh runs npm ci there)"
    exit 0
  fi
done

# 1. The manifests against the schemas. Without --allow-missing-schema, so an
# object whose kind has no schema fails.
node "$validate" "$dir" >"$tmp/valid.out" 2>&1
rc=$?
cat "$tmp/valid.out"
[ "$rc" -eq 0 ] || fail "deploy/kubernetes does not validate (exit $rc)"
skipped=$(awk '$1 == "skip" {print $3}' "$tmp/valid.out" | sort -u | tr '\n' ' ')
[ -z "$skipped" ] || fail "kinds validated without a schema: '$skipped' (none may be)"
for f in "$dir"/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] && continue
  grep -q "^ok   $f " "$tmp/valid.out" || fail "no object validated in $f"
done
for k in ClusterRole ClusterRoleBinding; do
  grep -q "^ok   $dir/[^ ]* $k " "$tmp/valid.out" || fail "no $k validated against its schema"
done

# 2. Objects the validator must reject, each with the reason.
mkdir -p "$tmp/bad"
cat >"$tmp/bad/unknown-field.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: unknown-field}
spec:
  foo: bar
  containers:
    - {name: engine, image: ghcr.io/gpusched/gpusched:0.1.0}
YAML
cat >"$tmp/bad/image-number.json" <<'JSON'
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "image-number"},
 "spec": {"containers": [{"name": "engine", "image": 5}]}}
JSON
cat >"$tmp/bad/unknown-kind.yaml" <<'YAML'
apiVersion: example.com/v1
kind: Widget
metadata: {name: widget}
YAML
mkdir -p "$tmp/bad/kust"
cat >"$tmp/bad/kust/kustomization.yaml" <<'YAML'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [missing.yaml]
YAML
cat >"$tmp/bad/clusterrole-unknown-field.yaml" <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: unknown-field}
rules:
  - {apiGroups: [""], resource: [pods], verbs: [get]}
YAML
cat >"$tmp/bad/clusterrolebinding-no-roleref.yaml" <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: no-roleref}
subjects:
  - {kind: ServiceAccount, name: gpusched, namespace: gpusched}
YAML
expect_reject() {  # file, text the FAIL line must hold
  node "$validate" "$1" >"$tmp/neg.out" 2>&1
  local rc=$?
  sed 's/^/  (expected to fail) /' "$tmp/neg.out"
  [ "$rc" -eq 1 ] || fail "$(basename "$1"): exit $rc, want 1"
  grep "^FAIL " "$tmp/neg.out" | grep -qF -- "$2" ||
    fail "$(basename "$1"): no FAIL line with '$2'"
}
expect_reject "$tmp/bad/unknown-field.yaml" '/spec has unknown field "foo"'
expect_reject "$tmp/bad/image-number.json" '/spec/containers/0/image must be string'
expect_reject "$tmp/bad/unknown-kind.yaml" 'no schema for example.com/v1 Widget'
expect_reject "$tmp/bad/kust" '"missing.yaml" does not exist'
expect_reject "$tmp/bad/clusterrole-unknown-field.yaml" '/rules/0 has unknown field "resource"'
expect_reject "$tmp/bad/clusterrolebinding-no-roleref.yaml" "/ must have required property 'roleRef'"
# The same good Pod passes, so the rejections above are about the fields.
sed 's/^  foo: bar$//' "$tmp/bad/unknown-field.yaml" >"$tmp/good.yaml"
node "$validate" "$tmp/good.yaml" >"$tmp/good.out" 2>&1 ||
  fail "the Pod without spec.foo does not validate: $(cat "$tmp/good.out")"

# 3 and 4. Kustomization, RBAC fields, serve.yaml, cross-references.
cat >"$tmp/checks.mjs" <<'JS'
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
const [dir, e2e] = process.argv.slice(2);
const YAML = createRequire(path.join(e2e, 'package.json'))('yaml');
let failed = 0;
const check = (ok, what) => { if (!ok) { failed++; console.log(`FAIL: ${what}`); } };
const load = (f) => YAML.parse(fs.readFileSync(path.join(dir, f), 'utf8'));

// Kustomization: what it lists exists, and it lists every manifest here.
const kust = load('kustomization.yaml');
check(kust.apiVersion === 'kustomize.config.k8s.io/v1beta1' && kust.kind === 'Kustomization',
  'kustomization.yaml is not a kustomize.config.k8s.io/v1beta1 Kustomization');
check(kust.namespace === 'gpusched', 'kustomization namespace is not gpusched');
const listed = kust.resources ?? [];
for (const r of listed) check(fs.existsSync(path.join(dir, r)), `kustomization lists ${r}, which does not exist`);
const files = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f) && f !== 'kustomization.yaml');
for (const f of files) check(listed.includes(f), `${f} is not listed in kustomization.yaml`);
check(new Set(listed).size === listed.length, 'kustomization lists a file twice');

const all = [];
for (const f of files) {
  for (const d of YAML.parseAllDocuments(fs.readFileSync(path.join(dir, f), 'utf8'))) {
    const o = d.toJS();
    if (o) all.push(o);
  }
}
const one = (kind, name) => all.find((o) => o.kind === kind && (name === undefined || o.metadata?.name === name));
const objs = {};
for (const o of all) objs[o.kind] ??= o;  // the first of each kind

// RBAC: exactly the fields of rbac.authorization.k8s.io/v1 (the schemas check
// them too; this does not depend on the schemas' snapshot), verbs from the
// API's set, no wildcards, and exactly the grants gpusched needs.
const only = (o, keys, where) => {
  check(o && typeof o === 'object' && !Array.isArray(o), `${where} is not a mapping`);
  for (const k of Object.keys(o ?? {})) check(keys.includes(k), `${where} has unknown field "${k}"`);
};
const strings = (a, where) => check(Array.isArray(a) && a.every((s) => typeof s === 'string'), `${where} is not a list of strings`);
const verbs = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete', 'deletecollection', '*'];
const cr = objs.ClusterRole;
only(cr, ['apiVersion', 'kind', 'metadata', 'rules', 'aggregationRule'], 'ClusterRole');
check(cr?.apiVersion === 'rbac.authorization.k8s.io/v1', 'ClusterRole apiVersion');
(cr?.rules ?? []).forEach((r, i) => {
  const w = `ClusterRole /rules/${i}`;
  only(r, ['apiGroups', 'resources', 'verbs', 'resourceNames', 'nonResourceURLs'], w);
  strings(r.verbs, `${w}/verbs`);
  strings(r.apiGroups, `${w}/apiGroups`);
  strings(r.resources, `${w}/resources`);
  for (const v of r.verbs ?? []) check(verbs.includes(v), `${w} has unknown verb "${v}"`);
  check(!(r.verbs ?? []).includes('*') && !(r.resources ?? []).includes('*'), `${w} uses a wildcard`);
});
// The grants gpusched needs, exactly.
const grants = new Set();
for (const r of cr?.rules ?? []) for (const g of r.apiGroups ?? []) for (const res of r.resources ?? []) for (const v of r.verbs ?? []) grants.add(`${g}|${res}|${v}`);
const want = ['|pods|get', '|pods|list', '|pods|watch', '|pods|create', '|pods|update', '|pods|patch', '|pods|delete',
  '|pods/binding|create', '|pods/status|patch', '|nodes|get', '|nodes|list', '|nodes|watch',
  '|podtemplates|get', '|podtemplates|create', '|podtemplates|delete',
  'autoscaling.x-k8s.io|provisioningrequests|get', 'autoscaling.x-k8s.io|provisioningrequests|create',
  'autoscaling.x-k8s.io|provisioningrequests|delete', 'karpenter.sh|nodepools|list'];
check(grants.size === want.length && want.every((g) => grants.has(g)),
  `ClusterRole grants ${[...grants].sort().join(' ')}; want ${want.sort().join(' ')}`);
const crb = objs.ClusterRoleBinding;
only(crb, ['apiVersion', 'kind', 'metadata', 'roleRef', 'subjects'], 'ClusterRoleBinding');
only(crb?.roleRef, ['apiGroup', 'kind', 'name'], 'ClusterRoleBinding /roleRef');
check(crb?.roleRef?.apiGroup === 'rbac.authorization.k8s.io' && crb?.roleRef?.kind === 'ClusterRole' &&
  crb?.roleRef?.name === cr?.metadata?.name, 'ClusterRoleBinding roleRef is not the ClusterRole');
(crb?.subjects ?? []).forEach((s, i) => only(s, ['apiGroup', 'kind', 'name', 'namespace'], `ClusterRoleBinding /subjects/${i}`));

// serve.yaml.
const ns = objs.Namespace?.metadata?.name;
const cm = objs.ConfigMap;
let serve = null;
try {
  serve = YAML.parse(cm?.data?.['serve.yaml'] ?? '', { uniqueKeys: true });
} catch (e) {
  check(false, `serve.yaml in the ConfigMap is not YAML: ${e.message}`);
}
check(serve && typeof serve === 'object', 'serve.yaml is not a mapping');
if (serve) {
  check(/^0\.0\.0\.0:8080$/.test(serve.listen), `serve.yaml listen is ${serve.listen}, want 0.0.0.0:8080`);
  check(typeof serve.log_dir === 'string' && serve.log_dir.startsWith('/var/lib/gpusched/'), 'serve.yaml log_dir is not on the work volume');
  check(!('state' in serve), 'serve.yaml names a SQLite state: the state is in etcd');
  const sts = one('StatefulSet', 'etcd');
  const members = Array.from({ length: sts?.spec?.replicas ?? 0 }, (_, i) => `http://etcd-${i}.${sts?.spec?.serviceName}:2379`);
  check(JSON.stringify(serve.store?.etcd?.endpoints) === JSON.stringify(members),
    `serve.yaml store.etcd.endpoints ${JSON.stringify(serve.store?.etcd?.endpoints)} are not the StatefulSet's members ${JSON.stringify(members)}`);
  const k = serve.kubernetes ?? {};
  check(k.namespace === ns, `serve.yaml kubernetes.namespace ${k.namespace} is not the Namespace ${ns}`);
  check(!('api_server' in k) && !('kubeconfig' in k), 'serve.yaml names an API server or kubeconfig (in-cluster credentials are used)');
  check(k.node_selector?.['gpusched.io/managed'] === 'true', 'serve.yaml node_selector is not gpusched.io/managed: "true"');
  check(Array.isArray(k.tolerations) && k.tolerations.includes('gpusched.io/dedicated'), 'serve.yaml does not tolerate gpusched.io/dedicated');
  check(Array.isArray(serve.deployments) && serve.deployments.length > 0, 'serve.yaml has no deployments');
  for (const d of serve.deployments ?? []) {
    const r = d.resources ?? {};
    check(['whole', 'fraction', 'mig'].some((kind) => kind in r), `serve.yaml deployment ${d.name}: resources ${JSON.stringify(r)} is not whole/fraction/mig`);
  }
}

// The objects agree with each other.
const dep = one('Deployment', 'gpusched');
const pod = dep?.spec?.template;
const c = pod?.spec?.containers?.[0] ?? {};
check(dep?.spec?.replicas === 3 && dep?.spec?.strategy?.type === 'RollingUpdate' &&
  dep?.spec?.strategy?.rollingUpdate?.maxUnavailable === 0, 'Deployment is not 3 replicas, RollingUpdate with maxUnavailable 0');
check(c.readinessProbe?.httpGet?.path === '/readyz', 'the readiness probe is not /readyz');
const args = c.args ?? [];
check(args[args.indexOf('--instance-id') + 1] === '$(POD_NAME)' &&
  /^http:\/\/\$\(POD_IP\):8080$/.test(args[args.indexOf('--advertise') + 1] ?? ''),
  `the args do not make each instance's id its Pod's name and its address its Pod's IP: ${JSON.stringify(args)}`);
for (const v of ['POD_NAME', 'POD_IP']) {
  check((c.env ?? []).some((e) => e.name === v && e.valueFrom?.fieldRef?.fieldPath), `the container has no ${v} from a fieldRef`);
}
// The disruption budgets: over the instances (two stay) and over etcd (a
// quorum stays).
const pdb = one('PodDisruptionBudget', 'gpusched');
check(pdb && pdb.spec?.minAvailable >= 2 && pdb.spec.minAvailable < dep?.spec?.replicas &&
  Object.entries(pdb.spec?.selector?.matchLabels ?? {}).every(([k, v]) => pod?.metadata?.labels?.[k] === v),
  'no PodDisruptionBudget keeps two of the instances');
const sts = one('StatefulSet', 'etcd');
const epdb = one('PodDisruptionBudget', 'etcd');
check(epdb && epdb.spec?.maxUnavailable === 1 &&
  Object.entries(epdb.spec?.selector?.matchLabels ?? {}).every(([k, v]) => sts?.spec?.template?.metadata?.labels?.[k] === v),
  "no PodDisruptionBudget keeps etcd's quorum");
const hs = one('Service', sts?.spec?.serviceName);
check(sts?.spec?.replicas === 3 && hs?.spec?.clusterIP === 'None', "etcd is not 3 members behind a headless Service of the StatefulSet's serviceName");
const eargs = sts?.spec?.template?.spec?.containers?.[0]?.args ?? [];
const ic = (eargs.find((a) => a.startsWith('--initial-cluster=')) ?? '').slice('--initial-cluster='.length);
check(ic === [0, 1, 2].map((i) => `etcd-${i}=http://etcd-${i}.${sts?.spec?.serviceName}:2380`).join(','),
  `etcd's --initial-cluster ${ic} is not its three members`);
check(/etcd:v3\.4\./.test(sts?.spec?.template?.spec?.containers?.[0]?.image ?? ''), 'etcd is not 3.4 (the version gpusched is tested with)');
check(pod?.spec?.serviceAccountName === objs.ServiceAccount?.metadata?.name, 'the Pod does not use the ServiceAccount');
check((crb?.subjects ?? []).some((s) => s.kind === 'ServiceAccount' && s.name === objs.ServiceAccount?.metadata?.name && s.namespace === ns),
  'ClusterRoleBinding does not name the ServiceAccount in the namespace');
for (const o of all) {
  if (['Namespace', 'ClusterRole', 'ClusterRoleBinding'].includes(o.kind)) continue;
  check(o?.metadata?.namespace === ns, `${o?.kind} ${o?.metadata?.name} is not in namespace ${ns}`);
}
check(serve && c.image === serve.kubernetes?.image, `the Deployment's image ${c.image} is not serve.yaml's kubernetes.image`);
check(serve && c.command?.[0] === serve.kubernetes?.engine_path, "the Deployment's command is not serve.yaml's engine_path");
const mounts = Object.fromEntries((c.volumeMounts ?? []).map((m) => [m.name, m]));
const vols = Object.fromEntries((pod?.spec?.volumes ?? []).map((v) => [v.name, v]));
const cfgArg = c.command?.[c.command.indexOf('--config') + 1];
const cfgVol = Object.values(vols).find((v) => v.configMap?.name === cm?.metadata?.name);
check(cfgVol && mounts[cfgVol.name] && cfgArg === `${mounts[cfgVol.name].mountPath}/serve.yaml`,
  `--config ${cfgArg} is not serve.yaml in the mounted ConfigMap`);
const keyVol = Object.values(vols).find((v) => v.secret?.secretName);
check(keyVol && serve && path.dirname(serve.admin_key_file ?? '') === mounts[keyVol.name]?.mountPath,
  "serve.yaml's admin_key_file is not in the mounted Secret");
check(Object.values(mounts).some((m) => m.mountPath === '/var/lib/gpusched' && vols[m.name]?.emptyDir), 'no work volume at /var/lib/gpusched');
const sc = c.securityContext ?? {};
check(sc.readOnlyRootFilesystem === true && sc.allowPrivilegeEscalation === false &&
  (sc.runAsNonRoot === true || pod?.spec?.securityContext?.runAsNonRoot === true), 'the container securityContext is not non-root, read-only, no privilege escalation');
for (const p of ['readinessProbe', 'livenessProbe']) check(c[p]?.httpGet?.port !== undefined, `the container has no HTTP ${p}`);
const svc = one('Service', 'gpusched');
const sel = svc?.spec?.selector ?? {};
check(Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => pod?.metadata?.labels?.[k] === v),
  "the Service's selector does not match the Pod's labels");
check(Object.entries(dep?.spec?.selector?.matchLabels ?? {}).every(([k, v]) => pod?.metadata?.labels?.[k] === v),
  "the Deployment's selector does not match its Pod's labels");
const portNames = new Set((c.ports ?? []).map((p) => p.name));
for (const p of svc?.spec?.ports ?? []) check(portNames.has(p.targetPort) || (c.ports ?? []).some((cp) => cp.containerPort === p.targetPort), `Service port ${p.name} targets no container port`);
check(serve && (c.ports ?? []).some((p) => p.containerPort === Number(String(serve.listen).split(':').pop())),
  "the container port is not serve.yaml's listen port");

console.log(failed ? `${failed} cross-check(s) failed` : `ok   kustomization, RBAC fields, serve.yaml and cross-references (${files.length} manifests)`);
process.exit(failed ? 1 : 0);
JS
node "$tmp/checks.mjs" "$dir" "$e2e" >"$tmp/checks.out" 2>&1
rc=$?
cat "$tmp/checks.out"
[ "$rc" -eq 0 ] || fail "the manifests' cross-checks failed (exit $rc)"

finish kube_manifests
