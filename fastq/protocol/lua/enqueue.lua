#!lua
--! include records
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
--
-- ARGV[1] priority   integer shared by the batch (0 = plain FIFO)
-- ARGV[2] due        a delay in ms: 0 = ready now, > 0 = scheduled that long after
--                    Redis' clock; or '@' and a Unix time in ms on Redis' clock
--                    ('@1764579600000'): scheduled then, ready now if it has passed
-- ARGV[3] extras     '' for a plain batch (it costs nothing more), or a JSON object
--                    shared by the batch: {"tags": [tag, ...], "unique": "e"|"s"|"w",
--                    "unique_for_ms": window}; with "unique" each job carries its
--                    unique key (see below)
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
-- Returns the number of jobs added; with "unique": {added, i1, holder1, ...}, the
-- position in the batch (from 1) and the lock holder's id of each job refused.
-- No allow-oom flag: over maxmemory Redis refuses the whole call before it runs.

-- Input checked before the first write, so a refused call writes nothing: the limits
-- of fastq/validate.py, so that a non-Python producer cannot write what a worker
-- cannot serve.
local function refuse(message)
    error(redis.error_reply('ERR fastq enqueue: ' .. message))
end
-- the extras, first: they set the stride of the jobs
local tags, umode, uwindow = nil, nil, 0
local stride = 2
if ARGV[3] and ARGV[3] ~= '' then
    local ok, extras = pcall(cjson.decode, ARGV[3])
    if not ok or type(extras) ~= 'table' then
        refuse('extras (ARGV[3]) must be empty or a JSON object, not ' .. ARGV[3])
    end
    if extras['tags'] ~= nil then
        tags = extras['tags']
        if type(tags) ~= 'table' or #tags < 1 or #tags > 20 then
            refuse('tags must be a list of 1 to 20 tags')
        end
        for i = 1, #tags do
            local tag = tags[i]
            if type(tag) ~= 'string' or #tag < 1 or #tag > 400 or string.find(tag, '\n', 1, true) then
                refuse('tag #' .. i .. ' must be a string of 1 to 400 bytes without a newline')
            end
        end
    end
    if extras['unique'] ~= nil then
        umode = extras['unique']
        if umode ~= 'e' and umode ~= 's' and umode ~= 'w' then
            refuse("unique must be 'e', 's' or 'w', not " .. tostring(umode))
        end
        uwindow = tonumber(extras['unique_for_ms'])
        if uwindow == nil or uwindow ~= math.floor(uwindow) or uwindow < 1
                or uwindow > 315360000000 then
            refuse('unique_for_ms must be a whole number of ms within [1, 315360000000]')
        end
        stride = 3
    end
end
if #ARGV < 3 or (#ARGV - 3) % stride ~= 0 then
    refuse('ARGV must be priority, delay_ms (or @at_ms), extras, then id/envelope pairs'
        .. ' (triples with a unique key); got ' .. #ARGV .. ' values')
end
local TEN_YEARS_MS = 315360000000
local priority = tonumber(ARGV[1])
if priority == nil or priority ~= math.floor(priority) or math.abs(priority) > 1048576 then
    refuse('priority must be an integer within +-2^20, not ' .. ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = -1  -- the due time in ms; -1: ready now
if string.byte(ARGV[2], 1) == 64 then  -- '@': a due time on Redis' clock
    local at_ms = tonumber(string.sub(ARGV[2], 2))
    if at_ms == nil or at_ms ~= at_ms or at_ms < 0 or at_ms ~= math.floor(at_ms)
            or at_ms > now + TEN_YEARS_MS then
        refuse('@at_ms must be whole Unix milliseconds at most ten years ahead of '
            .. "Redis' clock (" .. now .. '), not ' .. ARGV[2])
    end
    if at_ms > now then
        due = at_ms
    end
else
    local delay_ms = tonumber(ARGV[2])
    if delay_ms == nil or delay_ms ~= delay_ms or delay_ms < 0 or delay_ms > TEN_YEARS_MS then
        refuse('delay_ms must be a number within [0, 315360000000] (ten years), not ' .. ARGV[2])
    end
    if delay_ms > 0 then
        due = now + math.ceil(delay_ms)
    end
end
-- What would break the queue is refused here: an id too long for a pool's heartbeat
-- slot, or one in the reserved namespace (the held sets' sentinel lives there). The
-- character set (printable ASCII) is the producers' to check: a pattern match per id
-- here cost ~0.5 us a job, an eighth of the whole call.
for i = 4, #ARGV, stride do
    local id = ARGV[i]
    local len = #id
    local nth = (i - 4) / stride + 1
    if len < 1 or len > 200 then
        refuse('job id #' .. nth .. ' must be 1 to 200 bytes')
    end
    -- 102 is 'f': only then is the prefix worth a substring
    if string.byte(id, 1) == 102 and string.sub(id, 1, 6) == 'fastq:' then
        refuse('job id #' .. nth .. " starts with the reserved prefix 'fastq:'")
    end
    if umode then
        local ukey = ARGV[i + 2]
        if #ukey < 1 or #ukey > 400 or string.find(ukey, '\n', 1, true) then
            refuse('unique key #' .. nth .. ' must be 1 to 400 bytes without a newline')
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
    cancelled = redis.call('ZMSCORE', KEYS[8], unpack(ids))
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
    holders = redis.call('HMGET', KEYS[11], unpack(ukeys))
    ends = redis.call('ZMSCORE', KEYS[12], unpack(ukeys))
end

local added, refused, links, locks, taken = {}, {}, {}, {}, {}
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
        elseif redis.call('HSETNX', KEYS[1], id, ARGV[i + 1]) == 1 then
            added[#added + 1] = id
            taken[ukey] = id
            locks[#locks + 1] = ukey
            locks[#locks + 1] = id
            links[#links + 1] = id
            links[#links + 1] = umode .. ukey
        end
    elseif redis.call('HSETNX', KEYS[1], id, ARGV[i + 1]) == 1 then
        added[#added + 1] = id
    end
end
local n = #added
if #locks > 0 then
    redis.call('HSET', KEYS[11], unpack(locks))
    local until_ms = now + uwindow
    for j = 1, #locks, 2 do
        locks[j + 1], locks[j] = locks[j], until_ms
    end
    redis.call('ZADD', KEYS[12], unpack(locks))
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
        if #members >= 4000 then
            redis.call('ZADD', KEYS[10], unpack(members))
            members = {}
        end
    end
    if #members > 0 then
        redis.call('ZADD', KEYS[10], unpack(members))
    end
end
if #links > 0 then
    redis.call('HSET', KEYS[9], unpack(links))
end
if umode == 's' then
    redis.call('HSET', KEYS[13], 'ustart', 1)
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
    redis.call('ZADD', KEYS[4], unpack(args))
    if priority ~= 0 then
        -- promotion reads the priority here, never from the envelope
        local fields = {}
        for k = 1, n do
            fields[#fields + 1] = added[k]
            fields[#fields + 1] = priority
        end
        redis.call('HSET', KEYS[7], unpack(fields))
    end
    if earliest and redis.call('LLEN', KEYS[6]) == 0 then
        redis.call('RPUSH', KEYS[6], 1)
    end
elseif priority ~= 0 then
    -- seq keeps FIFO order within one priority
    local last = redis.call('HINCRBY', KEYS[5], 'seq', n)
    local base = -priority * 2147483648 + (last - n)
    local args = {}
    for k = 1, n do
        -- %.17g: beyond 10^14 (|priority| > 46,566) %.14g would round the seq away
        args[#args + 1] = string.format('%.17g', base + k)
        args[#args + 1] = added[k]
    end
    redis.call('ZADD', KEYS[3], unpack(args))
else
    redis.call('LPUSH', KEYS[2], unpack(added))
end

redis.call('HINCRBY', KEYS[5], 'enqueued', n)
if due < 0 and redis.call('LLEN', KEYS[6]) == 0 then
    redis.call('RPUSH', KEYS[6], 1)
end
return reply()
