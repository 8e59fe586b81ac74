// One chat completion through the official `openai` npm package, for
// t/openai_sdk.t.
//
//     NODE_PATH=build/npm/node_modules node t/sdk/chat.cjs BASE_URL PARAMS
//
// BASE_URL is what an application gives the SDK (http://host:port/v1);
// PARAMS is the JSON body handed to client.chat.completions.create(), so
// "stream": true makes it a streaming call.  The script prints, one
// "name value" line each (values JSON-encoded), what the SDK understood:
// the parsed completion or the chunks it yielded, a few response headers,
// or the error class and fields it raised.  The .t file compares these
// lines; nothing here decides whether the server is right.
//
// RLM_SDK_API_KEY is the client's key (default sk-client-side-key).
// RLM_SDK_SHAPES=1 also prints the fields OpenAI's answers carry that a
// plain client may never look at (x-request-id as the SDK's _request_id,
// system_fingerprint, logprobs, refusal, usage: null in every chunk but
// the usage chunk); RLM_SDK_REQUEST_ID sends an X-Request-Id of the
// client's.
// RLM_SDK_TRANSPORT picks how the SDK does HTTP:
//   fetch       (default) Node's built-in fetch (undici), handed to the SDK
//               as its `fetch` option; openai 5.x and later use it anyway.
//   node-fetch  the 4.x SDK's own default: node-fetch 2 with a keep-alive
//               agent.
//   node-fetch-close  the same without keep-alive.
// Why not always node-fetch: Node's June 2026 security releases (CVE-2026-
// 48931, also backported into Debian 12's nodejs 18.20.4+dfsg-1~deb12u3)
// attach a 'data' listener to idle keep-alive sockets, which node-fetch 2
// takes for a truncated chunked body: every chunked (SSE) answer then ends
// in "Premature close" whatever the server sends (nodejs/node#63989,
// node-fetch/node-fetch#1767).  Answers with a Content-Length are fine.
//
// CommonJS on purpose: NODE_PATH is honoured by require(), not by import.

'use strict';

const http = require('http');
const OpenAI = require('openai');

const ERROR_CLASSES = [
    'BadRequestError', 'AuthenticationError', 'PermissionDeniedError',
    'NotFoundError', 'ConflictError', 'UnprocessableEntityError',
    'RateLimitError', 'InternalServerError', 'APIConnectionTimeoutError',
    'APIConnectionError', 'APIUserAbortError', 'APIError',
];

function out(name, value) {
    process.stdout.write(name + ' '
        + (value === undefined ? 'undefined' : JSON.stringify(value)) + '\n');
}

// The most specific SDK error class the error is an instance of.
function errorClass(err) {
    for (const name of ERROR_CLASSES) {
        if (typeof OpenAI[name] === 'function' && err instanceof OpenAI[name]) {
            return name;
        }
    }
    return 'not an SDK error: ' + (err && err.constructor
                                   ? err.constructor.name : typeof err);
}

function headers(response) {
    out('http', response.status);
    out('content-type', response.headers.get('content-type'));
    out('x-rlm-attempts', response.headers.get('x-rlm-attempts'));
}

const SHAPES = process.env.RLM_SDK_SHAPES === '1';

function requestOptions() {
    const id = process.env.RLM_SDK_REQUEST_ID;
    return id ? { headers: { 'X-Request-Id': id } } : {};
}

async function complete(client, params) {
    const { data, response } =
        await client.chat.completions.create(params, requestOptions())
            .withResponse();

    headers(response);
    out('object', data.object);
    out('id', data.id);
    out('model', data.model);
    out('created', typeof data.created);
    out('choices', data.choices.length);
    out('role', data.choices[0].message.role);
    out('content', data.choices[0].message.content);
    out('finish_reason', data.choices[0].finish_reason);
    out('usage', data.usage);
    if (SHAPES) {
        out('_request_id', data._request_id);
        out('system_fingerprint', data.system_fingerprint);
        out('logprobs', data.choices[0].logprobs);
        out('refusal', data.choices[0].message.refusal);
    }
}

async function stream(client, params) {
    const { data, response } =
        await client.chat.completions.create(params, requestOptions())
            .withResponse();
    const objects = new Set();
    const fingerprints = new Set();
    const logprobs = new Set();
    const usages = [];          // per chunk: "null", "absent" or "usage"
    const ids = new Set();
    const deltas = [];
    let chunks = 0;
    let finish = null;
    let usage = null;
    let model = null;

    headers(response);

    // Print what arrived before a failure, then let main() report it.
    try {
        for await (const chunk of data) {
            chunks++;
            objects.add(chunk.object);
            ids.add(chunk.id);
            model = chunk.model;
            for (const choice of chunk.choices || []) {
                if (choice.delta && typeof choice.delta.content === 'string'
                    && choice.delta.content !== '')
                {
                    deltas.push(choice.delta.content);
                }
                if (choice.finish_reason) {
                    finish = choice.finish_reason;
                }
            }
            if (chunk.usage) {
                usage = chunk.usage;
            }
            fingerprints.add(chunk.system_fingerprint);
            for (const choice of chunk.choices || []) {
                logprobs.add(choice.logprobs);
            }
            usages.push(!('usage' in chunk) ? 'absent'
                        : chunk.usage === null ? 'null' : 'usage');
        }
    } finally {
        out('chunks', chunks);
        out('objects', [...objects]);
        out('ids', [...ids]);
        out('model', model);
        out('deltas', deltas);
        out('content', deltas.join(''));
        out('finish_reason', finish);
        out('usage', usage);
        if (SHAPES) {
            out('x-request-id', response.headers.get('x-request-id'));
            out('system_fingerprints', [...fingerprints]);
            out('choice logprobs', [...logprobs]);
            out('chunk usage', usages);
        }
    }
}

async function main() {
    const [baseURL, json] = process.argv.slice(2);
    const params = JSON.parse(json);
    const transport = process.env.RLM_SDK_TRANSPORT || 'fetch';
    const options = {
        baseURL,
        apiKey: process.env.RLM_SDK_API_KEY || 'sk-client-side-key',
        maxRetries: 0,          // one request per call: the test counts
        timeout: 20000,
    };

    if (transport === 'fetch') {
        if (typeof globalThis.fetch !== 'function') {
            throw new Error('this node has no built-in fetch');
        }
        options.fetch = globalThis.fetch;

    } else if (transport === 'node-fetch-close') {
        options.httpAgent = new http.Agent({ keepAlive: false });

    } else if (transport !== 'node-fetch') {
        throw new Error('unknown RLM_SDK_TRANSPORT ' + transport);
    }

    const client = new OpenAI(options);

    try {
        if (params.stream) {
            await stream(client, params);
        } else {
            await complete(client, params);
        }
        out('result', 'ok');

    } catch (err) {
        out('result', 'error');
        out('class', errorClass(err));
        out('status', err.status);
        out('type', err.type);
        out('code', err.code);
        out('param', err.param);
        out('error.message', err.error ? err.error.message : undefined);
        out('message', err.message);
        if (SHAPES) {
            out('request_id', err.request_id);
        }
        if (err.headers) {
            // a plain object in openai 4.x, a Headers object later
            out('error content-type', typeof err.headers.get === 'function'
                ? err.headers.get('content-type')
                : err.headers['content-type']);
        }
    }
}

main().catch((err) => {
    process.stderr.write('chat.cjs: ' + (err && err.stack || err) + '\n');
    process.exit(1);
});
