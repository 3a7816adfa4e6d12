#!lua flags=allow-oom
--! include many
--! include args
--! include front
--! include trim
--! include records
--! include history
--! include batches
--! include chains
-- ack_taken: settle the at-most-once jobs a worker took (take.lua) before it ran them.
--
-- KEYS[1] jobs    hash   id -> envelope
-- KEYS[2] dead    zset   id -> time of death (ms)
-- KEYS[3] broken  hash   id -> why it could not run
-- KEYS[4] stats   hash   counters
-- KEYS[5] poison  hash   dead id -> why it died when no worker could say
-- KEYS[6] ready   list   the right end is the front
-- KEYS[7] wake    list   wake-up token for idle workers
-- KEYS[8] taken_seq string the highest seq (below) of this worker's counted here; an hour
-- KEYS[9] settings hash  the queue's settings: records_max_age_ms, records_max_len
-- KEYS[10] records  hash  id -> the record of a job that ended (lib/records.lua)
-- KEYS[11] records_old hash the previous generation of records (lib/records.lua)
-- KEYS[12] history  hash  jobs done and failed by 10-second slot (lib/history.lua)
-- KEYS[13] batched  hash  id -> its batch (lib/batches.lua)
-- KEYS[14] batches  hash  batch id -> this queue's share of it
-- KEYS[15] batches_due set batch ids whose sealed share has ended
-- KEYS[16] chained  hash  id -> the rest of its chain (lib/chains.lua)
-- KEYS[17] chain_out hash id of a link done -> the rest of its chain, to forward
--
-- ARGV[1] dead_max_age_ms   dead jobs older than this are deleted
-- ARGV[2] dead_max_len      the dead set keeps at most this many
-- ARGV[3..] sections        five sections, each a count followed by its records:
--   done    seq, n                -> n taken jobs that succeeded, counted processed
--                                    unless this worker's seq was counted already
--                                    (a resent request): seqs only grow
--   dead    id, envelope          -> dead set, the envelope (with its error) back in
--                                    jobs for inspection; never run again on its own
--   broken  id, reason, envelope  -> broken set with the reason, the envelope back
--   back    id, envelope          -> taken but never started (a stop came first):
--                                    to the very front, unless the id has an
--                                    envelope again (enqueued anew meanwhile)
--   done    id                    -> a 'done' record (lib/records.lua), as the
--                                    dead ones get a 'dead' one
-- and after the sections, optionally, runs: the runs of the ids of the last section,
--   as ack's (lib/records.lua); absent: not known
--
-- Nothing here checks a hold: a taken job is held by no one. A worker sends the
-- back section once only, never again after a lost reply (that could run a job
-- twice); the others may be sent again (with what came since), and count once:
-- done by its seq, dead and broken as they are new in their set.
-- A link of a chain done has the rest of its chain moved to chain_out (a reaper
-- forwards it); one dead or broken has it deleted (lib/chains.lua).
-- Returns the number of jobs handed back.
-- allow-oom: it mostly records what ended; it must go on while Redis is over maxmemory.

local dead_max_age = arg_int('ack_taken', 1, 'dead_max_age_ms', 0)
local dead_max_len = arg_int('ack_taken', 2, 'dead_max_len', 0)

local at = 3
for s, width in ipairs({2, 2, 3, 2, 1}) do
    local count = arg_int('ack_taken', at, 'the count of section ' .. s, 0)
    if at + count * width > #ARGV then
        error('ack_taken: section ' .. s .. ' holds ' .. count .. ' records, more than ARGV has')
    end
    if s == 1 then
        for k = 0, count - 1 do
            arg_int('ack_taken', at + 1 + k * 2, 'seq', 1)
            arg_int('ack_taken', at + 2 + k * 2, 'n', 0)
        end
    end
    at = at + 1 + count * width
end
local runs = nil
if at == #ARGV then
    runs = ARGV[at]
elseif at ~= #ARGV + 1 then
    error('ack_taken: the sections hold ' .. (at - 1) .. ' arguments, not ' .. #ARGV)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local pos = 3
local n_parts = tonumber(ARGV[pos])
if n_parts > 0 then
    local last = tonumber(redis.call('GET', KEYS[8]) or '0')
    local top, n_done = last, 0
    for k = 0, n_parts - 1 do
        local seq = tonumber(ARGV[pos + 1 + k * 2])
        if seq > last then
            n_done = n_done + tonumber(ARGV[pos + 2 + k * 2])
            top = math.max(top, seq)
        end
    end
    if n_done > 0 then
        redis.call('HINCRBY', KEYS[4], 'processed', n_done)
        count_history(KEYS[12], now, n_done, 0)
    end
    if top > last then
        redis.call('SET', KEYS[8], string.format('%d', top), 'PX', 3600000)
    end
end
pos = pos + 1 + n_parts * 2

local n_dead = tonumber(ARGV[pos])
local dead_at = pos + 1
local new_dead = 0
for k = 0, n_dead - 1 do
    local p = pos + 1 + k * 2
    redis.call('HSET', KEYS[1], ARGV[p], ARGV[p + 1])
    new_dead = new_dead + redis.call('ZADD', KEYS[2], now, ARGV[p])
end
if new_dead > 0 then
    redis.call('HINCRBY', KEYS[4], 'dead', new_dead)
end
pos = pos + 1 + n_dead * 2

local n_broken = tonumber(ARGV[pos])
local new_broken = 0
local broken_ids = {}
for k = 0, n_broken - 1 do
    local p = pos + 1 + k * 3
    broken_ids[#broken_ids + 1] = ARGV[p]
    redis.call('HSET', KEYS[1], ARGV[p], ARGV[p + 2])
    new_broken = new_broken + redis.call('HSET', KEYS[3], ARGV[p], ARGV[p + 1])
end
if new_broken > 0 then
    redis.call('HINCRBY', KEYS[4], 'broken', new_broken)
end
pos = pos + 1 + n_broken * 3

local n_back = tonumber(ARGV[pos])
local back = {}
for k = 0, n_back - 1 do
    local p = pos + 1 + k * 2
    if redis.call('HSETNX', KEYS[1], ARGV[p], ARGV[p + 1]) == 1 then
        back[#back + 1] = ARGV[p]
    end
end
if #back > 0 then
    push_front(KEYS[6], back)
    if redis.call('LLEN', KEYS[7]) == 0 then
        redis.call('RPUSH', KEYS[7], 1)
    end
end
pos = pos + 1 + n_back * 2

-- Batches: each id counts once (its end deletes its batch entry), however often sent.
local n_ended = tonumber(ARGV[pos])
local ended = slice(ARGV, pos + 1, pos + n_ended)
local bk = {batched = KEYS[13], batches = KEYS[14], batches_due = KEYS[15]}
end_batches(bk, ended, BATCH_DONE)
if n_dead > 0 then
    local ids, starts = {}, {}
    for k = 0, n_dead - 1 do
        ids[#ids + 1] = ARGV[dead_at + k * 2]
        starts[#starts + 1] = dead_at + k * 2
    end
    end_dead_batches(bk, ids, starts, 1)
end
end_batches(bk, broken_ids, BATCH_DEAD, true)
local ck = {chained = KEYS[16], chain_out = KEYS[17]}
chain_done(ck, ended, '0')
if n_dead > 0 then
    local ids = {}
    for k = 0, n_dead - 1 do
        ids[#ids + 1] = ARGV[dead_at + k * 2]
    end
    chain_drop(ck, ids)
end
chain_drop(ck, broken_ids)

-- Records: done and dead.
if n_dead + n_ended > 0 then
    local lim = records_limits(KEYS[9])
    local rk = {records = KEYS[10], old = KEYS[11]}
    local ids, texts = {}, {}
    for k = 0, n_dead - 1 do
        ids[#ids + 1] = ARGV[dead_at + k * 2]
        texts[#texts + 1] = dead_text(ARGV[dead_at + 1 + k * 2], now, '')
    end
    keep_records(rk, lim, now, ids, texts)
    log_done(rk, lim, now, ended, runs, '')
end

if n_dead > 0 then
    trim_dead(KEYS[2], KEYS[1], KEYS[5], now, dead_max_age, dead_max_len)
end
return #back
