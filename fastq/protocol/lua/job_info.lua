#!lua flags=allow-oom
--! include args
--! include unique
--! include records
-- job_info: what Redis holds of one job of one queue, read in one call: its state,
-- envelope, attempts, last error, progress, result, tags, times and worker. A read:
-- it writes nothing but the records of done jobs that acks logged and no one has
-- folded yet, folded first when the job has no envelope (lib/records.lua), so a job
-- that just ended reads done. What `fastq inspect` and App.get_job show, and what a client in
-- any language reads a job with (docs/protocol.md, "Reading a job back").
--
-- KEYS[1]  jobs        hash   id -> envelope
-- KEYS[2]  scheduled   zset   id -> due time (ms)
-- KEYS[3]  dead        zset   id -> time of death (ms)
-- KEYS[4]  broken      hash   id -> why it could not run
-- KEYS[5]  stalls      hash   id -> stall count
-- KEYS[6]  poison      hash   dead id -> why it died when no worker could say
-- KEYS[7]  progress    hash   running id -> its latest progress report (JSON)
-- KEYS[8]  cancelled   zset   cancelled id -> when (ms)
-- KEYS[9]  links       hash   id -> its unique lock and tags (lib/unique.lua)
-- KEYS[10] records     hash   id -> the record of a job that ended (lib/records.lua)
-- KEYS[11] records_old hash   the previous generation of records
-- KEYS[12] leases      zset   worker id -> lease deadline (ms): every worker holding jobs
-- KEYS[13] result      string result:<id>, the job's kept return value (JSON)
-- KEYS[14..] held      set    the held set of each worker named in ARGV, in order
--
-- ARGV[1] workers    how many worker ids come first in the tail: exactly the
--                    members of leases (else the reply is 'stale', below)
-- ARGV[2..] rest     the worker ids whose held sets are KEYS[14..], then the job's id
--
-- Reply, version 1: {1, state, field, value, field, value, ...}, a field only when
-- Redis holds it. state: 'queued', 'scheduled', 'active' (a worker holds it: running,
-- or claimed with its batch), 'dead', 'broken', 'cancelled', 'done', 'unknown' (no
-- trace: never enqueued, or its record is gone), or 'stale': the workers given are
-- not those in leases, nothing else was read, and the reply is {1, 'stale',
-- 'workers', {ids...}}: call again with those. Fields (times in ms, Redis' clock):
--   envelope        the envelope as enqueued (JSON, docs/protocol.md): args, kwargs
--   name            the job's name (the envelope's, when a string)
--   enqueued_ms     the envelope's enqueue time, when a number
--   attempts        failed attempts: the envelope's, or the record's
--   error           the last error: the reason a poison job died, the envelope's, or
--                   the record's
--   traceback       the last failure's traceback (the envelope's)
--   failed_ms       when it last failed: the envelope's, or when it died
--   due_ms          when a scheduled job is due
--   worker          the worker holding it (active), else the one that ran it last
--                   (the record's)
--   lease_until_ms  when that worker's lease lapses unless it extends it
--   stalls          times its worker died or hung while running it
--   broken          why it could not run
--   progress        its latest progress report: {"fraction": f, "meta": m} (JSON)
--   tags            its tags (an array)
--   cancelled_ms    when it was cancelled
--   ended_ms        when it ended (the record's)
--   run_ms          how long its last run took (the record's)
--   result          its kept return value (JSON, @app.job(result_ttl_s=...))
-- A client ignores a field it does not know: fields are added without a new
-- version; a new version means a field changed its meaning.

local VERSION = 1
local MAX_WORKERS = 5000  -- unpack() is bounded by Lua's C stack

local n_workers = arg_int('job_info', 1, 'workers', 0)
if n_workers > MAX_WORKERS then
    error('job_info: workers (ARGV[1]) must be <= ' .. MAX_WORKERS .. ', not ' .. n_workers)
end
if #KEYS ~= 13 + n_workers or #ARGV ~= 2 + n_workers then
    error('job_info: ' .. n_workers .. ' workers need as many held sets (KEYS[14..]) '
        .. 'and worker ids (ARGV[2..]), then the job id')
end
local id = ARGV[2 + n_workers]
if id == '' then
    error('job_info: the job id (ARGV[' .. (2 + n_workers) .. ']) must not be empty')
end

-- the workers named must be every worker holding leases, and only those
local holding = redis.call('ZCARD', KEYS[12])
local stale = holding ~= n_workers
if not stale and n_workers > 0 then
    local known = redis.call('ZMSCORE', KEYS[12], unpack(ARGV, 2, 1 + n_workers))
    for i = 1, n_workers do
        if not known[i] then
            stale = true
            break
        end
    end
end
if stale then
    return {VERSION, 'stale', 'workers', redis.call('ZRANGE', KEYS[12], 0, MAX_WORKERS - 1)}
end

local out = {VERSION, 'unknown'}
local function put(field, value)
    if value ~= nil and value ~= false then
        out[#out + 1] = field
        out[#out + 1] = value
    end
end
-- a JSON number that Redis can reply as an integer (ms, counts): else nil
local function int_of(v)
    if type(v) == 'number' and v == v and v > -9007199254740992 and v < 9007199254740992 then
        return v
    end
    return nil
end
local function str_of(v)
    return type(v) == 'string' and v or nil
end

local envelope = redis.call('HGET', KEYS[1], id)
if envelope == false then
    -- its latest end may be logged, not folded yet (a retried job's done after its
    -- dead record): fold first, as fold.lua does for a read
    fold_records(KEYS[10], nil)
    fold_records(KEYS[11], nil)
end
local record = redis.call('HGET', KEYS[10], id)
if not record then
    record = redis.call('HGET', KEYS[11], id)
end
-- 'outcome|ended_ms|attempts|run_ms|error|worker' (lib/records.lua); error may hold
-- '|', worker never does
local rec = nil
if record then
    local outcome, ended, attempts, run_ms, rest =
        string.match(record, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
    if outcome then
        local err, worker = string.match(rest, '^(.*)|([^|]*)$')
        rec = {outcome = outcome, ended = tonumber(ended), attempts = tonumber(attempts),
            run_ms = tonumber(run_ms), error = err ~= '' and err or nil,
            worker = worker ~= '' and worker or nil}
    end
end
local died = redis.call('ZSCORE', KEYS[3], id)
local broken = redis.call('HGET', KEYS[4], id)

if not envelope then
    if rec then
        out[2] = rec.outcome
        put('attempts', rec.attempts)
        put('error', rec.error)
        put('worker', rec.worker)
        put('ended_ms', rec.ended)
        put('run_ms', rec.run_ms)
        if rec.outcome == 'dead' then
            put('failed_ms', rec.ended)
        elseif rec.outcome == 'cancelled' then
            put('cancelled_ms', rec.ended)
        end
    else
        local cancelled = redis.call('ZSCORE', KEYS[8], id)
        if cancelled then
            out[2] = 'cancelled'
            put('cancelled_ms', tonumber(cancelled))
        elseif broken then
            out[2] = 'broken'  -- quarantined without a payload
            put('broken', broken)
        end
    end
    put('result', redis.call('GET', KEYS[13]))
    return out
end

put('envelope', envelope)
local holder, lease_until = nil, nil
for w = 1, n_workers do
    if redis.call('SISMEMBER', KEYS[13 + w], id) == 1 then
        holder = ARGV[1 + w]
        lease_until = tonumber(redis.call('ZSCORE', KEYS[12], holder))
        break
    end
end
local due = redis.call('ZSCORE', KEYS[2], id)
if broken then
    out[2] = 'broken'
elseif died then
    out[2] = 'dead'
elseif holder then
    out[2] = 'active'
elseif due then
    out[2] = 'scheduled'
else
    out[2] = 'queued'
end

-- the envelope's fields: [name, args, t, {fields}] or the object of the format
-- before; one that is not JSON (a hand-written one) has none
local ok, env = pcall(cjson.decode, envelope)
local fields, name, enqueued = {}, nil, nil
if ok and type(env) == 'table' then
    if env[1] ~= nil then
        name, enqueued = env[1], env[3]
        if type(env[4]) == 'table' then
            fields = env[4]
        end
    else
        fields = env
        name, enqueued = env['name'], env['enqueued_at']
    end
end
local poison = redis.call('HGET', KEYS[6], id)
local stalls = redis.call('HGET', KEYS[5], id)
put('name', str_of(name))
put('enqueued_ms', int_of(enqueued))
put('attempts', int_of(fields['attempts']))
put('error', poison or str_of(fields['error']))
put('traceback', str_of(fields['traceback']))
-- a poison job died when its last stall was counted, whatever failed before
local failed = int_of(fields['failed_at'])
if poison or not failed then
    failed = died and tonumber(died)
end
put('failed_ms', failed)
put('due_ms', due and tonumber(due))
if holder then
    put('worker', holder)
    put('lease_until_ms', lease_until)
elseif out[2] == 'dead' and rec and rec.outcome == 'dead' then
    put('worker', rec.worker)  -- the worker that ran it last
end
if out[2] == 'dead' and rec then
    put('ended_ms', rec.ended)
end
-- its stall count goes as a poison job dies; its reason (lib/requeue.lua) keeps it
if stalls then
    put('stalls', tonumber(stalls))
elseif poison then
    put('stalls', tonumber(string.match(poison, '^stalled (%d+) ')))
end
put('broken', broken)
put('progress', redis.call('HGET', KEYS[7], id))
local link = redis.call('HGET', KEYS[9], id)
if link then
    local _, _, tags = parse_link(link)
    if #tags > 0 then
        put('tags', tags)
    end
end
put('result', redis.call('GET', KEYS[13]))
return out
