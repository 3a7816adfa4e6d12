#!lua flags=allow-oom
--! include many
--! include args
--! include links
--! include records
--! include batches
--! include chains
-- cancel: cancel a bounded batch of jobs of one queue, given by id or by tag.
--
-- KEYS[1]  jobs       hash   id -> envelope
-- KEYS[2]  scheduled  zset   id -> due time (ms)
-- KEYS[3]  sched_prio hash   scheduled id -> priority or 'r'
-- KEYS[4]  prio       zset   ids with a priority
-- KEYS[5]  dead       zset   id -> time of death (ms)
-- KEYS[6]  broken     hash   id -> why it could not run
-- KEYS[7]  cancelled  zset   cancelled id -> when (ms): the marker
-- KEYS[8]  stalls     hash   id -> stall count
-- KEYS[9]  stats      hash   counters (cancelled)
-- KEYS[10] links      hash   id -> its tags and unique lock (lib/unique.lua)
-- KEYS[11] tagged     zset   "<tag>\n<id>" of live tagged jobs, all scored 0
-- KEYS[12] unique     hash   unique key -> the id holding its lock
-- KEYS[13] unique_exp zset   unique key -> when its lock's window ends (ms)
-- KEYS[14] leases     zset   worker id -> lease deadline: every worker holding jobs
-- KEYS[15] settings   hash   the queue's settings: records_max_age_ms, records_max_len
-- KEYS[16] records    hash   id -> the record of a job that ended (lib/records.lua)
-- KEYS[17] records_old hash  the previous generation of records (lib/records.lua)
-- KEYS[18] batched    hash   id -> its batch (lib/batches.lua)
-- KEYS[19] batches    hash   batch id -> this queue's share of it
-- KEYS[20] batches_due set   batch ids whose sealed share has ended
-- KEYS[21] chained    hash   id -> the rest of its chain: a job cancelled loses it
--                            (lib/chains.lua)
-- KEYS[22..] held     set    the held set of each worker in leases, in the order of
--                            their ids in ARGV
--
-- ARGV[1] tag        '': cancel the ids given; else take (and remove) up to `limit`
--                    entries of this tag from tagged and cancel their jobs
-- ARGV[2] limit      ids handled at most in this call (1 to 1000)
-- ARGV[3] workers    how many worker ids come first in the tail: exactly the
--                    members of leases (else the call is refused with -1 and
--                    nothing written: the caller reads leases again)
-- ARGV[4..] rest     the worker ids whose held sets are KEYS[18..], then the ids to
--                    cancel (none with a tag), at most `limit`
--
-- A job is cancelled if it has an envelope and is neither dead nor broken: it
-- leaves scheduled, sched_prio and prio (cheap removals), loses its envelope, its
-- stall count, tag entries and unique lock (a 'w' lock stays for its window), and
-- gets a marker; it is stopped: it never runs, it is counted cancelled and leaves a
-- 'cancelled' record (lib/records.lua). Ids in the ready list stay there (LREM is
-- O(N) per id): the claim pops them, finds no envelope and drops them. A job a worker holds (running, or
-- claimed and not started yet) just loses its envelope and gets the marker: the
-- worker runs it, and its ack or hand-back drops a retry, a death or a return to
-- the queue, and then counts and records it cancelled; if it completes, it counts
-- as processed. Such a job is reported apart (held), not counted here. Returns
-- {stopped, held, handled} ({-1, 0, 0}: the workers given are not those holding
-- leases); handled < limit with a tag means no entry of the tag is left.
-- allow-oom: a cancel frees memory; it must work while Redis is over maxmemory.

local tag = ARGV[1] or ''
local limit = arg_int('cancel', 2, 'limit', 1)
if limit > 1000 then
    error('cancel: limit (ARGV[2]) must be <= 1000, not ' .. ARGV[2])
end
local n_workers = arg_int('cancel', 3, 'workers', 0)
if #KEYS ~= 21 + n_workers or #ARGV < 3 + n_workers then
    error('cancel: ' .. n_workers .. ' workers need as many held sets (KEYS[22..]) and ids')
end
local first = 4 + n_workers  -- the first id to cancel in ARGV
local ids, members = {}, nil
if tag ~= '' then
    if #ARGV >= first then
        error('cancel: give a tag or ids, not both')
    end
    local prefix = tag .. '\n'
    -- '\11' is the byte after '\n': the range holds exactly this tag's entries
    members = redis.call('ZRANGEBYLEX', KEYS[11], '[' .. prefix, '(' .. tag .. '\11',
        'LIMIT', 0, limit)
    if #members == 0 then
        return {0, 0, 0}
    end
    for i = 1, #members do
        ids[i] = string.sub(members[i], #prefix + 1)
    end
else
    if #ARGV - first + 1 > limit then
        error('cancel: ' .. (#ARGV - first + 1) .. ' ids, more than limit (' .. limit .. ')')
    end
    local seen = {}
    for i = first, #ARGV do
        if not seen[ARGV[i]] then
            seen[ARGV[i]] = true
            ids[#ids + 1] = ARGV[i]
        end
    end
    if #ids == 0 then
        return {0, 0, 0}
    end
end

-- the workers named must be every worker holding leases, and only those
if redis.call('ZCARD', KEYS[14]) ~= n_workers then
    return {-1, 0, 0}
end
if n_workers > 0 then
    local known = call_many('ZMSCORE', KEYS[14], slice(ARGV, 4, 3 + n_workers))
    for i = 1, n_workers do
        if not known[i] then
            return {-1, 0, 0}
        end
    end
end
if tag ~= '' then
    call_many('ZREM', KEYS[11], members)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local envs = call_many('HMGET', KEYS[1], ids)
local died = call_many('ZMSCORE', KEYS[5], ids)
local broken = call_many('HMGET', KEYS[6], ids)
local gone, marks = {}, {}
for i = 1, #ids do
    if envs[i] and not died[i] and not broken[i] then
        gone[#gone + 1] = ids[i]
        marks[#marks + 1] = now
        marks[#marks + 1] = ids[i]
    end
end
-- held by a worker (it may still run them), or stopped
local is_held = {}
if #gone > 0 then
    for w = 1, n_workers do
        local h = call_many('SMISMEMBER', KEYS[21 + w], gone)
        for i = 1, #gone do
            if h[i] == 1 then
                is_held[i] = true
            end
        end
    end
end
local stopped, n_held = {}, 0
for i = 1, #gone do
    if is_held[i] then
        n_held = n_held + 1
    else
        stopped[#stopped + 1] = gone[i]
    end
end
if #gone > 0 then
    call_many('ZREM', KEYS[2], gone)
    call_many('HDEL', KEYS[3], gone)
    call_many('ZREM', KEYS[4], gone)
    call_many('HDEL', KEYS[1], gone)
    call_many('HDEL', KEYS[8], gone)
    call_many('ZADD', KEYS[7], marks)
    end_links({links = KEYS[10], tagged = KEYS[11], unique = KEYS[12], unique_exp = KEYS[13]}, gone)
    if #stopped > 0 then
        redis.call('HINCRBY', KEYS[9], 'cancelled', #stopped)
        keep_records({records = KEYS[16], old = KEYS[17]}, records_limits(KEYS[15]), now,
            stopped, nil, record_text('cancelled', now, '', '', '', ''))
        end_batches({batched = KEYS[18], batches = KEYS[19], batches_due = KEYS[20]}, stopped,
            BATCH_CANCELLED)
        chain_drop({chained = KEYS[21]}, stopped)
    end
end
return {#stopped, n_held, #ids}
