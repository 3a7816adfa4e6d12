#!lua
--! include many
--! include records
--! include batches
--! include groups
-- enqueue: add a batch of jobs to one queue.
--
-- KEYS[1] jobs       hash   id -> envelope
-- KEYS[2] ready      list   ids; producers LPUSH, workers pop the right end (the front)
-- KEYS[3] prio       zset   ids with a non-zero priority; score = -priority * 2^31 + seq
-- KEYS[4] scheduled  zset   id -> due time (ms); a delayed job's score carries its
--                            slot of the millisecond as a fraction (see below)
-- KEYS[5] stats      hash   counters (enqueued, seq, ...)
-- KEYS[6] wake       list   at most one token; idle workers BLPOP it
-- KEYS[7] sched_prio hash   scheduled id -> priority, written only when it is not 0
-- KEYS[8] cancelled  zset   cancelled id -> when (ms): such an id is never added again
-- KEYS[9] links      hash   id -> its tags and unique lock (lib/unique.lua), for the
--                           jobs that have either: what their end cleans up
-- KEYS[10] tagged    zset   "<tag>\n<id>" of every live tagged job, all scored 0
-- KEYS[11] unique    hash   unique key -> the id holding its lock
-- KEYS[12] unique_exp zset  unique key -> when its lock's window ends (ms)
-- KEYS[13] settings  hash   the queue's settings: ustart = 1 once it has had a job
--                           with unique mode 'start' (the claim then releases locks)
-- KEYS[14] records   hash   id -> the record of a job that ended (lib/records.lua):
--                           such an id is never added again while its record lasts
-- KEYS[15] records_old hash the previous generation of records, the same
--                           (a call of 13 KEYS, from a producer written before
--                           records, is served as before: ids not checked there)
-- KEYS[16] batched   hash   id -> its batch, for the jobs of one (lib/batches.lua)
-- KEYS[17] batches   hash   batch id -> this queue's share of it: its enqueued count
--                           (a call of 15 KEYS is served as before, without a batch)
-- KEYS[18] chained   hash   id -> the rest of its chain, for a link of one
--                           (lib/chains.lua; a call of 17 KEYS is served as before,
--                           without "then")
-- KEYS[19] group_ready zset the ready jobs of the queue's groups (lib/groups.lua)
-- KEYS[20] group_ring list  the groups with ready jobs, in the order served (a call of
--                           18 KEYS is served as before, without groups)
--
-- ARGV[1] priority   integer shared by the batch (0 = plain FIFO)
-- ARGV[2] due        a delay in ms: 0 = ready now, > 0 = scheduled that long after
--                    Redis' clock; or '@' and a Unix time in ms on Redis' clock
--                    ('@1764579600000'): scheduled then, ready now if it has passed
-- ARGV[3] extras     '' for a plain batch (it costs nothing more), or a JSON object
--                    shared by the batch: {"tags": [tag, ...], "unique": "e"|"s"|"w",
--                    "unique_for_ms": window, "batch": batch id}; with "unique" each
--                    job carries its unique key (see below); with "batch" the jobs
--                    added join that batch, which must have been joined on this
--                    queue (batch_join.lua) and not sealed (closed or cancelled),
--                    and the script writes it into each envelope's object, as
--                    "b" (the claim hands it to the worker, whose ack counts the
--                    batch's jobs by it: no lookup per job);
--                    "then": the rest of a chain (a JSON array, as a string, that
--                    only forwarders read: fastq/protocol/chains.py), for a call of
--                    one job, which becomes a link of that chain: kept in chained
--                    while the job lives, if the job is added
-- ARGV[4..] jobs     id, envelope pairs; id, envelope, unique key triples when the
--                    extras name a unique mode
--
-- An id that already exists is left alone (custom ids make enqueue idempotent), and
-- so is an id that ended (done, dead, cancelled) while its record lasts, and one
-- that was cancelled (while its marker lasts).
-- A unique job whose key is locked (by a job enqueued less than unique_for_ms ago,
-- whose lock its end, its start or nothing released yet) is not added; else it
-- takes the lock.
-- A job scheduled before every job already scheduled leaves a wake-up token, so an
-- idle worker sleeping until a later due time wakes and sleeps until this one.
-- A job whose envelope names a group ("g" in its object: 1 to 100 printable
-- characters) joins the back of that group's jobs of its priority (lib/groups.lua),
-- or, delayed, is promoted there when due; the queue's settings then say groups =
-- "1", and its claims serve its groups round-robin.
-- Returns the number of jobs added; with "unique": {added, i1, holder1, ...}, the
-- position in the batch (from 1) and the lock holder's id of each job refused.
-- No allow-oom flag: over maxmemory Redis refuses the whole call before it runs.

-- Every argument is checked before the first write, so a refused call writes
-- nothing: `ERR fastq enqueue: <which argument and why>`. The limits are those of
-- fastq/validate.py (tests/unit/test_protocol_limits.py holds them equal), so that a
-- producer of another language cannot write what a worker cannot serve. What is
-- left to the producer (docs/protocol.md, "What the script checks"): the JSON inside
-- the arguments, the characters of tags and unique keys beyond control bytes.
local MAX_JOBS_PER_CALL = 1000
local MAX_JOBS_PER_CALL_EXTRAS = 250
local MAX_JOB_ID_BYTES = 200
local RESERVED_PREFIX = 'fastq:'
local MAX_PRIORITY = 1048576
local MAX_DELAY_MS = 315360000000
local MAX_TAGS = 20
local MAX_TAG_CHARS = 100
local MAX_UNIQUE_KEY_CHARS = 200
local MAX_JOB_NAME_CHARS = 200
local MIN_ENQUEUED_AT_MS = 946684800000
local MAX_ENQUEUED_AHEAD_MS = 86400000
local MAX_RETRIES = 2147483648
local MAX_GROUP_CHARS = 100
local QUEUE_KEYS = {'jobs', 'ready', 'prio', 'scheduled', 'stats', 'wake', 'sched_prio',
    'cancelled', 'links', 'tagged', 'unique', 'unique_exp', 'settings', 'records',
    'records_old', 'batched', 'batches', 'chained', 'group_ready', 'group_ring'}
local ENVELOPE_FIELDS = {'k', 'p', 'retries', 'age_limit_ms', 'backoff', 'g'}
local WORKER_FIELDS = {'attempts', 'error', 'traceback', 'failed_at', 'rate_slot',
    'unknown_since'}
-- a job's batch: written here, from the extras
local BATCH_FIELD = 'b'

local byte, find, match, sub, floor = string.byte, string.find, string.match, string.sub,
    math.floor

-- a value for an error message (a string in quotes), cut short: an id or an
-- envelope may be megabytes
local function cut(text)
    if #text > 60 then
        return sub(text, 1, 60) .. '... (' .. #text .. ' bytes)'
    end
    return text
end
local function shown(value)
    if type(value) == 'string' then
        return '"' .. cut(value) .. '"'
    end
    local ok, encoded = pcall(cjson.encode, value)
    return cut(ok and encoded or tostring(value))
end
local function refuse(message)
    error(redis.error_reply('ERR fastq enqueue: ' .. message))
end
local function is_int(v, lo, hi)
    return type(v) == 'number' and v == floor(v) and v >= lo and v <= hi
end
-- an object as cjson decodes it: a table without item 1 (`{}` and `[]` are alike)
local function is_object(v)
    return type(v) == 'table' and v[1] == nil
end
local function is_array(v)
    return type(v) == 'table' and (v[1] ~= nil or next(v) == nil)
end
-- a tag or a unique key: 1 to max_chars characters (UTF-8), no control byte
local function text_ok(s, max_chars)
    local n = #s
    if n < 1 or find(s, '%c') then
        return false
    end
    if n > max_chars then
        if n > 4 * max_chars then
            return false
        end
        local _, continuation = string.gsub(s, '[\128-\191]', '')
        return n - continuation <= max_chars
    end
    return true
end
local function set_of(list)
    local out = {}
    for i = 1, #list do
        out[list[i]] = true
    end
    return out
end
-- KEYS: one queue's, in the declared order (cheap string checks, once per call)
if #KEYS ~= 20 and #KEYS ~= 18 and #KEYS ~= 17 and #KEYS ~= 15 and #KEYS ~= 13 then
    refuse('KEYS must be the 20 keys of one queue, NS:{Q}:jobs to NS:{Q}:group_ring, '
        .. 'not ' .. #KEYS .. ' keys')
end
local prefix = sub(KEYS[1], 1, -5)
if sub(KEYS[1], -5) ~= ':jobs' or not find(prefix, '^[^{}]+:{[^{}]+}:$') then
    refuse("KEYS[1] must be a queue's jobs key, NS:{Q}:jobs, not " .. shown(KEYS[1]))
end
for i = 2, #KEYS do
    if KEYS[i] ~= prefix .. QUEUE_KEYS[i] then
        refuse('KEYS[' .. i .. '] must be ' .. prefix .. QUEUE_KEYS[i] .. ' (the keys of '
            .. 'one queue, in order), not ' .. shown(KEYS[i]))
    end
end

-- the extras, first: they set the stride of the jobs
local tags, umode, uwindow, batch, chain_rest = nil, nil, 0, nil, nil
local stride = 2
if ARGV[3] and ARGV[3] ~= '' then
    local ok, extras = pcall(cjson.decode, ARGV[3])
    if not ok or not is_object(extras) then
        refuse('extras (ARGV[3]) must be empty or a JSON object, not ' .. shown(ARGV[3]))
    end
    for key in pairs(extras) do
        if key ~= 'tags' and key ~= 'unique' and key ~= 'unique_for_ms' and key ~= 'batch'
                and key ~= 'then' then
            refuse('extras: unknown key ' .. shown(key) .. ' (known: tags, unique, '
                .. 'unique_for_ms, batch, then)')
        end
    end
    if extras['tags'] ~= nil then
        tags = extras['tags']
        if not is_array(tags) or #tags < 1 or #tags > MAX_TAGS then
            refuse('extras: tags must be a list of 1 to ' .. MAX_TAGS .. ' tags')
        end
        for i = 1, #tags do
            local tag = tags[i]
            if type(tag) ~= 'string' or not text_ok(tag, MAX_TAG_CHARS) then
                refuse('extras: tag #' .. i .. ' must be a string of 1 to ' .. MAX_TAG_CHARS
                    .. ' characters without a control character, not ' .. shown(tag))
            end
        end
    end
    if extras['unique'] ~= nil then
        umode = extras['unique']
        if umode ~= 'e' and umode ~= 's' and umode ~= 'w' then
            refuse("extras: unique must be 'e', 's' or 'w', not " .. shown(umode))
        end
        uwindow = extras['unique_for_ms']
        if not is_int(uwindow, 1, MAX_DELAY_MS) then
            refuse('extras: unique_for_ms must be a whole number of ms within [1, '
                .. MAX_DELAY_MS .. '], not ' .. shown(uwindow))
        end
        stride = 3
    elseif extras['unique_for_ms'] ~= nil then
        refuse('extras: unique_for_ms without unique')
    end
    if extras['batch'] ~= nil then
        batch = extras['batch']
        if type(batch) ~= 'string' or #batch > MAX_JOB_ID_BYTES or not find(batch, '^[!-~]+$') then
            refuse('extras: batch must be a batch id (1 to ' .. MAX_JOB_ID_BYTES
                .. ' printable ASCII characters), not ' .. shown(batch))
        end
        if #KEYS < 17 then
            refuse('extras: a batch needs 17 keys of the queue or more, NS:{Q}:batched and '
                .. 'NS:{Q}:batches 16th and 17th')
        end
        local share = share_of(redis.call('HGET', KEYS[17], batch))
        if not share then
            refuse('batch ' .. shown(batch) .. ' was not joined on this queue (batch_join '
                .. 'first), or has ended')
        elseif share[6] ~= '' then
            refuse('batch ' .. shown(batch) .. ' is ' .. (share[6] == 'x' and 'cancelled'
                or 'closed') .. ': no job joins it now')
        end
    end
    if extras['then'] ~= nil then
        chain_rest = extras['then']
        if type(chain_rest) ~= 'string' or byte(chain_rest, 1) ~= 91 then
            refuse('extras: then must be the rest of a chain, a JSON array as a string, '
                .. 'not ' .. shown(chain_rest))
        end
        if #KEYS < 18 then
            refuse('extras: then needs 18 keys of the queue or more, NS:{Q}:chained 18th')
        end
    end
end
if chain_rest and #ARGV ~= 3 + stride then
    refuse('extras: "then" (the rest of a chain) goes with one job, not '
        .. floor((#ARGV - 3) / stride))
end
if #ARGV < 3 or (#ARGV - 3) % stride ~= 0 then
    refuse('ARGV must be priority, delay_ms (or @at_ms), extras, then id/envelope pairs'
        .. ' (triples with a unique key); got ' .. #ARGV .. ' values')
end
local count = (#ARGV - 3) / stride
local max_jobs = (tags or umode) and MAX_JOBS_PER_CALL_EXTRAS or MAX_JOBS_PER_CALL
if count > max_jobs then
    refuse('at most ' .. max_jobs .. ' jobs per call' .. ((tags or umode) and ' with tags or unique'
        or ' (250 with tags or unique)') .. ', not ' .. count .. ': send several calls')
end
local priority = tonumber(ARGV[1])
if not is_int(priority, -MAX_PRIORITY, MAX_PRIORITY) then
    refuse('priority must be an integer within +-2^20, not ' .. shown(ARGV[1]))
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
local due = -1  -- the due time in ms; -1: ready now
if byte(ARGV[2], 1) == 64 then  -- '@': a due time on Redis' clock
    local at_ms = tonumber(sub(ARGV[2], 2))
    if not is_int(at_ms, 0, now + MAX_DELAY_MS) then
        refuse('@at_ms must be whole Unix milliseconds at most ten years ahead of '
            .. "Redis' clock (" .. now .. '), not ' .. shown(ARGV[2]))
    end
    if at_ms > now then
        due = at_ms
    end
else
    local delay_ms = tonumber(ARGV[2])
    if delay_ms == nil or delay_ms ~= delay_ms or delay_ms < 0 or delay_ms > MAX_DELAY_MS then
        refuse('delay_ms must be a number within [0, ' .. MAX_DELAY_MS .. '] (ten years), not '
            .. shown(ARGV[2]))
    end
    if delay_ms > 0 then
        due = now + math.ceil(delay_ms)
    end
end

-- The envelopes. Most are read by patterns, without a decode: a compact one
-- (`["name",[...],1795457347206]`, as fastq and JSON.stringify write it) by its ends:
-- a name without a quote or a backslash, the opening of the args, their closing
-- bracket and the integer before the last bracket; with its object, when the object
-- is plain (no brace inside but those of fastq's keyword arguments, which come
-- first), only the fields beside the keyword arguments are decoded. Any other is
-- decoded whole (cjson) and checked item by item. Redis' time a job, least of 7 runs
-- (bench.enqueue_cost, before -> after the checks): 1.13 -> 1.68 us for a compact
-- envelope, 2.23 -> 3.31 us with keyword arguments and a priority; decoding each
-- whole cost 1.5 to 2 us a job more.
local min_t, max_t = MIN_ENQUEUED_AT_MS, now + MAX_ENQUEUED_AHEAD_MS
-- the fields fastq's producer sends with a priority: checked by a comparison
local p_only = '"p":' .. string.format('%d', priority)
local known_fields, worker_fields = set_of(ENVELOPE_FIELDS), set_of(WORKER_FIELDS)
local function check_t(value, nth)
    if not is_int(value, min_t, max_t) then
        refuse('envelope #' .. nth .. ': enqueued_at (item 3) must be an integer of Unix '
            .. 'milliseconds within [' .. min_t .. ', ' .. max_t .. '], not ' .. shown(value))
    end
end
-- the fields of an envelope's object (decoded): each known to this version and
-- typed; returns the job's group, if it names one
local function check_fields(fields, nth)
    if not is_object(fields) then
        refuse('envelope #' .. nth .. ': item 4 must be an object, not ' .. shown(fields))
    end
    for key, v in pairs(fields) do
        local bad = nil
        if worker_fields[key] then
            bad = 'is written by workers: never send it'
        elseif key == BATCH_FIELD then
            bad = 'is written by the enqueue script, from the batch in the extras: never '
                .. 'send it'
        elseif not known_fields[key] then
            bad = 'is not a field a producer sets (k, p, retries, age_limit_ms, backoff, g)'
        elseif key == 'k' then
            bad = not is_object(v) and 'must be an object (the keyword arguments)'
        elseif key == 'p' then
            bad = v ~= priority and ('must be the call\'s priority (ARGV[1], ' .. priority .. ')')
        elseif key == 'retries' then
            bad = not is_int(v, 0, MAX_RETRIES) and ('must be an integer within [0, '
                .. MAX_RETRIES .. ']')
        elseif key == 'age_limit_ms' then
            bad = not is_int(v, 1, MAX_DELAY_MS) and ('must be an integer within [1, '
                .. MAX_DELAY_MS .. ']')
        elseif key == 'backoff' then
            bad = not (type(v) == 'table' and type(v[1]) == 'string')
                and 'must be a list [kind, ...] (docs/retries.md)'
        elseif key == 'g' then
            if type(v) ~= 'string' or not text_ok(v, MAX_GROUP_CHARS) then
                bad = 'must be a group: 1 to ' .. MAX_GROUP_CHARS .. ' characters without a '
                    .. 'control character'
            elseif #KEYS < 20 then
                bad = 'needs the 20 keys of the queue, NS:{Q}:group_ready and '
                    .. 'NS:{Q}:group_ring last'
            end
        end
        if bad then
            refuse('envelope #' .. nth .. ': field ' .. cut(key) .. ' ' .. bad .. ', not '
                .. shown(v))
        end
    end
    return fields['g']
end

local function check_decoded(env, nth)
    local ok, e = pcall(cjson.decode, env)
    if not ok or type(e) ~= 'table' or (#e ~= 3 and #e ~= 4) or next(e, #e) ~= nil then
        refuse('envelope #' .. nth .. ' must be a JSON array [name, args, enqueued_at_ms] '
            .. 'or [name, args, enqueued_at_ms, {fields}], not ' .. shown(env))
    end
    if type(e[1]) ~= 'string' or not text_ok(e[1], MAX_JOB_NAME_CHARS) then
        refuse('envelope #' .. nth .. ': the name (item 1) must be a string of 1 to '
            .. MAX_JOB_NAME_CHARS .. ' characters without a control character, not '
            .. shown(e[1]))
    end
    if not is_array(e[2]) then
        refuse('envelope #' .. nth .. ': args (item 2) must be an array, not ' .. shown(e[2]))
    end
    check_t(e[3], nth)
    if e[4] ~= nil then
        return check_fields(e[4], nth)
    end
end

-- the checks of each job, inlined: a function call per job would cost as much as a
-- check; the position of a job refused (nth) is worked out only then
local group_of = nil  -- nth -> group, for the jobs that name one
local last_more, last_group = nil, nil  -- the fields last decoded and checked, and their group
for i = 4, #ARGV, stride do
    local id = ARGV[i]
    local len = #id
    if len < 1 or len > MAX_JOB_ID_BYTES then
        refuse('job id #' .. (i - 4) / stride + 1 .. ' must be 1 to ' .. MAX_JOB_ID_BYTES
            .. ' bytes')
    end
    if find(id, '[^!-~]') then
        refuse('job id #' .. (i - 4) / stride + 1 .. ' must be printable ASCII without '
            .. 'whitespace, not ' .. shown(id))
    end
    -- 102 is 'f': only then is the prefix worth a substring
    if byte(id, 1) == 102 and sub(id, 1, 6) == RESERVED_PREFIX then
        refuse('job id #' .. (i - 4) / stride + 1 .. " starts with the reserved prefix 'fastq:'")
    end
    -- compact: '["name",[' ... '],<digits>]' without its object; with it, when the
    -- object is plain: '["name",[],<digits>,{"k":{...}' and plain fields, as fastq's
    -- producer writes keyword arguments, or '...],<digits>,{...}]' without them
    -- ("plain": no brace inside); only its plain fields are then decoded
    local env = ARGV[i + 1]
    local n = #env
    local t, more = nil, nil
    -- the compact form's name: no control byte, and at most MAX_JOB_NAME_CHARS bytes
    -- (a longer one, in characters, is counted by check_decoded)
    local _, name_end = find(env, '^%["[^"\\%c]+",%[')
    if name_end and name_end - 5 <= MAX_JOB_NAME_CHARS then
        t = match(env, '%],(%d+)%]$', n > 24 and n - 24 or 1)
        if not t and byte(env, n - 1) == 125 and byte(env, n) == 93 then  -- '}]'
            local at
            t, at = match(env, '^%["[^"\\]+",%[%],(%d+),{"k":{[^{}]*}()')
            if t then
                if at == n - 1 then
                    more = ''
                elseif byte(env, at) == 44 then
                    more = sub(env, at + 1, n - 2)
                    if find(more, '[{}]') then
                        t = nil
                    end
                else
                    t = nil
                end
            else
                t, more = match(env, '%],(%d+),{([^{}]*)}%]$', n > 300 and n - 300 or 1)
            end
        end
    end
    t = t and tonumber(t)
    local g = nil
    if not t or t < min_t or t > max_t then
        g = check_decoded(env, (i - 4) / stride + 1)  -- any other form; refuses a bad one
    elseif more and more ~= '' and more ~= p_only then
        if more == last_more then
            -- the fields of the job before, checked (a call's jobs share them: a
            -- group's, a retry policy's): one decode per call, not per job
            g = last_group
        else
            local ok, fields = pcall(cjson.decode, '{' .. more .. '}')
            if ok then
                g = check_fields(fields, (i - 4) / stride + 1)
                last_more, last_group = more, g
            else
                g = check_decoded(env, (i - 4) / stride + 1)
            end
        end
    end
    if g then
        group_of = group_of or {}
        group_of[(i - 4) / stride + 1] = g
    end
    if umode then
        local ukey = ARGV[i + 2]
        if not text_ok(ukey, MAX_UNIQUE_KEY_CHARS) then
            refuse('unique key #' .. (i - 4) / stride + 1 .. ' must be 1 to '
                .. MAX_UNIQUE_KEY_CHARS .. ' characters without a control character, not '
                .. shown(ukey))
        end
    end
end

-- a cancelled id stays cancelled: one EXISTS unless the queue has cancelled jobs
local cancelled = nil
if redis.call('EXISTS', KEYS[8]) == 1 and #ARGV > 3 then
    local ids = {}
    for i = 4, #ARGV, stride do
        ids[#ids + 1] = ARGV[i]
    end
    cancelled = call_many('ZMSCORE', KEYS[8], ids)
end
-- an id that ended stays ended while its record lasts (in either generation; logged
-- ones folded first, lib/records.lua): one EXISTS unless the queue has records; a
-- job ended is then as one cancelled
if #KEYS >= 15 and #ARGV > 3 and redis.call('EXISTS', KEYS[14], KEYS[15]) > 0 then
    local ids = {}
    for i = 4, #ARGV, stride do
        ids[#ids + 1] = ARGV[i]
    end
    cancelled = ended_ids({records = KEYS[14], old = KEYS[15]}, ids, cancelled)
end

-- the locks of the batch's unique keys, read in two calls: holder and window end
local holders, ends = nil, nil
if umode and #ARGV > 3 then
    local ukeys = {}
    for i = 6, #ARGV, 3 do
        ukeys[#ukeys + 1] = ARGV[i]
    end
    holders = call_many('HMGET', KEYS[11], ukeys)
    ends = call_many('ZMSCORE', KEYS[12], ukeys)
end

-- A job's batch, written into its envelope (checked: a JSON array of 3 or 4 items,
-- the third an integer) as the last field of its object, item 4 (added if absent).
local batch_field = batch and '"b":' .. cjson.encode(batch)
local function last_solid(env, at)  -- the last byte at or before `at` not JSON blank
    local c = byte(env, at)
    while c == 32 or c == 10 or c == 13 or c == 9 do
        at = at - 1
        c = byte(env, at)
    end
    return at, c
end
-- a compact envelope without an object (fastq's, most often): one concatenation
local batch_tail = batch and ',{' .. batch_field .. '}]'
local function with_batch(env)
    local n = #env
    local c = byte(env, n - 1)
    if byte(env, n) == 93 and c >= 48 and c <= 57 then  -- ends with a digit and ']'
        return sub(env, 1, n - 1) .. batch_tail
    end
    local close = last_solid(env, n)  -- the array's ']'
    local last, c = last_solid(env, close - 1)
    if c ~= 125 then  -- '}': item 4; else item 3 ends the array, an integer
        return sub(env, 1, last) .. ',{' .. batch_field .. '}' .. sub(env, last + 1)
    end
    local _, before = last_solid(env, last - 1)
    return sub(env, 1, last - 1) .. (before == 123 and '' or ',') .. batch_field
        .. sub(env, last)
end

local added, refused, links, locks, taken = {}, {}, {}, {}, {}
local added_group = {}  -- position in added -> its group, for the grouped jobs
for i = 4, #ARGV, stride do
    local id = ARGV[i]
    local nth = (i - 4) / stride + 1
    if cancelled and cancelled[nth] then
        -- left alone, like an id that exists
    elseif umode then
        local ukey = ARGV[i + 2]
        -- held: by a job of this batch, or by one whose window has not ended
        local holder = taken[ukey]
        if not holder and holders[nth] and ends[nth] and tonumber(ends[nth]) > now then
            holder = holders[nth]
        end
        if holder then
            refused[#refused + 1] = nth
            refused[#refused + 1] = holder
        elseif redis.call('HSETNX', KEYS[1], id, batch and with_batch(ARGV[i + 1])
                or ARGV[i + 1]) == 1 then
            added[#added + 1] = id
            added_group[#added] = group_of and group_of[nth]
            taken[ukey] = id
            locks[#locks + 1] = ukey
            locks[#locks + 1] = id
            links[#links + 1] = id
            links[#links + 1] = umode .. ukey
        end
    elseif redis.call('HSETNX', KEYS[1], id, batch and with_batch(ARGV[i + 1])
            or ARGV[i + 1]) == 1 then
        added[#added + 1] = id
        added_group[#added] = group_of and group_of[nth]
    end
end
local n = #added
if #locks > 0 then
    call_many('HSET', KEYS[11], locks)
    local until_ms = now + uwindow
    for j = 1, #locks, 2 do
        locks[j + 1], locks[j] = locks[j], until_ms
    end
    call_many('ZADD', KEYS[12], locks)
end
local function reply()
    if not umode then
        return n
    end
    local out = {n}
    for j = 1, #refused do
        out[#out + 1] = refused[j]
    end
    return out
end
if n == 0 then
    return reply()
end

if chain_rest then
    redis.call('HSET', KEYS[18], added[1], chain_rest)
end

if batch then
    local members = {}
    for j = 1, n do
        members[#members + 1] = added[j]
        members[#members + 1] = batch
    end
    call_many('HSET', KEYS[16], members)
    add_enqueued({batched = KEYS[16], batches = KEYS[17]}, batch, n)
elseif #KEYS >= 16 and redis.call('EXISTS', KEYS[16]) == 1 then
    -- an id that ended in a batch may have left its entry (an ack grouped by batch
    -- does, until the share ends): a plain job of that id again is in no batch
    call_many('HDEL', KEYS[16], added)
end

-- the links records and tag entries of the jobs added (what their end cleans up)
if tags then
    local lines = '\n' .. table.concat(tags, '\n')
    if umode then
        for j = 2, #links, 2 do
            links[j] = links[j] .. lines
        end
    else
        for j = 1, n do
            links[#links + 1] = added[j]
            links[#links + 1] = lines
        end
    end
    local members = {}
    for j = 1, n do
        for t = 1, #tags do
            members[#members + 1] = 0
            members[#members + 1] = tags[t] .. '\n' .. added[j]
        end
    end
    if #members > 0 then
        call_many('ZADD', KEYS[10], members)
    end
end
if #links > 0 then
    call_many('HSET', KEYS[9], links)
end
if umode == 's' then
    redis.call('HSET', KEYS[13], 'ustart', 1)
end

-- Grouped jobs: the queue says it has groups (its claims then serve them
-- round-robin, the jobs of no group as one group: '' in the ring); ready now, each
-- group's go to its back; delayed, promotion reads the group in sched_prio.
local grouped = nil  -- group -> its ids added, ready now
local plain = added
if group_of then
    if redis.call('HSETNX', KEYS[13], 'groups', 1) == 1 then
        redis.call('RPUSH', KEYS[20], '')
    end
    plain, grouped = {}, {}
    local order, places = {}, {}
    for j = 1, n do
        local g = added_group[j]
        if not g then
            plain[#plain + 1] = added[j]
        elseif due >= 0 then
            places[#places + 1] = added[j]
            places[#places + 1] = 'g' .. string.format('%d', priority) .. '\n' .. g
        else
            if not grouped[g] then
                grouped[g] = {}
                order[#order + 1] = g
            end
            grouped[g][#grouped[g] + 1] = added[j]
        end
    end
    if #places > 0 then
        call_many('HSET', KEYS[7], places)
    end
    local gk = {ready = KEYS[19], ring = KEYS[20], stats = KEYS[5]}
    for _, g in ipairs(order) do
        group_push_back(gk, g, priority, grouped[g])
    end
end

-- Slots: jobs due in the same millisecond must come out in the order they were
-- scheduled, but the zset orders equal scores by member bytes. So each delayed job
-- takes the next free slot of its millisecond ms: score ms + slot/2048, slot 1 to
-- 2047 (exact in a double until the year 2109). Slot 0, a whole number, is where
-- ack puts a retry, so that a retry due in the same millisecond comes first. A
-- millisecond whose slots are taken spills into the next: due 1 ms later, never
-- earlier. One reverse range query per call finds where the millisecond stands.
local SLOTS = 2048
local function free_slot(ms)
    while true do
        local top = redis.call('ZREVRANGEBYSCORE', KEYS[4], '(' .. (ms + 1), ms, 'WITHSCORES',
            'LIMIT', 0, 1)
        if #top == 0 then
            return ms, 1
        end
        local slot = math.floor((tonumber(top[2]) - ms) * SLOTS + 0.5) + 1
        if slot < SLOTS then
            return ms, slot
        end
        ms = ms + 1
    end
end

if due >= 0 then
    -- the earliest due time so far: an idle worker may sleep until a later one
    local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
    local earliest = #first == 0 or due < math.floor(tonumber(first[2]))
    local ms, slot = free_slot(due)
    local args = {}
    for k = 1, n do
        if slot >= SLOTS then
            ms, slot = free_slot(ms + 1)
        end
        -- %.17g: redis.call would write a Lua number with %.14g, dropping the slot
        args[#args + 1] = string.format('%.17g', ms + slot / SLOTS)
        args[#args + 1] = added[k]
        slot = slot + 1
    end
    call_many('ZADD', KEYS[4], args)
    if priority ~= 0 and #plain > 0 then
        -- promotion reads the priority here, never from the envelope
        local fields = {}
        for k = 1, #plain do
            fields[#fields + 1] = plain[k]
            fields[#fields + 1] = priority
        end
        call_many('HSET', KEYS[7], fields)
    end
    if earliest and redis.call('LLEN', KEYS[6]) == 0 then
        redis.call('RPUSH', KEYS[6], 1)
    end
elseif #plain == 0 then
    -- every job added went to its group
elseif priority ~= 0 then
    -- seq keeps FIFO order within one priority
    local last = redis.call('HINCRBY', KEYS[5], 'seq', #plain)
    local base = -priority * 2147483648 + (last - #plain)
    local args = {}
    for k = 1, #plain do
        -- %.17g: beyond 10^14 (|priority| > 46,566) %.14g would round the seq away
        args[#args + 1] = string.format('%.17g', base + k)
        args[#args + 1] = plain[k]
    end
    call_many('ZADD', KEYS[3], args)
else
    call_many('LPUSH', KEYS[2], plain)
end

redis.call('HINCRBY', KEYS[5], 'enqueued', n)
if due < 0 and redis.call('LLEN', KEYS[6]) == 0 then
    redis.call('RPUSH', KEYS[6], 1)
end
return reply()
