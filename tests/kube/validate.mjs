// Validates Kubernetes objects against the API's JSON Schemas (the
// "standalone-strict" ones in tests/kube/schemas/: additionalProperties
// false everywhere, so an unknown or misspelt field is an error, as with the
// API server's strict field validation). Run by tests/kube/manifests_test.sh
// on deploy/kubernetes/; usable on any manifest or on the objects gpusched
// sends to the API server.
//
// Usage: node tests/kube/validate.mjs [--allow-missing-schema] PATH...
//   PATH: a .json file (one object), a .yaml/.yml file (one or more YAML
//   documents; empty ones are skipped), or a directory (its .json, .yaml and
//   .yml files, recursively; symlinks are not followed).
//   kustomization.yaml (or .yml, or `kind: Kustomization`) is not a
//   Kubernetes object: each entry of its `resources:` must exist beside it.
//
// The schema of an object is the file whose x-kubernetes-group-version-kind
// names its apiVersion and kind, or a served version of a
// CustomResourceDefinition in schemas/crds/ (made strict, below). An object with no schema fails, unless
// --allow-missing-schema: then its metadata is still checked against
// ObjectMeta (from the official schemas) and the line says "skip".
// One line per object:
//   ok   FILE KIND NAME
//   FAIL FILE KIND NAME: /instancePath message; ...
//   skip FILE KIND NAME: no schema for APIVERSION KIND (metadata checked)
// then a summary. Exit 0 when nothing failed, 1 when something did, 2 on a
// usage error or a missing dependency.
//
// Bounds: 16 MiB per file, 10,000 objects in all.
//
// ajv, ajv-formats and yaml come from tests/e2e/node_modules (pinned in
// tests/e2e/package-lock.json, installed by scripts/install-deps.sh);
// GPUSCHED_E2E_DIR names another directory that has them.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const e2eDir = process.env.GPUSCHED_E2E_DIR || path.join(here, '..', 'e2e');
const schemaDir = process.env.GPUSCHED_KUBE_SCHEMAS || path.join(here, 'schemas');

const kMaxFileBytes = 16 * 1024 * 1024;
const kMaxObjects = 10000;
const kMaxErrorsShown = 20;

function loadDeps() {
  const require = createRequire(path.join(e2eDir, 'package.json'));
  try {
    const ajv = require('ajv');
    const formats = require('ajv-formats');
    const yaml = require('yaml');
    return { Ajv: ajv.default ?? ajv, addFormats: formats.default ?? formats, YAML: yaml };
  } catch (e) {
    console.error(`validate.mjs: ${e.message}\n(run scripts/install-deps.sh: npm ci in ${e2eDir})`);
    process.exit(2);
  }
}

const args = process.argv.slice(2);
let allowMissing = false;
const paths = [];
for (const a of args) {
  if (a === '--allow-missing-schema') allowMissing = true;
  else if (a.startsWith('--')) {
    console.error(`validate.mjs: unknown option ${a}`);
    process.exit(2);
  } else paths.push(a);
}
if (paths.length === 0) {
  console.error('usage: node validate.mjs [--allow-missing-schema] PATH...');
  process.exit(2);
}

const { Ajv, addFormats, YAML } = loadDeps();

// The schemas use the Kubernetes OpenAPI's annotation keywords; they are
// declared as such so that ajv's strict mode stays on for everything else.
const kKubeKeywords = [
  'x-kubernetes-group-version-kind', 'x-kubernetes-list-map-keys',
  'x-kubernetes-list-type', 'x-kubernetes-map-type',
  'x-kubernetes-patch-merge-key', 'x-kubernetes-patch-strategy',
  'x-kubernetes-preserve-unknown-fields', 'x-kubernetes-int-or-string',
  'x-kubernetes-embedded-resource', 'x-kubernetes-unions',
  'x-kubernetes-validations',
];
const ajv = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true });
ajv.addVocabulary(kKubeKeywords);
addFormats(ajv, ['date-time', 'byte']);
// OpenAPI's integer formats, checked rather than ignored.
ajv.addFormat('int32', {
  type: 'number',
  validate: (n) => Number.isInteger(n) && n >= -2147483648 && n <= 2147483647,
});
ajv.addFormat('int64', { type: 'number', validate: (n) => Number.isInteger(n) });
ajv.addFormat('double', { type: 'number', validate: () => true });

// apiVersion + ' ' + kind -> schema file, from each file's
// x-kubernetes-group-version-kind.
const schemaFiles = new Map();
let metadataSchema = null;
for (const f of fs.readdirSync(schemaDir).filter((n) => n.endsWith('.json')).sort()) {
  const s = JSON.parse(fs.readFileSync(path.join(schemaDir, f), 'utf8'));
  for (const gvk of s['x-kubernetes-group-version-kind'] ?? []) {
    const apiVersion = gvk.group ? `${gvk.group}/${gvk.version}` : gvk.version;
    const key = `${apiVersion} ${gvk.kind}`;
    if (!schemaFiles.has(key)) schemaFiles.set(key, f);
  }
  if (!metadataSchema && s.properties?.metadata?.description?.startsWith('ObjectMeta')) {
    metadataSchema = s.properties.metadata;
  }
}
// CustomResourceDefinitions (schemas/crds/*.yaml, as their projects ship
// them): each served version's openAPIV3Schema, made strict as the API server
// makes a structural schema with strict field validation (an unknown field
// is an error: additionalProperties false wherever properties are listed
// and unknown fields are not preserved), its metadata checked against
// ObjectMeta, its apiVersion and kind fixed.
const crdSchemas = new Map();  // apiVersion + ' ' + kind -> schema
function strictStructural(s) {
  if (Array.isArray(s)) return s.map(strictStructural);
  if (s === null || typeof s !== 'object') return s;
  const out = {};
  for (const [k, v] of Object.entries(s)) {
    out[k] = (k === 'properties' || k === 'patternProperties')
      ? Object.fromEntries(Object.entries(v).map(([pk, pv]) => [pk, strictStructural(pv)]))
      : (k === 'enum' || k === 'required' || k === 'x-kubernetes-validations' ||
         k === 'x-kubernetes-list-map-keys') ? v : strictStructural(v);
  }
  if (out.properties && out.additionalProperties === undefined &&
      !out['x-kubernetes-preserve-unknown-fields']) {
    out.additionalProperties = false;
  }
  return out;
}
const crdDir = path.join(schemaDir, 'crds');
if (fs.existsSync(crdDir)) {
  for (const f of fs.readdirSync(crdDir).filter((n) => /\.ya?ml$/.test(n)).sort()) {
    for (const doc of YAML.parseAllDocuments(fs.readFileSync(path.join(crdDir, f), 'utf8'))) {
      const crd = doc.toJS();
      if (crd?.kind !== 'CustomResourceDefinition') continue;
      for (const v of crd.spec?.versions ?? []) {
        const s = v.schema?.openAPIV3Schema;
        if (!v.served || !s) continue;
        const apiVersion = `${crd.spec.group}/${v.name}`;
        const schema = strictStructural(s);
        schema.properties = {
          ...schema.properties,
          apiVersion: { type: 'string', enum: [apiVersion] },
          kind: { type: 'string', enum: [crd.spec.names.kind] },
        };
        if (metadataSchema) schema.properties.metadata = metadataSchema;
        schema.required = [...new Set([...(schema.required ?? []), 'apiVersion', 'kind'])];
        crdSchemas.set(`${apiVersion} ${crd.spec.names.kind}`, { file: `crds/${f}`, schema });
      }
    }
  }
}
const compiled = new Map();  // file -> validate function
function validatorFor(file) {
  if (!compiled.has(file)) {
    const s = JSON.parse(fs.readFileSync(path.join(schemaDir, file), 'utf8'));
    // "http://json-schema.org/schema#" names no draft ajv knows; the
    // schemas are draft-04/07 compatible and ajv's default draft reads them.
    delete s.$schema;
    compiled.set(file, ajv.compile(s));
  }
  return compiled.get(file);
}
const validateMetadata = metadataSchema ? ajv.compile(metadataSchema) : null;

function describeErrors(errors) {
  const seen = new Set();
  const out = [];
  for (const e of errors ?? []) {
    let msg = `${e.instancePath || '/'} ${e.message}`;
    if (e.keyword === 'additionalProperties') msg = `${e.instancePath || '/'} has unknown field "${e.params.additionalProperty}"`;
    else if (e.keyword === 'enum') msg += ` (${e.params.allowedValues.map((v) => JSON.stringify(v)).join(', ')})`;
    if (seen.has(msg)) continue;
    seen.add(msg);
    out.push(msg);
  }
  const shown = out.slice(0, kMaxErrorsShown).join('; ');
  return out.length > kMaxErrorsShown ? `${shown}; ... (${out.length - kMaxErrorsShown} more)` : shown;
}

const counts = { ok: 0, fail: 0, skip: 0, objects: 0 };
function report(status, file, kind, name, detail) {
  counts[status.trim().toLowerCase()]++;
  console.log(`${status} ${file} ${kind} ${name}${detail ? `: ${detail}` : ''}`);
}

function nameOf(obj) {
  const m = obj?.metadata;
  if (m && typeof m === 'object') {
    if (typeof m.name === 'string' && m.name) return m.name;
    if (typeof m.generateName === 'string' && m.generateName) return `${m.generateName}*`;
  }
  return '-';
}

function isKustomizationFile(file) {
  return /^kustomization\.ya?ml$/i.test(path.basename(file)) || path.basename(file) === 'Kustomization';
}

function checkKustomization(file, obj) {
  const kind = 'Kustomization';
  const name = nameOf(obj);
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
    report('FAIL', file, kind, name, 'not a mapping');
    return;
  }
  const resources = obj.resources ?? [];
  if (!Array.isArray(resources)) {
    report('FAIL', file, kind, name, '/resources is not a list');
    return;
  }
  const problems = [];
  resources.forEach((r, i) => {
    if (typeof r !== 'string' || r === '') {
      problems.push(`/resources/${i} is not a path`);
    } else if (!fs.existsSync(path.resolve(path.dirname(file), r))) {
      problems.push(`/resources/${i} "${r}" does not exist`);
    }
  });
  if (problems.length) report('FAIL', file, kind, name, problems.join('; '));
  else report('ok  ', file, kind, name, `${resources.length} resources exist`);
}

function checkObject(file, obj, where) {
  if (++counts.objects > kMaxObjects) {
    console.log(`FAIL: more than ${kMaxObjects} objects; stopped`);
    counts.fail++;
    summaryAndExit();
  }
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
    report('FAIL', file, '-', where, 'not a Kubernetes object (expected a mapping)');
    return;
  }
  if (obj.kind === 'Kustomization') {
    checkKustomization(file, obj);
    return;
  }
  const kind = typeof obj.kind === 'string' && obj.kind ? obj.kind : '-';
  const name = nameOf(obj);
  if (typeof obj.apiVersion !== 'string' || kind === '-') {
    report('FAIL', file, kind, name, 'no apiVersion or kind');
    return;
  }
  const crd = crdSchemas.get(`${obj.apiVersion} ${kind}`);
  if (crd) {
    if (!compiled.has(crd.file + kind)) compiled.set(crd.file + kind, ajv.compile(crd.schema));
    const validate = compiled.get(crd.file + kind);
    if (validate(obj)) report('ok  ', file, kind, name);
    else report('FAIL', file, kind, name, describeErrors(validate.errors));
    return;
  }
  const file_ = schemaFiles.get(`${obj.apiVersion} ${kind}`);
  if (!file_) {
    const what = `no schema for ${obj.apiVersion} ${kind}`;
    if (!allowMissing) {
      report('FAIL', file, kind, name, `${what} in ${schemaDir}`);
      return;
    }
    if (validateMetadata && obj.metadata !== undefined && !validateMetadata(obj.metadata)) {
      report('FAIL', file, kind, name, `${what}; metadata: ${describeErrors(
        validateMetadata.errors.map((e) => ({ ...e, instancePath: `/metadata${e.instancePath}` })))}`);
      return;
    }
    report('skip', file, kind, name, `${what} (metadata checked)`);
    return;
  }
  const validate = validatorFor(file_);
  if (validate(obj)) report('ok  ', file, kind, name);
  else report('FAIL', file, kind, name, describeErrors(validate.errors));
}

function checkFile(file) {
  let st;
  try {
    st = fs.statSync(file);
  } catch (e) {
    report('FAIL', file, '-', '-', `cannot read: ${e.code ?? e.message}`);
    return;
  }
  if (st.size > kMaxFileBytes) {
    report('FAIL', file, '-', '-', `${st.size} bytes, over the ${kMaxFileBytes}-byte bound`);
    return;
  }
  const text = fs.readFileSync(file, 'utf8');
  if (file.endsWith('.json')) {
    let obj;
    try {
      obj = JSON.parse(text);
    } catch (e) {
      report('FAIL', file, '-', '-', `not JSON: ${e.message}`);
      return;
    }
    checkObject(file, obj, '-');
    return;
  }
  // YAML 1.2 (the yaml package's default); duplicate keys are errors.
  const docs = YAML.parseAllDocuments(text, { prettyErrors: false });
  const list = Array.isArray(docs) ? docs : [docs];  // an EmptyStream is no array
  let index = 0;
  for (const doc of list) {
    index++;
    if (doc.errors?.length) {
      report('FAIL', file, '-', `document ${index}`, `not YAML: ${doc.errors.map((e) => e.message).join('; ')}`);
      continue;
    }
    let obj;
    try {
      obj = doc.toJS({ maxAliasCount: 100 });
    } catch (e) {
      report('FAIL', file, '-', `document ${index}`, `not YAML: ${e.message}`);
      continue;
    }
    if (obj === null || obj === undefined) continue;  // an empty document
    if (isKustomizationFile(file)) checkKustomization(file, obj);
    else checkObject(file, obj, `document ${index}`);
  }
}

function collect(p, out) {
  let st;
  try {
    st = fs.lstatSync(p);
  } catch (e) {
    report('FAIL', p, '-', '-', `cannot read: ${e.code ?? e.message}`);
    return;
  }
  if (st.isDirectory()) {
    for (const n of fs.readdirSync(p).sort()) {
      const child = path.join(p, n);
      const cst = fs.lstatSync(child);
      if (cst.isDirectory()) collect(child, out);
      else if (cst.isFile() && /\.(json|ya?ml)$/i.test(n)) out.push(child);
    }
  } else {
    out.push(p);  // named explicitly: read whatever it is
  }
}

function summaryAndExit() {
  console.log(`${counts.ok} ok, ${counts.fail} failed, ${counts.skip} without a schema ` +
    `(${counts.objects} objects; schemas: ${schemaFiles.size} kinds and ${crdSchemas.size} ` +
    `custom resource versions in ${schemaDir})`);
  process.exit(counts.fail ? 1 : 0);
}

const files = [];
for (const p of paths) collect(p, files);
for (const f of files) checkFile(f);
summaryAndExit();
