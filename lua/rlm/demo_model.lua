-- DEMO MODEL: a deterministic stand-in for a real language model.
--
-- It is not intelligent and does not pretend to be: it follows a fixed
-- script so that the RLM loop can be run, shown and tested without a
-- provider.  Served as an OpenAI-compatible upstream by nginx + Lua (see
-- t/lib/mock_llm.lua, model "rlm-demo").
--
-- As a root model it solves needle-in-a-haystack questions in four turns,
-- counted by the assistant messages already in the conversation:
--   1. a ```repl block that looks at the context (type, size, lines);
--   2. a ```repl block that searches the lines for the query's keywords;
--   3. a ```repl block that asks llm_query() to answer from the hits;
--   4. the text marker FINAL_VAR(answer_text).
-- As a sub-model (a prompt that starts with SUB_PROMPT) it answers with
-- the first line it was given that contains the most keywords.

local _M = {}

_M.SUB_PROMPT = "Answer the question using only these lines."

local STOP = {}
for w in ([[
    what which where when who whom whose why how does did is are was were
    the and for with that this from into about there their them they
    have has had can could would should will shall may might must
    please tell find give show context answer question number value
]]):gmatch("%a+") do
    STOP[w] = true
end
STOP["number"] = nil       -- "the magic number" is what people ask about


local function text_of(content)
    if type(content) == "string" then
        return content
    end
    local out = {}
    if type(content) == "table" then
        for _, part in ipairs(content) do
            if type(part) == "table" and type(part.text) == "string" then
                out[#out + 1] = part.text
            end
        end
    end
    return table.concat(out, "\n")
end


-- the question: after "query:" or "question:" if a user message has one,
-- else the last line with a "?", else the last user message

local function find_query(messages)
    local users = {}
    for _, m in ipairs(messages) do
        if m.role == "user" then
            users[#users + 1] = text_of(m.content)
        end
    end

    for _, u in ipairs(users) do
        local q = u:match("[Qq]uery:%s*([^\n]+)")
                  or u:match("[Qq]uestion:%s*([^\n]+)")
        if q then
            return q
        end
    end

    for _, u in ipairs(users) do
        local last
        for line in u:gmatch("[^\n]+") do
            if line:find("?", 1, true) then
                last = line
            end
        end
        if last then
            return last
        end
    end

    return users[#users] or ""
end


local function keywords(query)
    local out, seen = {}, {}
    for w in query:lower():gmatch("[%w_]+") do
        if #w >= 3 and not STOP[w] and not seen[w] then
            seen[w] = true
            out[#out + 1] = w
        end
    end
    return out
end


-- a Python string literal: nothing in s can end it early

local function py_str(s)
    return "\"" .. s:gsub("[%c\\\"]", function(c)
        return string.format("\\x%02x", c:byte())
    end) .. "\""
end


local function py_list(words)
    local q = {}
    for i, w in ipairs(words) do
        q[i] = py_str(w)
    end
    return "[" .. table.concat(q, ", ") .. "]"
end


local function sub_answer(prompt)
    local question = prompt:match("Question:%s*([^\n]*)") or ""
    local words = keywords(question)
    local best, best_score = nil, -1

    local lines = prompt:match("Lines:\n(.*)$") or ""
    for line in lines:gmatch("[^\n]+") do
        local l, score = line:lower(), 0
        for _, w in ipairs(words) do
            if l:find(w, 1, true) then
                score = score + 1
            end
        end
        if score > best_score then
            best, best_score = line, score
        end
    end

    return best and best:match("^%s*(.-)%s*$")
           or "The lines do not contain an answer."
end


function _M.respond(req)
    local messages = req.messages or {}
    local last = messages[#messages]
    local last_text = last and text_of(last.content) or ""

    if last_text:sub(1, #_M.SUB_PROMPT) == _M.SUB_PROMPT then
        return sub_answer(last_text)
    end

    local turn = 0
    for _, m in ipairs(messages) do
        if m.role == "assistant" then
            turn = turn + 1
        end
    end

    local query = find_query(messages)
    local words = keywords(query)

    if turn == 0 then
        return table.concat({
            "[demo model] First I look at the context.",
            "```repl",
            "text = context if isinstance(context, str) else "
                .. "\"\\n\".join(map(str, context))",
            "lines = text.splitlines()",
            "print(type(context).__name__, len(text), \"chars,\", "
                .. "len(lines), \"lines\")",
            "print(lines[:3])",
            "```",
        }, "\n")
    end

    if turn == 1 then
        return table.concat({
            "[demo model] Now I search the lines for the question's "
                .. "keywords.",
            "```repl",
            "keywords = " .. py_list(words),
            "def score(line):",
            "    low = line.lower()",
            "    return sum(1 for k in keywords if k in low)",
            "hits = [l for l in lines if score(l) > 0]",
            "hits.sort(key=score, reverse=True)",
            "print(len(hits), \"matching lines\")",
            "print(\"\\n\".join(hits[:5]))",
            "```",
        }, "\n")
    end

    if turn == 2 then
        return table.concat({
            "[demo model] I ask a sub-model to answer from the best hits.",
            "```repl",
            "answer_text = llm_query(" .. py_str(_M.SUB_PROMPT)
                .. " + \"\\nQuestion: \" + "
                .. py_str(query)
                .. " + \"\\nLines:\\n\" + \"\\n\".join(hits[:20]))",
            "print(answer_text)",
            "```",
        }, "\n")
    end

    return "[demo model] Done.\nFINAL_VAR(answer_text)"
end


return _M
