#!lua flags=allow-oom
--! include many
--! include args
--! include promote
--! include trim
--! include records
-- reap: the reaper's periodic sweep of one queue: promote due jobs, trim the dead
-- set, the records, the cancel markers and the unique locks whose window has
-- ended, and name the workers whose lease has expired. Their jobs are taken back by
-- a 'release' call in mode 'expired' each, which checks the deadline again, so any
-- number of reapers may run at once and each job moves once.
--
-- KEYS[1]  ready      list   the right end is the front
-- KEYS[2]  leases     zset   worker id -> deadline (ms) of every lease it holds
-- KEYS[3]  jobs       hash   id -> envelope
-- KEYS[4]  dead       zset   id -> time of death (ms)
-- KEYS[5]  stats      hash   counters
-- KEYS[6]  wake       list   wake-up token for idle workers
-- KEYS[7]  scheduled  zset   id -> due time (ms), see enqueue
-- KEYS[8]  prio       zset   ids with a priority
-- KEYS[9]  poison     hash   dead id -> why it died when no worker could say
-- KEYS[10] sched_prio hash   scheduled id -> priority, for those whose priority is not 0
-- KEYS[11] cancelled  zset   cancelled id -> when (ms); markers older than
--                            dead_max_age_ms are trimmed (a trimmed marker's id still
--                            in ready is then popped as a job without a payload)
-- KEYS[12] unique     hash   unique key -> the id holding its lock
-- KEYS[13] unique_exp zset   unique key -> when its lock's window ends (ms)
-- KEYS[14] settings   hash   the queue's settings: records_max_age_ms, records_max_len
-- KEYS[15] records    hash   id -> the record of a job that ended (lib/records.lua)
-- KEYS[16] records_old hash  the previous generation of records: the records of a
--                            queue where nothing ends any more age out here; the
--                            done records the acks logged are folded here, a few
--                            thousand a call once the acks pause, a few hundred
--                            while they go on (lib/records.lua)
-- KEYS[17] group_ready zset  the ready jobs of the queue's groups (lib/groups.lua):
--                            where a grouped job due goes
-- KEYS[18] group_ring list   the groups with ready jobs
--
-- ARGV[1] limit            expired workers and due jobs handled at most per call
-- ARGV[2] dead_max_age_ms
-- ARGV[3] dead_max_len
--
-- Returns {promoted, next_deadline_ms or -1, next_due_ms or -1, worker ids...};
-- the two times tell the reaper how long it may sleep (next_due_ms is at most
-- FOLD_PAUSE_MS away while logged records are left to fold, FOLD_QUIET_MS while
-- the acks go on: it comes back for them).
-- allow-oom: reaping moves and frees; it must go on while Redis is over maxmemory.

local limit = arg_int('reap', 1, 'limit', 1)
local dead_max_age = arg_int('reap', 2, 'dead_max_age_ms', 0)
local dead_max_len = arg_int('reap', 3, 'dead_max_len', 0)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- a queue that has had a grouped job (its settings say so) promotes into its groups
local gk = nil
if redis.call('HGET', KEYS[14], 'groups') == '1' then
    gk = {ready = KEYS[17], ring = KEYS[18], stats = KEYS[5]}
end
local promoted = promote_due(KEYS[7], KEYS[3], KEYS[1], KEYS[8], KEYS[5], KEYS[10], now, limit,
    gk)
trim_dead(KEYS[4], KEYS[3], KEYS[9], now, dead_max_age, dead_max_len)
-- while logged records are left to fold, the reaper comes back this soon (once the
-- acks paused; while they go on, when they may have)
local FOLD_PAUSE_MS = 100
local fold_left, fold_back = 0, FOLD_PAUSE_MS
if redis.call('EXISTS', KEYS[15], KEYS[16]) > 0 then
    age_records({records = KEYS[15], old = KEYS[16]}, records_limits(KEYS[14]), now, true)
    local budget = FOLD_PER_REAP
    local logged = tonumber(redis.call('HGET', KEYS[15], 'fastq:t'))
    if logged and now - logged < FOLD_QUIET_MS then
        budget, fold_back = FOLD_BUSY, FOLD_QUIET_MS
    end
    local folded
    fold_left, folded = fold_records(KEYS[15], budget)
    if folded < budget then
        fold_left = fold_left + fold_records(KEYS[16], budget - folded)
    else
        fold_left = fold_left + 1  -- the previous generation's: looked at next time
    end
end
-- at most `limit` of each per call: a sweep stays short however many there are
local old = redis.call('ZRANGEBYSCORE', KEYS[11], '-inf', now - dead_max_age, 'LIMIT', 0, limit)
if #old > 0 then
    call_many('ZREM', KEYS[11], old)
end
-- an expired lock no longer refuses anything (enqueue compares its time); this
-- frees its memory
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[13], '-inf', now, 'LIMIT', 0, limit)
if #lapsed > 0 then
    call_many('ZREM', KEYS[13], lapsed)
    call_many('HDEL', KEYS[12], lapsed)
end
if promoted > 0 and redis.call('LLEN', KEYS[6]) == 0 then
    redis.call('RPUSH', KEYS[6], 1)
end

local next_deadline, next_due = -1, -1
local first = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if #first > 0 then
    next_deadline = tonumber(first[2])
end
first = redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
if #first > 0 then
    next_due = tonumber(first[2])
end
if fold_left > 0 and (next_due < 0 or next_due > now + fold_back) then
    next_due = now + fold_back
end

local out = {promoted, next_deadline, next_due}
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
for i = 1, #expired do
    out[#out + 1] = expired[i]
end
return out
