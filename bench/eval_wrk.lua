-- wrk script for bench/eval_bench: POST {"code":"x = 1"} cells to
-- /v1/sessions/{id}/eval, round-robin over the session ids listed (one a
-- line) in the file named by $RLM_BENCH_IDS.  Each wrk thread takes its
-- own share of the ids.  Answers that are not 200 with status "ok" are
-- counted and reported at the end ("cells not ok"), unless
-- RLM_BENCH_CHECK=0.

local threads = {}

function setup(thread)
    thread:set("tid", #threads)
    threads[#threads + 1] = thread
end

function init(args)
    local all = {}
    for line in io.lines(os.getenv("RLM_BENCH_IDS")) do
        if #line == 32 then
            all[#all + 1] = line
        end
    end

    local nthreads = tonumber(os.getenv("RLM_BENCH_THREADS") or "1")
    local mine = {}
    for i, id in ipairs(all) do
        if (i - 1) % nthreads == tid then
            mine[#mine + 1] = id
        end
    end
    if #mine == 0 then
        mine = all
    end

    local headers = { ["Content-Type"] = "application/json" }
    reqs = {}
    for i, id in ipairs(mine) do
        reqs[i] = wrk.format("POST", "/v1/sessions/" .. id .. "/eval",
                             headers, '{"code":"x = 1"}')
    end

    n = 0
    bad = 0
end

function request()
    n = n + 1
    return reqs[(n - 1) % #reqs + 1]
end

-- RLM_BENCH_CHECK=0 leaves the body unchecked (wrk then skips the Lua
-- response hook, which costs client CPU on this 2-core machine)
if os.getenv("RLM_BENCH_CHECK") ~= "0" then
    function response(status, headers, body)
        if status ~= 200 or not body:find('"status":"ok"', 1, true) then
            bad = bad + 1
        end
    end
end

function done(summary, latency, requests)
    local total = 0
    for _, t in ipairs(threads) do
        total = total + (t:get("bad") or 0)
    end
    if response then
        io.write(string.format("cells not ok: %d\n", total))
    end
end
