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
// The published schema lets unknown field names through (the API server
// drops them, or refuses them under kubectl's strict validation), and so
// does validate().  So field names are checked too, against the
// TypeScript declarations kubernetes-models generates from the same
// schema (its *.d.ts files): a field the object's type does not declare
// fails.  Inside a union type (int-or-string and the like) nothing is
// checked.
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

// ---- unknown field names -------------------------------------------------
//
// The schema lets any field name through, so the field names are checked
// against the TypeScript declarations that kubernetes-models generates
// from the same OpenAPI document (one interface per type, *.d.ts): a
// field an object's interface does not declare is a typo.

const dtsCache = new Map();

const KM_DIR = path.dirname(require.resolve('kubernetes-models'));
const AM_DIR = path.dirname(require.resolve('@kubernetes-models/apimachinery',
                                            { paths: [KM_DIR] }));

function tokenize(text) {
    text = text.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/\/\/[^\n]*/g, ' ');
    const re = /\s*("(?:[^"\\]|\\.)*"|[A-Za-z_$][\w$]*|\d+|[{}\[\]<>:;?|(),.=])/y;
    const out = [];
    let m;
    re.lastIndex = 0;
    while (re.lastIndex < text.length && (m = re.exec(text))) out.push(m[1]);
    return out;
}

// the declarations of one .d.ts file -> { imports: {name: file}, main }
function loadDts(file) {
    if (dtsCache.has(file)) return dtsCache.get(file);
    const entry = { imports: {}, main: { kind: 'leaf' } };
    dtsCache.set(file, entry);
    const text = fs.readFileSync(file, 'utf8');
    for (const m of text.matchAll(/import \{([^}]*)\} from "([^"]+)"/g)) {
        let target = null;
        if (m[2].startsWith('.')) {
            target = path.resolve(path.dirname(file), m[2]) + '.d.ts';
        } else if (m[2].startsWith('@kubernetes-models/apimachinery/')) {
            target = path.join(AM_DIR, m[2].slice(31)) + '.d.ts';
        }
        for (const n of m[1].split(',')) {
            const name = n.trim().split(/\s+as\s+/).pop();
            if (name) entry.imports[name] = target;
        }
    }
    const i = text.indexOf('export interface ');
    if (i < 0) return entry;                 // a type alias: a leaf
    const toks = tokenize(text.slice(i));
    let p = 3;                                // export interface IName
    const typeMeta = toks[p] === 'extends';
    while (toks[p] !== '{') p++;
    const ctx = { toks, p, file };
    const obj = parseType(ctx);
    if (typeMeta) {
        obj.props.apiVersion = { kind: 'leaf' };
        obj.props.kind = { kind: 'leaf' };
    }
    entry.main = obj;
    return entry;
}

// a type at ctx.p -> {kind: obj|arr|map|leaf|ref}
function parseType(ctx) {
    const t = ctx.toks;
    let res;
    if (t[ctx.p] === '{') {
        ctx.p++;
        if (t[ctx.p] === '[') {               // { [key: string]: T; }
            while (t[ctx.p] !== ']') ctx.p++;
            ctx.p += 2;                       // ] :
            res = { kind: 'map', of: parseType(ctx) };
            if (t[ctx.p] === ';') ctx.p++;
            ctx.p++;                          // }
        } else {
            const props = {};
            while (t[ctx.p] !== '}') {
                const name = JSON.parse(t[ctx.p++]);
                if (t[ctx.p] === '?') ctx.p++;
                ctx.p++;                      // :
                props[name] = parseType(ctx);
                if (t[ctx.p] === ';') ctx.p++;
            }
            ctx.p++;
            res = { kind: 'obj', props };
        }
    } else if (t[ctx.p] === 'Array' && t[ctx.p + 1] === '<') {
        ctx.p += 2;
        res = { kind: 'arr', of: parseType(ctx) };
        ctx.p++;                              // >
    } else if (/^[A-Za-z_]/.test(t[ctx.p])) {
        const name = t[ctx.p++];
        res = { kind: 'ref', name, file: ctx.file };
    } else {
        ctx.p++;                              // a literal
        res = { kind: 'leaf' };
    }
    if (t[ctx.p] === '|') {                   // a union: no check inside
        while (t[ctx.p] === '|') { ctx.p++; parseType(ctx); }
        res = { kind: 'leaf' };
    }
    return res;
}

function resolve(type) {
    while (type.kind === 'ref') {
        const target = loadDts(type.file).imports[type.name];
        if (!target || !fs.existsSync(target)) return { kind: 'leaf' };
        type = loadDts(target).main;
    }
    return type;
}

function unknownFields(value, type, where, out) {
    type = resolve(type);
    if (value === null || typeof value !== 'object') return out;
    if (type.kind === 'obj' && !Array.isArray(value)) {
        for (const [k, v] of Object.entries(value)) {
            if (!Object.prototype.hasOwnProperty.call(type.props, k)) {
                out.push(`${where}.${k}`);
            } else {
                unknownFields(v, type.props[k], `${where}.${k}`, out);
            }
        }
    } else if (type.kind === 'arr' && Array.isArray(value)) {
        value.forEach((v, i) => unknownFields(v, type.of, `${where}[${i}]`, out));
    } else if (type.kind === 'map' && !Array.isArray(value)) {
        for (const [k, v] of Object.entries(value)) {
            unknownFields(v, type.of, `${where}.${k}`, out);
        }
    }
    return out;
}

// the declaration file of a kind: kubernetes-models/<group>/<version>/<Kind>.d.ts
function dtsFor(apiVersion, kind) {
    const parts = apiVersion.split('/');
    const dir = parts.length === 1 ? parts[0] : path.join(parts[0], parts[1]);
    const f = path.join(KM_DIR, dir, kind + '.d.ts');
    return fs.existsSync(f) ? f : null;
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
        const dts = dtsFor(obj.apiVersion, obj.kind);
        let unknown = ['?'];
        try {
            if (dts) {
                unknown = unknownFields(obj, loadDts(dts).main, '', []);
            }
        } catch (e) {
            // a declaration file this parser does not understand: a
            // problem of the tool (another kubernetes-models), not of
            // the manifest
            console.error(`validate.cjs: reading the declarations of `
                          + `${obj.kind}: ${e.stack}`);
            process.exit(2);
        }
        if (unknown.length) {
            fail(`${where} ${obj.kind}/${name}`,
                 dts ? `unknown field ${unknown.map(u => u.slice(1)).join(', ')}`
                     : 'no declarations to check field names against');
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
