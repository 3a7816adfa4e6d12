--! include many
-- Records: what a job that ended (done, dead, cancelled) leaves behind for a while,
-- written by the script that ends it, in the same call.
--
-- records      hash  id -> 'outcome|ended_ms|attempts|run_ms|error|worker': the
--                    current generation. outcome is 'done', 'dead' or 'cancelled';
--                    attempts counts the job's runs (a done job's includes the one
--                    that succeeded); run_ms is its last run, in whole ms; a field
--                    not known is empty; error (a dead job's last one, at most 200
--                    bytes) may hold '|', worker (after the last '|') never does.
--                    Fields that are no id (an id never starts with 'fastq:'):
--                    ''        when the generation began (ms)
--                    'fastq:n' how many records it was written (the count it is
--                              trimmed by; without it: HLEN)
--                    'fastq:bK' the K-th logged batch of done records, not folded yet
--                    'fastq:f', 'fastq:s': the first batch not folded, the next
--                              one's K (both gone when all are folded)
--                    'fastq:t' when the last batch was logged (ms)
-- records_old  hash  the previous generation, as records; its field '' holds when it
--                    was retired: every record in it ended before then
--
-- Done records are logged: an ack writes one field for its whole batch (a msgpack of
-- ended_ms, worker, runs, ids; runs as the worker sent them: per id 'run_ms' or
-- 'run_ms:attempts', '' for 0 ms on a first attempt, ':attempts' for a run time not
-- known, joined by ','; false: not known), never one per job (a hash write a job was the cost of records in a drain).
-- A logged batch is folded into one record per id off the drain's path: by the
-- reaper's sweep (FOLD_PER_REAP records a call once no batch was logged for
-- FOLD_QUIET_MS, FOLD_BUSY a call before: a drain keeps Redis to itself), and
-- first by whatever must look an id up (enqueue of an id found nowhere else, the
-- read of one job, the listings, a stale ack's check): so lookups stay exact with
-- no reaper running. Folding does not save Redis work, it moves it: an ack pays one
-- field a batch, the fold then pays the record a job and the unpacking. Dead and
-- cancelled records (rare) are written as records at once.
--
-- Trimmed a generation at a time, never a record at a time: when the current one
-- holds max_len records or began max_age_ms ago, it becomes the previous
-- one (with its logged batches) and the previous one goes (UNLINK: freed off Redis'
-- main thread). So a record lasts at least max_age_ms unless max_len newer ones
-- push it out, and at most about twice either; a queue holds at most 2 * max_len
-- records (plus a batch). The previous generation of a queue where nothing ends any
-- more goes with the reaper's sweep once it is max_age_ms old.
--
-- The queue's settings hash may hold records_max_age_ms and records_max_len
-- (absent: 7 days and 100,000; records_max_len 0: no records kept).

local RECORDS_MAX_AGE_MS = 604800000
local RECORDS_MAX_LEN = 100000
-- records a reaper's sweep folds per call at most (a whole batch at least), once
-- no batch was logged for FOLD_QUIET_MS; FOLD_BUSY before
local FOLD_PER_REAP = 4000
local FOLD_BUSY = 500
local FOLD_QUIET_MS = 500
-- batches logged and not folded in a generation at most: past it, the ack that logs
-- one folds the oldest (the same work, on the acks' path), so that a queue with no
-- reaper (HTTP workers, whose every done is a batch of one) keeps a bounded log and
-- a lookup folds a bounded number. A pool's drain of 200,000 jobs in batches of 100
-- stays under it: its reaper folds after the drain, off its path.
local LOG_MAX_BATCHES = 2000
-- fields deleted by one HDEL at most: unpack() is bounded by Lua's C stack (~8,000)
local HDEL_CHUNK = 1000

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

-- runs_of_envelopes: the runs of done jobs whose worker did not send them (an HTTP
-- worker's done, a dead child's finished jobs acked by its master), as a worker
-- sends them, from the envelopes they ended with: per job ':attempts', its runs
-- (the failed attempts the envelope counts, and this one) with its run time not
-- known. So a record counts a job's attempts by one rule, whoever acked it.
local function runs_of_envelopes(envelopes)
    local parts = {}
    for i = 1, #envelopes do
        local attempts = ''
        local ok, env = pcall(cjson.decode, envelopes[i] or '')
        if ok and type(env) == 'table' then
            local fields = env
            if env[1] ~= nil and type(env[4]) == 'table' then
                fields = env[4]  -- the array form: [name, args, t, {fields}]
            end
            attempts = (tonumber(fields['attempts']) or 0) + 1
        end
        parts[i] = ':' .. attempts
    end
    return table.concat(parts, ',')
end

-- age_records: retire the current generation if it is full or old, and drop the
-- previous one if it is old (only with `sweep`: the reaper's look, two calls more).
-- k holds the key names (records, old); lim is {max_age_ms, max_len}. Returns when
-- the current generation began (nil if there is none now, or records are off), the
-- records it was written, the K of its next logged batch and of its first not folded.
local function age_records(k, lim, now, sweep)
    local max_age, max_len = lim[1], lim[2]
    if max_len <= 0 then
        redis.call('UNLINK', k.records, k.old)
        return nil, 0, 0
    end
    local c = redis.call('HMGET', k.records, '', 'fastq:n', 'fastq:s', 'fastq:f')
    local since = c[1]
    local n = since and (tonumber(c[2]) or redis.call('HLEN', k.records) - 1)
    if since and (now - tonumber(since) >= max_age or n >= max_len) then
        redis.call('UNLINK', k.old)
        redis.call('RENAME', k.records, k.old)
        redis.call('HSET', k.old, '', now)
        return nil, 0, 0, 0
    elseif sweep then
        local retired = redis.call('HGET', k.old, '')
        if retired and now - tonumber(retired) >= max_age then
            redis.call('UNLINK', k.old)
        end
    end
    return since, n or 0, tonumber(c[3]) or 0, tonumber(c[4]) or 0
end

-- keep_records: write the records of `ids` (texts[i], or the one text `same` for
-- all), after aging the generations.
local function keep_records(k, lim, now, ids, texts, same)
    if #ids == 0 then
        return
    end
    local since, n = age_records(k, lim, now, false)
    if lim[2] <= 0 then
        return
    end
    for lo = 1, #ids, 2000 do
        local hi = math.min(lo + 1999, #ids)
        local fields = {'fastq:n', n + hi}
        if lo == 1 and not since then
            fields[3], fields[4] = '', now
        end
        for i = lo, hi do
            fields[#fields + 1] = ids[i]
            fields[#fields + 1] = same or texts[i]
        end
        call_many('HSET', k.records, fields)
    end
end

-- runs_of: the runs string of the ids at `picks` (positions from 1) of a batch whose
-- runs string is `runs` (a batch of which only some are recorded: a stale ack).
local function runs_of(runs, picks)
    if not runs or runs == '' then
        return runs
    end
    local all = {}
    for entry in string.gmatch(runs .. ',', '([^,]*),') do
        all[#all + 1] = entry
    end
    local out = {}
    for i = 1, #picks do
        out[i] = all[picks[i]] or ''
    end
    return table.concat(out, ',')
end

-- fold_batch: the records of one logged batch, written to generation `gen`.
local function fold_batch(gen, batch)
    local now, worker, runs, ids = cmsgpack.unpack(batch)
    local head, tail = 'done|' .. now .. '|', '||' .. worker
    local entries = nil
    if runs and runs ~= '' then
        entries = {}
        for entry in string.gmatch(runs .. ',', '([^,]*),') do
            entries[#entries + 1] = entry
        end
    end
    local plain = runs and head .. '1|0' .. tail or head .. '|' .. tail
    for lo = 1, #ids, 2000 do
        local fields = {}
        for i = lo, math.min(lo + 1999, #ids) do
            local text = plain
            local e = entries and entries[i]
            if e and e ~= '' then
                -- what a worker sent, checked here: anything else is not known
                -- (':attempts': its run time not known, runs_of_envelopes')
                local ms, attempts = string.match(e, '^(%d*):?(%d*)$')
                if not ms or ms .. attempts == '' then
                    text = head .. '|' .. tail
                else
                    text = head .. (attempts ~= '' and attempts or '1') .. '|' .. ms .. tail
                end
            end
            fields[#fields + 1] = ids[i]
            fields[#fields + 1] = text
        end
        call_many('HSET', gen, fields)
    end
    return #ids
end

-- fold_records: fold the logged batches of generation `gen` into records, `budget`
-- records at most (at least one batch; nil: all). Returns the batches left logged,
-- and the records folded.
local function fold_records(gen, budget)
    local c = redis.call('HMGET', gen, 'fastq:f', 'fastq:s')
    local f, s = tonumber(c[1]) or 0, tonumber(c[2]) or 0
    if f >= s then
        return 0, 0
    end
    local folded, gone = 0, {}
    while f < s and (budget == nil or folded < budget) do
        local field = 'fastq:b' .. f
        local batch = redis.call('HGET', gen, field)
        if batch then
            folded = folded + fold_batch(gen, batch)
            gone[#gone + 1] = field
            if #gone == HDEL_CHUNK then
                call_many('HDEL', gen, gone)
                gone = {}
            end
        end
        f = f + 1
    end
    if f >= s then
        gone[#gone + 1] = 'fastq:f'
        gone[#gone + 1] = 'fastq:s'
        call_many('HDEL', gen, gone)
    else
        if #gone > 0 then
            call_many('HDEL', gen, gone)
        end
        redis.call('HSET', gen, 'fastq:f', f)
    end
    return s - f, folded
end

-- log_done: the records of the done jobs `ids`, run by `worker`, as one logged
-- batch (one field); `runs` (or nil: not known) as the header says.
local function log_done(k, lim, now, ids, runs, worker)
    if #ids == 0 then
        return
    end
    local since, n, s, f = age_records(k, lim, now, false)
    if lim[2] <= 0 then
        return
    end
    local batch = cmsgpack.pack(now, worker, runs or false, ids)
    if since then
        redis.call('HSET', k.records, 'fastq:b' .. s, batch, 'fastq:s', s + 1, 'fastq:n', n + #ids,
            'fastq:t', now)
        if s + 1 - f > LOG_MAX_BATCHES then
            fold_records(k.records, 1)  -- the oldest batch: the log stays as long
        end
    else
        redis.call('HSET', k.records, '', now, 'fastq:b0', batch, 'fastq:s', 1, 'fastq:n', #ids,
            'fastq:t', now)
    end
end

-- look_records: the records of `ids` in generation `gen` (HMGET's reply), its
-- logged batches folded first if one of them has none.
local function look_records(gen, ids)
    local recs = call_many('HMGET', gen, ids)
    for i = 1, #ids do
        if not recs[i] then
            local _, folded = fold_records(gen, nil)
            if folded > 0 then
                return call_many('HMGET', gen, ids)
            end
            return recs
        end
    end
    return recs
end

-- ended_ids: marks (true) in `marks` (a table, or nil: a new one) the positions of
-- the `ids` that have a record in either generation of k; nil if none has and
-- `marks` was nil. (The caller looks first whether either generation exists.)
local function ended_ids(k, ids, marks)
    for _, gen in ipairs({k.records, k.old}) do
        local recs = look_records(gen, ids)
        for j = 1, #ids do
            if recs[j] then
                marks = marks or {}
                marks[j] = true
            end
        end
    end
    return marks
end
