/*
 * ngx_rlm trajectory viewer.
 *
 * Everything the page shows from a trajectory is model output or code
 * output, so it is hostile: it only ever becomes text nodes
 * (createTextNode / textContent), never markup, and no attribute takes a
 * value from it.  Requests go to this origin only, with the key the user
 * typed (kept in sessionStorage, so it ends with the tab).
 */

(function () {
    'use strict';

    var API = '/v1';
    var KEY_ITEM = 'ngx_rlm.viewer.key';

    var state = { traj: null, index: 0, source: '' };

    function $(id) {
        return document.getElementById(id);
    }


    /* el('div', {className: 'x'}, 'text', child, ...): text stays text */

    function el(tag, props) {
        var node = document.createElement(tag);
        var i, c, k;

        for (k in props || {}) {
            if (k === 'className') {
                node.className = props[k];
            } else if (k === 'title' || k === 'type') {
                node.setAttribute(k, String(props[k]));
            } else if (k === 'open') {
                node.open = !!props[k];
            } else if (k === 'onclick') {
                node.addEventListener('click', props[k]);
            }
        }

        for (i = 2; i < arguments.length; i++) {
            c = arguments[i];
            if (c === null || c === undefined || c === false) {
                continue;
            }
            node.appendChild(typeof c === 'object' ? c
                             : document.createTextNode(String(c)));
        }

        return node;
    }

    function text(v) {
        if (v === null || v === undefined) {
            return '';
        }
        if (typeof v === 'string') {
            return v;
        }
        try {
            return JSON.stringify(v, null, 2);
        } catch (e) {
            return String(v);
        }
    }

    function num(v) {
        return typeof v === 'number' && isFinite(v) ? v : 0;
    }

    /* Unix seconds as ISO 8601, '' for what is not a usable time */

    function iso(v) {
        try {
            return typeof v === 'number'
                   ? new Date(v * 1000).toISOString().replace('.000Z', 'Z')
                   : '';
        } catch (e) {
            return '';
        }
    }

    function secs(v) {
        return typeof v === 'number' ? v.toFixed(2) + ' s' : '-';
    }

    function setStatus(msg, bad) {
        var s = $('status');
        s.textContent = msg || '';
        s.className = bad ? 'error' : '';
    }

    function kv(pairs) {
        var dl = el('dl', { className: 'kv' });
        pairs.forEach(function (p) {
            if (p[1] === undefined) {
                return;
            }
            dl.appendChild(el('dt', null, p[0]));
            dl.appendChild(el('dd', { className: 'mono' }, text(p[1])));
        });
        return dl;
    }


    /* ---- reading JSONL: ngx_rlm's and the reference library's ---- */

    function parse(body) {
        var lines = body.split('\n');
        var out = { meta: null, iterations: [], errors: [] };
        var i, line, obj;

        for (i = 0; i < lines.length; i++) {
            line = lines[i].trim();
            if (line === '') {
                continue;
            }

            try {
                obj = JSON.parse(line);
            } catch (e) {
                out.errors.push('line ' + (i + 1) + ': not JSON');
                continue;
            }

            if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
                out.errors.push('line ' + (i + 1) + ': not an object');

            } else if (obj.type === 'metadata'
                       || (obj.type === undefined && !('response' in obj)
                           && 'root_model' in obj))
            {
                out.meta = out.meta || obj;

            } else if (obj.type === 'iteration' || obj.type === undefined) {
                out.iterations.push(obj);

            } else {
                out.errors.push('line ' + (i + 1) + ': unknown type');
            }
        }

        return out;
    }

    function callsOf(it) {
        var calls = [];
        (Array.isArray(it.code_blocks) ? it.code_blocks : []).forEach(
            function (b) {
                var r = b && b.result || {};
                (Array.isArray(r.rlm_calls) ? r.rlm_calls : []).forEach(
                    function (c) {
                        if (c && typeof c === 'object') {
                            calls.push(c);
                        }
                    });
            });
        return calls;
    }

    /* tokens of a call: the flat counts, else its usage summary */

    function callTokens(c) {
        var t = { input: 0, output: 0 };
        var per, m;

        if (typeof c.prompt_tokens === 'number'
            || typeof c.completion_tokens === 'number')
        {
            t.input = num(c.prompt_tokens);
            t.output = num(c.completion_tokens);
            return t;
        }

        per = c.usage_summary && c.usage_summary.model_usage_summaries;
        for (m in per || {}) {
            t.input += num(per[m] && per[m].total_input_tokens);
            t.output += num(per[m] && per[m].total_output_tokens);
        }
        return t;
    }

    function totals(traj) {
        var t = { blocks: 0, calls: 0, children: 0, rootIn: 0, rootOut: 0,
                  subIn: 0, subOut: 0, time: 0, rootUsage: false };

        traj.iterations.forEach(function (it) {
            var u = it.usage;
            t.blocks += Array.isArray(it.code_blocks) ? it.code_blocks.length
                                                       : 0;
            t.time += num(it.iteration_time);
            if (u && typeof u === 'object') {
                t.rootUsage = true;
                t.rootIn += num(u.prompt_tokens);
                t.rootOut += num(u.completion_tokens);
            }
            callsOf(it).forEach(function (c) {
                var k = callTokens(c);
                t.calls++;
                if (c.metadata && Array.isArray(c.metadata.iterations)) {
                    t.children++;
                }
                t.subIn += k.input;
                t.subOut += k.output;
            });
        });

        return t;
    }


    /* ---- rendering ---- */

    function renderPrompt(prompt) {
        var box, msgs, last;

        if (Array.isArray(prompt)) {
            msgs = prompt;
        } else if (prompt && typeof prompt === 'object'
                   && Array.isArray(prompt.messages))
        {
            msgs = prompt.messages;
        } else {
            return el('details', { className: 'prompt' },
                      el('summary', null, 'Prompt'),
                      el('pre', null, text(prompt)));
        }

        box = el('details', { className: 'prompt' },
                 el('summary', null, 'Prompt: ' + msgs.length + ' messages'));

        msgs.forEach(function (m) {
            m = m || {};
            box.appendChild(el('div', null,
                               el('span', { className: 'tag' },
                                  text(m.role || '?')),
                               el('pre', null, text(m.content))));
        });

        last = msgs[msgs.length - 1];
        return el('div', null, box,
                  last ? el('div', { className: 'muted' },
                            'last message (' + text(last.role) + '):') : null,
                  last ? el('pre', { className: 'last-message' },
                            text(last.content)) : null);
    }

    function renderCall(c, depth) {
        var failed = typeof c.error === 'string' && c.error !== '';
        var k = callTokens(c);
        var box, kids;

        box = el('div', { className: 'call' + (failed ? ' failed' : '') },
                 el('div', null,
                    el('span', { className: 'tag' }, text(c.fn || 'call')),
                    el('span', { className: 'tag' }, text(c.root_model)),
                    failed ? el('span', { className: 'tag bad' }, 'failed')
                           : null,
                    el('span', { className: 'muted' },
                       k.input + ' in / ' + k.output + ' out tokens, '
                       + secs(c.execution_time))),
                 el('div', { className: 'muted' }, 'prompt'),
                 el('pre', { className: 'call-prompt' }, text(c.prompt)),
                 el('div', { className: 'muted' }, 'response'),
                 el('pre', { className: 'call-response' }, text(c.response)),
                 failed ? el('div', { className: 'muted' }, 'error') : null,
                 failed ? el('pre', { className: 'call-error' }, c.error)
                        : null);

        if (c.metadata && Array.isArray(c.metadata.iterations)) {
            kids = el('details', { className: 'child', open: depth < 2 },
                      el('summary', null,
                         'Child RLM: ' + c.metadata.iterations.length
                         + ' iterations'));
            if (c.metadata.run_metadata) {
                kids.appendChild(kv([
                    ['root model', c.metadata.run_metadata.root_model],
                    ['depth', c.metadata.run_metadata.depth]]));
            }
            c.metadata.iterations.forEach(function (it, i) {
                if (it && typeof it === 'object') {
                    kids.appendChild(renderIteration(it, i,
                                         c.metadata.iterations.length,
                                         depth + 1));
                }
            });
            box.appendChild(kids);
        }

        return box;
    }

    function renderBlock(b, n, depth) {
        var r = (b && b.result) || {};
        var failed = (typeof r.stderr === 'string' && r.stderr !== '')
                     || (r.status && r.status !== 'ok');
        var calls = Array.isArray(r.rlm_calls) ? r.rlm_calls : [];
        var box;

        box = el('div', { className: 'block' + (failed ? ' failed' : '') },
                 el('div', null,
                    el('strong', null, 'Code block ' + n),
                    ' ',
                    r.status ? el('span', { className: 'tag'
                                            + (r.status === 'ok' ? ' good'
                                                                 : ' bad') },
                                  text(r.status)) : null,
                    el('span', { className: 'muted' },
                       secs(r.execution_time) + ', ' + calls.length
                       + ' sub-calls')),
                 el('pre', { className: 'code' }, text(b && b.code)),
                 el('div', { className: 'muted' }, 'output'),
                 el('pre', { className: 'stdout' },
                    r.stdout ? text(r.stdout) : '(none)'));

        if (r.stderr) {
            box.appendChild(el('div', { className: 'muted' }, 'stderr'));
            box.appendChild(el('pre', { className: 'stderr' }, text(r.stderr)));
        }

        if (typeof r.final_answer === 'string') {
            box.appendChild(el('div', { className: 'muted' },
                               'this block set the answer'));
        }

        calls.forEach(function (c) {
            if (c && typeof c === 'object') {
                box.appendChild(renderCall(c, depth));
            }
        });

        return box;
    }

    function renderIteration(it, i, n, depth) {
        var u = it.usage && typeof it.usage === 'object' ? it.usage : null;
        var box, blocks;

        box = el('div', { className: depth ? 'iteration nested'
                                           : 'iteration' },
                 el(depth ? 'h4' : 'h3', null,
                    'Iteration ' + (it.iteration !== undefined
                                    ? it.iteration : i + 1)
                    + (depth ? ' (child, depth ' + depth + ')' : '')),
                 kv([['time', secs(it.iteration_time)],
                     ['root call tokens', u ? num(u.prompt_tokens) + ' in / '
                                              + num(u.completion_tokens)
                                              + ' out' : undefined],
                     ['written', it.timestamp]]),
                 renderPrompt(it.prompt),
                 el('div', { className: 'muted' }, 'response'),
                 el('pre', { className: 'response' }, text(it.response)));

        blocks = Array.isArray(it.code_blocks) ? it.code_blocks : [];
        blocks.forEach(function (b, j) {
            box.appendChild(renderBlock(b, j + 1, depth));
        });

        if (it.final_answer !== null && it.final_answer !== undefined) {
            box.appendChild(el('div', { className: 'final-answer' },
                               el('strong', null, 'Final answer'),
                               el('pre', { className: 'final' },
                                  text(it.final_answer))));
        }

        return box;
    }

    function render() {
        var traj = state.traj;
        var view = $('view');
        var m = traj.meta || {};
        var t = totals(traj);
        var n = traj.iterations.length;
        var nav, chips, cur;

        view.textContent = '';

        view.appendChild(el('section', { className: 'panel', title: 'run' },
            el('h2', null, 'Run'),
            kv([['source', state.source],
                ['completion', m.completion_id],
                ['session', m.session],
                ['root model', m.root_model],
                ['sub model', m.sub_model],
                ['backend', m.backend],
                ['environment', m.environment_type],
                ['max depth', m.max_depth],
                ['max iterations', m.max_iterations],
                ['created', typeof m.created === 'number'
                            ? iso(m.created) : m.timestamp]]),
            el('p', { className: 'totals' },
               n + ' iterations, ' + t.blocks + ' code blocks, ' + t.calls
               + ' sub-calls (' + t.children + ' child RLMs), '
               + (t.rootUsage ? 'root ' + t.rootIn + ' in / ' + t.rootOut
                                + ' out tokens, ' : '')
               + 'sub-calls ' + t.subIn + ' in / ' + t.subOut
               + ' out tokens, ' + secs(t.time)),
            traj.errors.length
                ? el('p', { className: 'error' },
                     'skipped: ' + traj.errors.join('; '))
                : null));

        if (n === 0) {
            view.appendChild(el('section', { className: 'panel' },
                                el('p', { className: 'empty' },
                                   'No iteration yet.')));
            return;
        }

        state.index = Math.max(0, Math.min(state.index, n - 1));
        cur = traj.iterations[state.index];

        nav = el('nav', { className: 'steps' },
                 el('button', { className: 'plain', onclick: function () {
                     step(-1); } }, '\u2190 Previous'),
                 el('span', { className: 'position' },
                    'Iteration ' + (state.index + 1) + ' of ' + n),
                 el('button', { className: 'plain', onclick: function () {
                     step(1); } }, 'Next \u2192'));
        nav.firstChild.disabled = state.index === 0;
        nav.lastChild.disabled = state.index === n - 1;

        chips = el('div', { className: 'chips' });
        traj.iterations.forEach(function (it, i) {
            var final = it.final_answer !== null
                        && it.final_answer !== undefined;
            chips.appendChild(el('button', {
                className: 'chip' + (i === state.index ? ' current' : '')
                           + (final ? ' final' : ''),
                title: final ? 'final answer' : 'iteration',
                onclick: function () { state.index = i; render(); }
            }, String(i + 1)));
        });

        view.appendChild(el('section', { className: 'panel' }, nav, chips));
        view.appendChild(el('section', { className: 'panel' },
                            renderIteration(cur, state.index, n, 0)));
    }

    function step(d) {
        if (!state.traj) {
            return;
        }
        state.index += d;
        render();
    }

    function show(body, source) {
        var traj = parse(body);
        if (!traj.meta && traj.iterations.length === 0) {
            setStatus('No trajectory in ' + source
                      + (traj.errors.length ? ': ' + traj.errors[0] : ''),
                      true);
            return;
        }
        state.traj = traj;
        state.index = 0;
        state.source = source;
        render();
        setStatus('Showing ' + source + ': ' + traj.iterations.length
                  + ' iterations' + (traj.errors.length
                                     ? ', ' + traj.errors.length
                                       + ' lines skipped' : ''),
                  traj.errors.length > 0);
    }


    /* ---- the API ---- */

    function request(path) {
        var key = $('key').value.trim();
        var headers = {};
        if (key) {
            headers.Authorization = 'Bearer ' + key;
        }
        return fetch(API + path, { headers: headers, credentials: 'omit',
                                   cache: 'no-store', redirect: 'error' })
            .then(function (res) {
                return res.text().then(function (body) {
                    var msg;
                    if (res.ok) {
                        return body;
                    }
                    try {
                        msg = JSON.parse(body).error.message;
                    } catch (e) {
                        msg = res.statusText;
                    }
                    throw new Error('HTTP ' + res.status + ': ' + msg);
                });
            });
    }

    function sessionPath() {
        return '/sessions/' + encodeURIComponent($('session').value.trim())
               + '/trajectories';
    }

    function list() {
        var box = $('completions');
        box.textContent = '';
        if (!$('session').value.trim()) {
            setStatus('Type a session id first.', true);
            return;
        }
        setStatus('Listing...');

        request(sessionPath()).then(function (body) {
            var data = JSON.parse(body).data || [];
            var table = el('table', null,
                           el('tr', null, el('th', null, 'completion'),
                              el('th', null, 'created'),
                              el('th', null, 'bytes')));
            data.forEach(function (d) {
                var row = el('tr', { className: 'pick', title: 'show',
                                     onclick: function () {
                                         Array.prototype.forEach.call(
                                             table.querySelectorAll('tr'),
                                             function (r) {
                                                 r.className = 'pick';
                                             });
                                         row.className = 'pick current';
                                         load(String(d.id));
                                     } },
                             el('td', { className: 'mono' }, text(d.id)),
                             el('td', null, iso(d.created)),
                             el('td', null, text(d.bytes)));
                table.appendChild(row);
            });
            box.appendChild(table);
            setStatus(data.length + ' completions in this session.');
        }).catch(function (e) {
            setStatus(e.message, true);
        });
    }

    function load(id) {
        setStatus('Loading ' + id + '...');
        request(sessionPath() + '/' + encodeURIComponent(id))
            .then(function (body) { show(body, id); })
            .catch(function (e) { setStatus(e.message, true); });
    }


    /* ---- wiring ---- */

    function init() {
        var m = /(?:^|[#&])session=([^&]*)/.exec(location.hash);

        try {
            $('key').value = sessionStorage.getItem(KEY_ITEM) || '';
        } catch (e) {
            /* storage off: the key lives in the field only */
        }

        if (m) {
            $('session').value = decodeURIComponent(m[1]);
        }

        $('key').addEventListener('input', function () {
            try {
                sessionStorage.setItem(KEY_ITEM, $('key').value.trim());
            } catch (e) {
                /* see above */
            }
        });

        $('forget').addEventListener('click', function () {
            $('key').value = '';
            try {
                sessionStorage.removeItem(KEY_ITEM);
            } catch (e) {
                /* see above */
            }
            setStatus('Key forgotten.');
        });

        $('list').addEventListener('click', list);
        $('session').addEventListener('keydown', function (ev) {
            if (ev.key === 'Enter') {
                list();
            }
        });

        $('file').addEventListener('change', function () {
            var f = this.files && this.files[0];
            if (!f) {
                return;
            }
            f.text().then(function (body) { show(body, f.name); },
                          function (e) { setStatus(e.message, true); });
        });

        $('show').addEventListener('click', function () {
            show($('paste').value, 'pasted lines');
        });

        document.addEventListener('keydown', function (ev) {
            var t = ev.target && ev.target.tagName;
            if (t === 'INPUT' || t === 'TEXTAREA') {
                return;
            }
            if (ev.key === 'ArrowLeft' && state.traj && state.index > 0) {
                step(-1);
            } else if (ev.key === 'ArrowRight' && state.traj
                       && state.index < state.traj.iterations.length - 1)
            {
                step(1);
            }
        });
    }

    init();
}());
