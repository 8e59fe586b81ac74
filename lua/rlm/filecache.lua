-- rlm.filecache: a file read and parsed once, re-read when it changes.
--
-- Each worker keeps the last text and its parsed value per path.  The
-- file is read again at most once per `interval` seconds (default 1);
-- only a text that differs is parsed again, so an edit takes effect
-- within about a second without a reload, and an unchanged file costs
-- one small read per second.  Comparing the text rather than the mtime
-- also catches two edits within the same second.
--
-- If the file cannot be read or does not parse, the last good value is
-- kept (an edit in progress must not open or close the door) and the
-- problem is logged once per distinct failure.  With no good value yet,
-- get() returns nil and the error, and the caller refuses the request.

local io_open = io.open
local now = ngx.now
local log = ngx.log
local ERR = ngx.ERR

local _M = {}

local entries = {}


local function read_all(path)
    local f, err = io_open(path, "rb")
    if not f then
        return nil, err
    end

    local text = f:read("*a")
    f:close()

    if text == nil then
        return nil, path .. ": read failed"
    end

    return text
end


-- get(path, parse [, interval]) -> value | nil, err
-- parse(text) must return the value, or nil and a message (which must
-- not quote secrets: it is logged).
function _M.get(path, parse, interval)
    local e = entries[path]
    local t = now()

    if e and e.parse == parse and t - e.checked < (interval or 1) then
        if e.value == nil then
            return nil, e.err
        end
        return e.value
    end

    if e == nil or e.parse ~= parse then
        e = { parse = parse, checked = 0 }
        entries[path] = e
    end

    e.checked = t

    local text, err = read_all(path)

    if text ~= nil and text == e.text then
        if e.value == nil then
            return nil, e.err
        end
        return e.value
    end

    local value
    if text ~= nil then
        value, err = parse(text)
    end

    if value == nil then
        err = tostring(err)
        if err ~= e.err then
            log(ERR, "rlm policy: ", err,
                e.value ~= nil and "; keeping the previous version" or "")
        end
        e.err = err
        e.text = text
        if e.value == nil then
            return nil, err
        end
        return e.value
    end

    e.text = text
    e.value = value
    e.err = nil

    return value
end


-- Forget everything (tests, or a user's own reload hook).
function _M.flush()
    entries = {}
end


return _M
