#!/usr/bin/env node
// Validates Kubernetes manifests offline against the Kubernetes API
// schemas of the npm package kubernetes-models (version pinned in the
// Makefile, installed by `make npm-deps` into build/npm).
//
//   node deploy/k8s/validate.cjs [FILE.yaml | DIR] ...
//
// Default: every *.yaml and *.yml in this directory.  Each document of
// each file must have an apiVersion and kind that kubernetes-models
// knows (anything else fails: an unknown kind is a typo until proven
// otherwise), and must pass that model's validate(): types, required
// fields, enums and formats of the published OpenAPI schema.  A
// ConfigMap's *.json keys must parse as JSON.  YAML is read as YAML 1.1,
// as Kubernetes reads it (yes/no/on/off are booleans, 0444 is octal).
//
// Not caught: field names the schema does not know.  Kubernetes' schema
// allows them (the API server drops or, with kubectl's strict validation,
// refuses them), and so does kubernetes-models; see docs/deploy.md.
//
// NODE_PATH may name the node_modules to load from (t/deploy_k8s.t
// passes build/npm/node_modules).  Exit status: 0 all valid, 1 a
// manifest is invalid, 2 a usage or installation problem.

'use strict';

const fs = require('fs');
const path = require('path');

function need(name) {
    try {
        return require(name);
    } catch (e) {
        console.error(`validate.cjs: cannot load ${name} (make npm-deps; `
                      + `NODE_PATH=build/npm/node_modules): ${e.message}`);
        process.exit(2);
    }
}

const YAML = need('yaml');
const models = need('kubernetes-models');

// apiVersion "apps/v1" -> models.apps.v1; "node.k8s.io/v1" ->
// models.nodeK8sIo.v1; "v1" (the core group) -> models.v1
function groupKey(group) {
    return group.replace(/\.([a-z])/g, (m, c) => c.toUpperCase());
}

function modelFor(apiVersion, kind) {
    if (typeof apiVersion !== 'string' || typeof kind !== 'string') {
        return null;
    }
    const parts = apiVersion.split('/');
    let ns;
    if (parts.length === 1) {
        ns = models[parts[0]];
    } else if (parts.length === 2) {
        const g = models[groupKey(parts[0])];
        ns = g && g[parts[1]];
    }
    const M = ns && Object.prototype.hasOwnProperty.call(ns, kind)
              ? ns[kind] : null;
    // the class must say it is this kind (not a helper type)
    if (typeof M !== 'function' || M.kind !== kind
        || M.apiVersion !== apiVersion)
    {
        return null;
    }
    return M;
}

function files(args) {
    const out = [];
    for (const a of args.length ? args : [__dirname]) {
        const st = fs.statSync(a);
        if (st.isDirectory()) {
            for (const f of fs.readdirSync(a).sort()) {
                if (/\.ya?ml$/.test(f)) {
                    out.push(path.join(a, f));
                }
            }
        } else {
            out.push(a);
        }
    }
    return out;
}

let bad = 0, count = 0;

function fail(where, msg) {
    console.error(`INVALID ${where}: ${msg}`);
    bad++;
}

let list;
try {
    list = files(process.argv.slice(2));
} catch (e) {
    console.error(`validate.cjs: ${e.message}`);
    process.exit(2);
}

if (list.length === 0) {
    console.error('validate.cjs: no manifest found');
    process.exit(2);
}

for (const file of list) {
    const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'),
                                       { version: '1.1' });
    docs.forEach((doc, i) => {
        const where = `${file}#${i}`;
        if (doc.errors.length) {
            fail(where, `YAML: ${doc.errors.map(e => e.message).join('; ')}`);
            return;
        }
        const obj = doc.toJS();
        if (obj === null || obj === undefined) {
            return;                         // an empty document
        }
        count++;
        if (typeof obj !== 'object' || Array.isArray(obj)) {
            fail(where, 'not a mapping');
            return;
        }
        const M = modelFor(obj.apiVersion, obj.kind);
        if (!M) {
            fail(where, `unknown kind ${JSON.stringify(obj.kind)} of `
                        + `apiVersion ${JSON.stringify(obj.apiVersion)}`);
            return;
        }
        const name = (obj.metadata && obj.metadata.name) || '?';
        try {
            new M(obj).validate();
        } catch (e) {
            fail(`${where} ${obj.kind}/${name}`, e.message);
            return;
        }
        if (obj.kind === 'ConfigMap' && obj.data) {
            for (const [k, v] of Object.entries(obj.data)) {
                if (!/\.json$/.test(k)) {
                    continue;
                }
                try {
                    JSON.parse(v);
                } catch (e) {
                    fail(`${where} ConfigMap/${name} ${k}`, e.message);
                    return;
                }
            }
        }
        console.log(`ok ${where} ${obj.apiVersion} ${obj.kind}/${name}`);
    });
}

if (count === 0) {
    console.error('validate.cjs: no object in the manifests');
    process.exit(2);
}

process.exit(bad ? 1 : 0);
