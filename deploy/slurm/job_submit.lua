--[[
wattledger job_submit.lua for Slurm (tested on 22.05, Lua 5.1): asks wattledger's admission
API before a job is queued, then lets it in, holds it until a cleaner or cheaper time
(begin_time), or refuses it with the reasons.

Install: copy beside slurm.conf, set JobSubmitPlugins=lua, and write
wattledger-admission.conf beside it (re-read on every submission):

    url=https://wattledger.example.org/v1/admission
    token_file=/etc/slurm/wattledger.token   # a scheduler token: wattledger token mint --role scheduler
    timeout=2                                # seconds; slurmctld holds its locks meanwhile
    fail=open                                # open: admit when wattledger fails; closed: refuse
    default_minutes=60                       # duration assumed for a job without --time

No file or an empty url: every job is admitted and nothing is asked.

What is sent (POST /v1/admission):
    tenant        the account, lowercased as Slurm stores it (or the user's default account);
    job_name      --job-name;
    gpus          gres/gpu of --gres / --gpus-per-node (× --nodes) or --gpus;
    duration_s    --time (minutes) × 60, else default_minutes;
    earliest_start --begin;
    deadline      from --comment "wattledger:deadline=2026-11-23T06:00:00Z" (or "=+6h",
                  "=+90m", "=+2d" from submission). Slurm 22.05 does not hand --deadline
                  to Lua (job_desc.end_time reads 0 with --deadline set, measured in the
                  lab); where a later Slurm does, job_desc.end_time is used first;
    kind, model   from --comment "wattledger:kind=training wattledger:model=llama-70b";
    priority      --qos (else "normal").
The decision id goes into the job's admin comment (wattledger:decision=<id>) for audit.
A job admitted only with its GPUs held to the site's power cap (the site's power policy)
also gets wattledger:power_cap_w=<W per GPU> there, and the user is told; the site's
Prolog applies it (deploy/slurm/power-cap.sh prolog runs nvidia-smi -pl on the job's GPUs)
and its Epilog restores the default limit (power-cap.sh epilog).
--]]

local NO_VAL = 4294967294
local NO_VAL16 = 65534

local function conf_dir()
    local c = os.getenv("SLURM_CONF")
    if c and c ~= "" then return (c:match("^(.*)/[^/]*$") or ".") end
    local src = debug.getinfo(1, "S").source or ""
    return (src:match("^@(.*)/[^/]*$") or "/etc/slurm")
end

local function read_conf()
    local cfg = { url = "", timeout = 2, fail = "open", default_minutes = 60 }
    local f = io.open(conf_dir() .. "/wattledger-admission.conf", "r")
    if not f then return cfg end
    for line in f:lines() do
        local k, v = line:match("^%s*([%w_]+)%s*=%s*([^#]-)%s*$")
        if k then cfg[k] = v end
    end
    f:close()
    cfg.timeout = tonumber(cfg.timeout) or 2
    cfg.default_minutes = tonumber(cfg.default_minutes) or 60
    return cfg
end

local function read_token(path)
    if not path or path == "" then return nil end
    local f = io.open(path, "r")
    if not f then return nil end
    local t = f:read("*a"); f:close()
    return (t:gsub("%s+", ""))
end

local function set(v)
    if v == nil or v == NO_VAL or v == NO_VAL16 or v == 4294967295 or v == 0 then return nil end
    return v
end

local function iso(epoch) return os.date("!%Y-%m-%dT%H:%M:%SZ", epoch) end

-- "gres:gpu:2", "gres/gpu:2", "gres:gpu:a100:2", "gpu:2", several comma-separated.
local function gpus_in(tres)
    if not tres then return 0 end
    local n = 0
    for item in tostring(tres):gmatch("[^,]+") do
        local count = item:match("gpu:[%w_%-%.]*:?(%d+)$") or item:match("gpu=(%d+)$")
        if item:match("gpu") and not count then count = "1" end
        n = n + (tonumber(count) or 0)
    end
    return n
end

local function comment_value(comment, key)
    if not comment then return nil end
    return comment:match("wattledger:" .. key .. "=([^%s%c,;]+)")
end

-- "wattledger:deadline=2026-11-23T06:00:00Z", or relative to now: "=+6h", "=+90m", "=+2d".
local function comment_deadline(comment)
    local v = comment_value(comment, "deadline")
    if not v then return nil end
    local n, unit = v:match("^%+(%d+)([mhd])$")
    if n then
        local mult = ({ m = 60, h = 3600, d = 86400 })[unit]
        return iso(os.time() + tonumber(n) * mult)
    end
    return v
end

-- JSON: a small encoder for flat objects (strings, numbers, booleans, nil).
local function json_str(s)
    s = tostring(s):gsub('[%c"\\]', function(c)
        local map = { ['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t' }
        return map[c] or string.format("\\u%04x", c:byte())
    end)
    return '"' .. s .. '"'
end
local function json_object(t, keys)
    local parts = {}
    for _, k in ipairs(keys) do
        local v = t[k]
        if v ~= nil then
            local enc
            if type(v) == "number" then enc = string.format("%d", v)
            elseif type(v) == "boolean" then enc = tostring(v)
            else enc = json_str(v) end
            parts[#parts + 1] = json_str(k) .. ":" .. enc
        end
    end
    return "{" .. table.concat(parts, ",") .. "}"
end

local has_cjson, cjson = pcall(require, "cjson")
local function json_decode(body)
    if has_cjson then
        local ok, v = pcall(cjson.decode, body)
        if ok and type(v) == "table" then return v end
        return nil
    end
    local r = {}
    r.decision = body:match('"decision"%s*:%s*"([^"]*)"')
    r.decision_id = body:match('"decision_id"%s*:%s*"([^"]*)"')
    r.start_at_unix = tonumber(body:match('"start_at_unix"%s*:%s*(%d+)'))
    r.power_cap_w = tonumber(body:match('"power_cap_w"%s*:%s*(%d+)'))
    r.reasons = {}
    local reasons = body:match('"reasons"%s*:%s*%[(.-)%]')
    if reasons then for s in reasons:gmatch('"(.-)"') do r.reasons[#r.reasons + 1] = s end end
    if not r.decision then return nil end
    return r
end

local has_socket, http = pcall(require, "socket.http")
local ltn12 = has_socket and require("ltn12") or nil
local has_https, https = pcall(require, "ssl.https")

local function post(url, body, token, timeout)
    local headers = { ["content-type"] = "application/json", ["content-length"] = tostring(#body) }
    if token then headers["authorization"] = "Bearer " .. token end
    local is_https = url:match("^https:")
    if has_socket and (not is_https or has_https) then
        local client = is_https and https or http
        client.TIMEOUT = timeout
        local chunks = {}
        local ok, code = client.request {
            url = url, method = "POST", headers = headers,
            source = ltn12.source.string(body), sink = ltn12.sink.table(chunks),
        }
        if not ok then return nil, tostring(code) end
        return tonumber(code), table.concat(chunks)
    end
    -- curl: for https without LuaSec, or without LuaSocket. Body and token via files.
    local tmp = os.tmpname()
    local f = io.open(tmp, "w"); f:write(body); f:close()
    local hdr = os.tmpname()
    f = io.open(hdr, "w"); f:write("Content-Type: application/json\n")
    if token then f:write("Authorization: Bearer " .. token .. "\n") end
    f:close()
    local cmd = string.format("curl -sS -m %d -X POST -H @%s --data-binary @%s -w '\\n%%{http_code}' '%s' 2>&1",
        math.ceil(timeout), hdr, tmp, url:gsub("'", ""))
    local p = io.popen(cmd); local out = p:read("*a"); p:close()
    os.remove(tmp); os.remove(hdr)
    local resp, code = out:match("^(.*)\n(%d%d%d)$")
    if not code or code == "000" then return nil, (resp or out):gsub("%s+$", "") end
    return tonumber(code), resp
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local cfg = read_conf()
    if cfg.url == nil or cfg.url == "" then return slurm.SUCCESS end

    local nodes = set(job_desc.min_nodes) or 1
    local gpus = gpus_in(job_desc.tres_per_job)
    if gpus == 0 then gpus = gpus_in(job_desc.tres_per_node) * nodes end
    if gpus == 0 then return slurm.SUCCESS end  -- wattledger meters GPU jobs

    local account = job_desc.account or job_desc.default_account
    if not account or account == "" then
        slurm.log_info("wattledger: job of uid %s has no account; admitted without asking", tostring(submit_uid))
        return slurm.SUCCESS
    end
    local comment = job_desc.comment
    local deadline = set(job_desc.end_time)
    local minutes = set(job_desc.time_limit) or cfg.default_minutes
    local req = {
        tenant = string.lower(account),
        -- wattledger refuses control characters in any text (a tab would otherwise make a
        -- fail-open cluster admit the job unasked): a name keeps its words, not its tabs.
        job_name = string.sub(string.gsub(job_desc.name or "", "%c", " "), 1, 512),
        gpus = gpus,
        duration_s = minutes * 60,
        kind = comment_value(comment, "kind") or "batch",
        model = comment_value(comment, "model"),
        priority = job_desc.qos and string.lower(job_desc.qos) or "normal",
        earliest_start = set(job_desc.begin_time) and iso(job_desc.begin_time) or nil,
        deadline = deadline and iso(deadline) or comment_deadline(comment),
        source = "slurm",
    }
    local body = json_object(req, { "tenant", "job_name", "gpus", "duration_s", "kind", "model",
        "priority", "earliest_start", "deadline", "source" })
    local code, resp = post(cfg.url, body, read_token(cfg.token_file), cfg.timeout)
    local answer = (code == 200) and json_decode(resp) or nil
    if not answer then
        local why = code and ("HTTP " .. code .. ": " .. tostring(resp):sub(1, 300)) or tostring(resp)
        slurm.log_error("wattledger: admission failed (%s); fail=%s", why, cfg.fail)
        if cfg.fail == "closed" then
            slurm.log_user("wattledger: admission is unavailable and this cluster fails closed: " .. why)
            return slurm.ERROR
        end
        return slurm.SUCCESS
    end
    local reasons = table.concat(answer.reasons or {}, "; ")
    slurm.log_info("wattledger: %s %s account=%s gpus=%d: %s", tostring(answer.decision),
        tostring(answer.decision_id), req.tenant, gpus, reasons)
    if answer.decision_id then
        job_desc.admin_comment = "wattledger:decision=" .. answer.decision_id
    end
    -- cjson reads a JSON null as a userdata sentinel: only a number is a cap.
    local cap = tonumber(answer.power_cap_w)
    if answer.decision == "admit" and cap then
        job_desc.admin_comment = (job_desc.admin_comment or "") .. " wattledger:power_cap_w=" .. cap
        slurm.log_user("wattledger: admitted with its GPUs capped at " .. cap .. " W: " .. reasons)
    end
    if answer.decision == "reject" then
        slurm.log_user("wattledger: rejected: " .. reasons)
        return slurm.ERROR
    end
    if answer.decision == "defer" and answer.start_at_unix then
        job_desc.begin_time = answer.start_at_unix
        slurm.log_user("wattledger: deferred to " .. iso(answer.start_at_unix) .. ": " .. reasons)
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

slurm.log_info("wattledger job_submit.lua loaded (luasocket=%s, luasec=%s, cjson=%s)",
    tostring(has_socket), tostring(has_https), tostring(has_cjson))
return slurm.SUCCESS
