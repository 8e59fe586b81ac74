// Drives the trajectory viewer (conf/viewer/) in Debian's chromium,
// headless, through puppeteer-core, for t/viewer.t.  Prints one line per
// observation; the test compares them.
//
//   node drive.cjs BASE_URL
//
// Environment: RLM_VIEWER_KEY (the key the test's trajectories route
// wants), RLM_VIEWER_FIXTURE (a JSONL file in the reference library's
// shape), RLM_CHROMIUM (default /usr/bin/chromium), RLM_VIEWER_SCREENSHOT
// (a PNG path: write a screenshot of the API view there).
//
// It first makes a completion whose model output is hostile markup, over
// the scripted upstream of the test's nginx, then reads it in the page.

'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const puppeteer = require('puppeteer-core');

const base = process.argv[2];
const key = process.env.RLM_VIEWER_KEY;
const origin = new URL(base).origin;

function out(...parts) {
    process.stdout.write(parts.join(' ') + '\n');
}

async function http(method, p, body, headers) {
    const res = await fetch(base + p, {
        method, body: body && JSON.stringify(body),
        headers: Object.assign({ 'Content-Type': 'application/json' },
                               headers || {}) });
    return { status: res.status, headers: res.headers,
             body: await res.text() };
}

function repl(...lines) {
    return '```repl\n' + lines.join('\n') + '\n```';
}

async function completion() {
    // the sandbox manager starts with nginx
    for (let i = 0; i < 100; i++) {
        const h = await http('GET', '/healthz').catch(() => null);
        if (h && h.body.includes('"manager":"reachable"')) {
            break;
        }
        await new Promise((r) => setTimeout(r, 100));
    }

    await http('POST', '/mock/script', { id: 'root', steps: [
        { content: 'Reading. <img src=x onerror="window.__pwned=\'img\'">'
                   + ' </script><script>window.__pwned=\'script\''
                   + '</script>\n'
                   + repl("print('<img src=x onerror=\"window.__pwned=1\">')",
                          "r = llm_query_batched(['</script><b id=hostile>"
                          + "b</b>', 'two'], model='echo')",
                          "k = rlm_query('<svg onload=\"window.__pwned=3\">"
                          + "child context')",
                          'print(r, k)'),
          usage: { prompt_tokens: 120, completion_tokens: 30,
                   total_tokens: 150 } },
        { content: repl("answer.update(content='<img src=y onerror="
                        + "\"window.__pwned=4\">the end', ready=True)"),
          usage: { prompt_tokens: 200, completion_tokens: 10,
                   total_tokens: 210 } },
    ] });
    await http('POST', '/mock/script', { id: 'child', steps: [
        { content: repl("answer.update(content='child says <iframe "
                        + "src=javascript:window.__pwned=5>', ready=True)"),
          usage: { prompt_tokens: 50, completion_tokens: 5,
                   total_tokens: 55 } },
    ] });

    const res = await http('POST', '/v1/chat/completions', {
        model: 'script:root', context: 'x',
        messages: [{ role: 'user', content: 'go' }],
        rlm: { sub_model: 'script:child' } });
    const j = JSON.parse(res.body);
    out('completion', res.status, j.choices && j.choices[0].message.content);
    return res.headers.get('x-rlm-session-id');
}

// waits for a selector; on a timeout, says what the page's status line
// said
async function waitFor(page, sel) {
    try {
        await page.waitForSelector(sel, { timeout: 20000 });
    } catch (e) {
        const st = await page.$eval('#status', (x) => x.textContent)
            .catch(() => '?');
        throw new Error('no ' + sel + ' (status: ' + st + ')');
    }
}

async function texts(page, sel) {
    return page.$$eval(sel, (els) => els.map((e) => e.textContent));
}

async function main() {
    const session = await completion();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rlm-viewer-'));
    const browser = await puppeteer.launch({
        executablePath: process.env.RLM_CHROMIUM || '/usr/bin/chromium',
        headless: true,
        userDataDir: dir,
        args: ['--headless', '--no-sandbox', '--disable-gpu',
               '--disable-quic', '--no-first-run',
               '--disable-background-networking',
               '--disable-component-update', '--disable-sync',
               '--user-data-dir=' + dir],
    });

    const dialogs = [];
    const foreign = [];
    const api = [];
    const errors = [];

    async function watch(page) {
        page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
        page.on('pageerror', (e) => errors.push(String(e)));
        page.on('request', (r) => {
            const u = new URL(r.url());
            if (u.protocol !== 'data:' && u.origin !== origin) {
                foreign.push(r.url());
            }
            if (u.pathname.startsWith('/v1/')) {
                api.push(r.headers().authorization === 'Bearer ' + key);
            }
        });
    }

    async function hostile(page) {
        return page.evaluate(() => [
            'img=' + document.querySelectorAll('img').length,
            'iframe=' + document.querySelectorAll('iframe').length,
            'svg=' + document.querySelectorAll('svg').length,
            'b=' + document.querySelectorAll('b').length,
            'scripts=' + document.querySelectorAll('script').length,
            'pwned=' + String(window.__pwned),
        ].join(' '));
    }

    try {
        const page = await browser.newPage();
        await watch(page);
        await page.setViewport({ width: 1280, height: 1000 });

        const res = await page.goto(base + '/viewer/', { waitUntil: 'load' });
        out('page', res.status(), res.headers()['content-type'],
            'csp', /script-src 'self'/.test(
                res.headers()['content-security-policy'] || ''));

        await page.type('#key', key);
        await page.type('#session', session);
        await page.click('#list');
        await waitFor(page, '#completions tr.pick');
        out('listed', (await page.$$('#completions tr.pick')).length,
            'status', await page.$eval('#status', (e) => e.textContent));

        await page.click('#completions tr.pick');
        await waitFor(page, '.iteration');
        out('position', await page.$eval('.position', (e) => e.textContent));
        out('run', (await texts(page, 'section[title=run] dd'))
            .slice(3, 7).join(' | '));
        // without the time it took, which varies
        out('totals', (await page.$eval('.totals', (e) => e.textContent))
            .replace(/, [0-9.]+ s$/, ''));

        const resp = await page.$eval('.iteration > .response',
                                      (e) => e.textContent);
        out('response text', resp.includes('<img src=x onerror=')
            && resp.includes('</script><script>'));
        out('stdout text', (await texts(page, '.iteration > .block > .stdout'))
            .join('').includes('<img src=x onerror="window.__pwned=1">'));
        out('calls', (await page.$$eval('.iteration > .block > .call',
            (els) => els.map((e) => e.querySelector('.tag').textContent
                             + ':' + e.querySelector('.call-prompt')
                                      .textContent.slice(0, 9))))
            .join(' '));
        out('child', (await texts(page, '.child > summary')).join(' '),
            '|', (await texts(page, '.child .final')).join(' '));
        out('child tokens', (await page.$$eval(
            '.iteration > .block > .call > div:first-child .muted',
            (els) => els.map((e) => e.textContent.split(',')[0])))
            .join(' | '));
        out('hostile', await hostile(page));

        if (process.env.RLM_VIEWER_SCREENSHOT) {
            await page.screenshot({ path: process.env.RLM_VIEWER_SCREENSHOT,
                                    fullPage: false });
        }

        await page.click('nav.steps button:last-child');
        out('position', await page.$eval('.position', (e) => e.textContent));
        out('final', await page.$eval('.iteration > .final-answer .final',
                                      (e) => e.textContent));
        await page.keyboard.press('ArrowLeft');
        out('arrow left', await page.$eval('.position',
                                           (e) => e.textContent));
        out('hostile', await hostile(page));

        // the key stays with the tab, not with a new one
        await page.reload({ waitUntil: 'load' });
        out('reload key kept', await page.$eval('#key', (e) => e.value)
            === key);

        const other = await browser.newPage();
        await watch(other);
        await other.goto(base + '/viewer/#session=' + session,
                         { waitUntil: 'load' });
        out('new tab key', JSON.stringify(
            await other.$eval('#key', (e) => e.value)),
            'session from hash', await other.$eval('#session',
                                                   (e) => e.value)
            === session);
        await other.click('#list');
        await other.waitForFunction(
            () => document.getElementById('status').className === 'error');
        out('no key', await other.$eval('#status', (e) => e.textContent));
        await other.close();

        // a file from the reference library
        const input = await page.$('#file');
        await input.uploadFile(process.env.RLM_VIEWER_FIXTURE);
        await page.waitForFunction(
            () => /^Showing/.test(document.getElementById('status')
                                  .textContent));
        out('file', await page.$eval('#status', (e) => e.textContent));
        out('file run', (await texts(page, 'section[title=run] dd'))
            .slice(0, 6).join(' | '));
        await page.click('.chips button:nth-child(2)');
        out('file 2', await page.$eval('.position', (e) => e.textContent),
            '|', (await texts(page, '.iteration > .block > .call .tag'))
                .join(' '),
            '|', (await texts(page, '.iteration > .block > .call .muted'))[0],
            '|', await page.$eval('.iteration > .block > .stdout',
                                  (e) => e.textContent.trim()));
        await page.click('.chips button:nth-child(3)');
        out('file 3', await page.$eval('.position', (e) => e.textContent),
            '|', await page.$eval('.final-answer .final',
                                  (e) => e.textContent));

        // pasted lines, one of them broken
        await page.$eval('#paste', (e, v) => { e.value = v; },
            '{"type":"metadata","root_model":"m"}\nnot json\n'
            + '{"type":"iteration","iteration":1,"response":'
            + '"<b onclick=x>hi</b>","code_blocks":[],'
            + '"final_answer":"<img src=q onerror=window.__pwned=9>"}\n');
        await page.click('#show');
        out('paste', await page.$eval('#status', (e) => e.textContent));
        out('paste final', await page.$eval('.final-answer .final',
                                            (e) => e.textContent));
        out('hostile', await hostile(page));

        out('dialogs', dialogs.length, 'page errors', errors.length,
            'foreign requests', foreign.length);
        out('api requests', api.length, 'with key',
            api.filter((x) => x).length);
    } finally {
        await browser.close();
        fs.rmSync(dir, { recursive: true, force: true });
    }
}

main().then(() => out('done'), (e) => {
    out('error', e && e.stack || e);
    process.exitCode = 1;
});
