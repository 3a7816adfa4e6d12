#!lua
--! include args
-- fire: enqueue the run of one slot of a periodic job, once across every reaper.
--
-- KEYS[1] periodic      hash   job name -> the last slot fired (Unix ms)
-- KEYS[2] periodic_run  hash   job name -> the id of its last run
-- KEYS[3] jobs          hash   id -> envelope
-- KEYS[4] ready         list   ids; the right end is the front
-- KEYS[5] prio          zset   ids with a non-zero priority; score = -priority * 2^31 + seq
-- KEYS[6] stats         hash   counters (enqueued, seq, periodic_skipped, ...)
-- KEYS[7] wake          list   at most one token; idle workers BLPOP it
-- KEYS[8] dead          zset   dead ids
-- KEYS[9] broken        hash   broken ids
--
-- ARGV[1] name       the periodic job's name (its field in KEYS[1] and KEYS[2])
-- ARGV[2] slot_ms    the slot to fire: the latest one due by the caller's clock
-- ARGV[3] overlap    1: fire whatever its last run is doing; 0: skip the slot while the
--                    last run is queued, scheduled for a retry or running
-- ARGV[4] priority   integer, 0 = plain FIFO
-- ARGV[5] job_id     the run's id
-- ARGV[6] envelope   the run's envelope
--
-- Each slot fires at most once, whoever calls and however late: the last slot fired
-- is compared and set here, in the call that enqueues, so a run that has already
-- finished (its envelope gone) is not fired again by a late reaper. Missed slots are
-- not made up one by one: the caller sends the latest due, which supersedes them.
--
-- Returns {outcome, now_ms, last_slot_ms or -1}; outcome 1 = fired, 0 = this slot (or
-- a later one) was fired already, 2 = skipped (the last run still lives; the slot
-- counts as fired), 3 = not due yet by Redis' clock (nothing written; call again).
-- No allow-oom flag: it adds a job, and over maxmemory Redis refuses it before it runs.

local name = ARGV[1]
if not name or name == '' then
    error('fire: name (ARGV[1]) must not be empty')
end
local slot = arg_int('fire', 2, 'slot_ms', 0)
local overlap = arg_int('fire', 3, 'overlap', 0)
local priority = arg_int('fire', 4, 'priority')
local job_id, envelope = ARGV[5], ARGV[6]
if overlap > 1 then
    error('fire: overlap (ARGV[3]) must be 0 or 1, not ' .. ARGV[3])
end
if math.abs(priority) > 1048576 then
    error('fire: priority (ARGV[4]) must be within +-2^20, not ' .. ARGV[4])
end
if not job_id or #job_id < 1 or #job_id > 200 or string.sub(job_id, 1, 6) == 'fastq:' then
    error('fire: job_id (ARGV[5]) must be 1 to 200 bytes, not under fastq:')
end
if not envelope or envelope == '' then
    error('fire: envelope (ARGV[6]) must not be empty')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = tonumber(redis.call('HGET', KEYS[1], name) or '-1')
-- a caller whose clock runs ahead of Redis' must not fire a slot early
if slot > now then
    return {3, now, last}
end
if slot <= last then
    return {0, now, last}
end

if overlap == 0 then
    local previous = redis.call('HGET', KEYS[2], name)
    if previous and redis.call('HEXISTS', KEYS[3], previous) == 1
            and not redis.call('ZSCORE', KEYS[8], previous)
            and redis.call('HEXISTS', KEYS[9], previous) == 0 then
        redis.call('HSET', KEYS[1], name, slot)
        redis.call('HINCRBY', KEYS[6], 'periodic_skipped', 1)
        return {2, now, last}
    end
end

redis.call('HSET', KEYS[1], name, slot)
redis.call('HSET', KEYS[2], name, job_id)
if redis.call('HSETNX', KEYS[3], job_id, envelope) == 1 then
    if priority ~= 0 then
        -- seq keeps FIFO order within one priority, as enqueue does
        local seq = redis.call('HINCRBY', KEYS[6], 'seq', 1)
        redis.call('ZADD', KEYS[5], -priority * 2147483648 + seq, job_id)
    else
        redis.call('LPUSH', KEYS[4], job_id)
    end
    redis.call('HINCRBY', KEYS[6], 'enqueued', 1)
    if redis.call('LLEN', KEYS[7]) == 0 then
        redis.call('RPUSH', KEYS[7], 1)
    end
end
return {1, now, last}
