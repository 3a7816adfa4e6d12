-- Records: what a job that ended (done, dead, cancelled) leaves behind for a while,
-- written by the script that ends it, in the same call.
--
-- records      hash  id -> 'outcome|ended_ms|attempts|run_ms|error|worker': the
--                    current generation. outcome is 'done', 'dead' or 'cancelled';
--                    a field not known is empty; error (a dead job's last one, at
--                    most 200 bytes) may hold '|', worker (after the last '|')
--                    never does. The field '' holds when the generation began (ms).
-- records_old  hash  the previous generation, as records; its field '' holds when it
--                    was retired: every record in it ended before then
--
-- Trimmed a generation at a time, never a record at a time: when the current one
-- holds more than max_len records or began max_age_ms ago, it becomes the previous
-- one and the previous one goes (UNLINK: freed off Redis' main thread). A write
-- costs one HSET for the batch and two O(1) looks; nothing is kept in order. So a
-- record lasts at least max_age_ms unless max_len newer ones push it out, and at
-- most about twice either; a queue holds at most 2 * max_len records (plus a batch).
-- The previous generation of a queue where nothing ends any more goes with the
-- reaper's sweep once it is max_age_ms old.
--
-- The queue's settings hash may hold records_max_age_ms and records_max_len
-- (absent: 7 days and 100,000; records_max_len 0: no records kept).

local RECORDS_MAX_AGE_MS = 604800000
local RECORDS_MAX_LEN = 100000

-- records_limits: {max_age_ms, max_len} of the queue; max_len 0: records are off.
local function records_limits(settings)
    local s = redis.call('HMGET', settings, 'records_max_age_ms', 'records_max_len')
    return {tonumber(s[1]) or RECORDS_MAX_AGE_MS, tonumber(s[2]) or RECORDS_MAX_LEN}
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

-- age_records: retire the current generation if it is full or old, and drop the
-- previous one if it is old (only with `sweep`: the reaper's look, two calls more).
-- k holds the key names (records, old); lim is {max_age_ms, max_len}. Returns when
-- the current generation began, nil if there is none (now) or records are off.
local function age_records(k, lim, now, sweep)
    local max_age, max_len = lim[1], lim[2]
    if max_len <= 0 then
        redis.call('UNLINK', k.records, k.old)
        return nil
    end
    local since = redis.call('HGET', k.records, '')
    if since and (now - tonumber(since) >= max_age or redis.call('HLEN', k.records) > max_len) then
        redis.call('UNLINK', k.old)
        redis.call('RENAME', k.records, k.old)
        redis.call('HSET', k.old, '', now)
        since = nil
    elseif sweep then
        local retired = redis.call('HGET', k.old, '')
        if retired and now - tonumber(retired) >= max_age then
            redis.call('UNLINK', k.old)
        end
    end
    return since
end

-- keep_records: write the records of `ids` (texts[i], or the one text `same` for
-- all), after aging the generations.
local function keep_records(k, lim, now, ids, texts, same)
    if #ids == 0 then
        return
    end
    local since = age_records(k, lim, now, false)
    if lim[2] <= 0 then
        return
    end
    for lo = 1, #ids, 2000 do
        local hi = math.min(lo + 1999, #ids)
        local fields = {}
        if lo == 1 and not since then
            fields[1], fields[2] = '', now
        end
        for i = lo, hi do
            fields[#fields + 1] = ids[i]
            fields[#fields + 1] = same or texts[i]
        end
        redis.call('HSET', k.records, unpack(fields))
    end
end
