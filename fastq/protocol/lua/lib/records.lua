-- Records: what a job that ended (done, dead, cancelled) leaves behind for a while,
-- written by the script that ends it, in the same call.
--
-- records  hash  id -> 'outcome|ended_ms|attempts|run_ms|error|worker'; outcome is
--                'done', 'dead' or 'cancelled'; a field not known is empty; error
--                (a dead job's last one, at most 200 bytes) may hold '|', worker
--                (after the last '|') never does
-- ended    list  ids in the order they ended, the newest at the left end: what
--                lists them newest first and what the trim reads from the right
--
-- The queue's settings hash may hold records_max_age_ms and records_max_len
-- (absent: 7 days and 100,000; records_max_len 0: no records kept).

local RECORDS_MAX_AGE_MS = 604800000
local RECORDS_MAX_LEN = 100000

-- records_limits: (max_age_ms, max_len) of the queue; max_len 0: records are off.
local function records_limits(settings)
    local s = redis.call('HMGET', settings, 'records_max_age_ms', 'records_max_len')
    return tonumber(s[1]) or RECORDS_MAX_AGE_MS, tonumber(s[2]) or RECORDS_MAX_LEN
end

-- record_text: the record of one job (attempts, run_ms: '' when not known).
local function record_text(outcome, now, attempts, run_ms, error, worker)
    return outcome .. '|' .. now .. '|' .. attempts .. '|' .. run_ms .. '|' .. error
        .. '|' .. worker
end

-- dead_text: the record of a job that died, its attempts and error read from the
-- envelope it died with (a dead job is rare: the decode is paid only then).
local function dead_text(envelope, now, worker)
    local ok, env = pcall(cjson.decode, envelope)
    local attempts, err = '', ''
    if ok and type(env) == 'table' then
        local fields = env
        if env[1] ~= nil and type(env[4]) == 'table' then
            fields = env[4]  -- the array form: [name, args, t, {fields}]
        end
        attempts = tonumber(fields['attempts']) or ''
        err = type(fields['error']) == 'string' and string.sub(fields['error'], 1, 200) or ''
    end
    return record_text('dead', now, attempts, '', err, worker)
end

-- record_ended: when a record's job ended (ms).
local function record_ended(r)
    return tonumber(string.match(r, '^[^|]*|(%d+)|')) or 0
end

-- trim_records: delete the oldest records beyond max_len, then those older than
-- max_age_ms, at most `budget` of them. One look at the oldest when none is.
local function trim_records(k, lim, now, budget)
    local max_age, max_len = lim[1], lim[2]
    if budget <= 0 then
        return
    end
    -- by count: the oldest beyond max_len
    local excess = redis.call('LLEN', k.ended) - max_len
    if excess > 0 then
        local gone = redis.call('RPOP', k.ended, math.min(excess, budget))
        redis.call('HDEL', k.records, unpack(gone))
        budget = budget - #gone
    end
    -- by age: one look at the oldest; more only when it ended before the cutoff
    local cutoff = now - max_age
    local last = redis.call('LINDEX', k.ended, -1)
    if not last then
        return
    end
    local r = redis.call('HGET', k.records, last)
    if r and record_ended(r) > cutoff then
        return
    end
    while budget > 0 do
        local tail = redis.call('LRANGE', k.ended, -math.min(budget, 100), -1)
        if #tail == 0 then
            return
        end
        local recs = redis.call('HMGET', k.records, unpack(tail))
        local old = 0
        for i = #tail, 1, -1 do
            -- an id whose record is gone (a revived job) goes too
            if recs[i] and record_ended(recs[i]) > cutoff then
                break
            end
            old = old + 1
        end
        if old == 0 then
            return
        end
        redis.call('HDEL', k.records, unpack(redis.call('RPOP', k.ended, old)))
        budget = budget - old
        if old < #tail then
            return
        end
    end
end

-- keep_records: write the records of `ids` (texts[i], or the one text `same` for
-- all), then trim. Costs two calls for the batch, plus two to check the oldest.
-- The trim removes at most #ids + 100 per call, so a trim that falls behind (a
-- limit lowered) catches up over the next calls, and one call stays short.
-- k holds the key names (records, ended); lim is {max_age_ms, max_len}.
local function keep_records(k, lim, now, ids, texts, same)
    if #ids == 0 then
        return
    end
    -- off (max_len 0): nothing written, and what was kept before goes by the trim
    for lo = 1, lim[2] > 0 and #ids or 0, 2000 do
        local hi = math.min(lo + 1999, #ids)
        local fields = {}
        for i = lo, hi do
            fields[#fields + 1] = ids[i]
            fields[#fields + 1] = same or texts[i]
        end
        redis.call('HSET', k.records, unpack(fields))
        redis.call('LPUSH', k.ended, unpack(ids, lo, hi))
    end
    trim_records(k, lim, now, #ids + 100)
end
