#!lua flags=allow-oom
--! include many
--! include args
--! include front
--! include requeue
--! include sentinel
--! include records
--! include batches
--! include chains
--! include epoch
-- release: hand a worker's leased jobs back to the front of the queue.
--
-- KEYS[1] ready      list   the right end is the front
-- KEYS[2] leases     zset   worker id -> deadline (ms) of every lease it holds
-- KEYS[3] held       set    ids this worker holds leases on
-- KEYS[4] stats      hash   counters
-- KEYS[5] wake       list   wake-up token for idle workers
-- KEYS[6] jobs       hash   id -> envelope
-- KEYS[7] dead       zset   id -> time of death (ms)
-- KEYS[8] stalls     hash   id -> times its worker died running it
-- KEYS[9] poison     hash   dead id -> why it died (stalled too often); the
--                           envelope is never rewritten here
-- KEYS[10] cancelled  zset   cancelled id -> when (ms)
-- KEYS[11] links      hash   id -> its tags and unique lock (lib/unique.lua)
-- KEYS[12] tagged     zset   "<tag>\n<id>" of live tagged jobs
-- KEYS[13] unique     hash   unique key -> the id holding its lock
-- KEYS[14] unique_exp zset   unique key -> when its lock's window ends (ms)
-- KEYS[15] settings   hash   the queue's settings: records_max_age_ms, records_max_len
-- KEYS[16] records    hash   id -> the record of a job that ended (lib/records.lua)
-- KEYS[17] records_old hash  the previous generation of records (lib/records.lua)
-- KEYS[18] batched    hash   id -> its batch (lib/batches.lua)
-- KEYS[19] batches    hash   batch id -> this queue's share of it
-- KEYS[20] batches_due set   batch ids whose sealed share has ended
-- KEYS[21] chained    hash   id -> the rest of its chain: a job buried or dropped
--                            loses it, its chain stops (lib/chains.lua)
-- KEYS[22] epoch      string the worker's epoch on this queue (lib/epoch.lua)
-- KEYS[23] group_ready zset  the ready jobs of the queue's groups (lib/groups.lua):
--                            a grouped job goes back to the front of its group
-- KEYS[24] group_ring list   the groups with ready jobs
--
-- ARGV[1] worker_id
-- ARGV[2] mode        'unstarted': claimed but never run (a stopping worker's
--                       prefetch, leases behind a lost reply); nothing counted
--                     'orphaned': held by a worker that died, not the job it was
--                       running; may have run, counted in stats as orphaned
--                     'stalled': the job its worker died or hung running; a stall
--                       is counted against it, and past max_stalls it goes dead
--                     'expired': a reaper's call, counted as 'stalled'; only if
--                       the worker's lease deadline has passed (nobody extended
--                       it meanwhile), so that any number of reapers may race
--                     'interrupted': the job in hand when an operator hard-stopped
--                       its worker; to the very front, no stall counted (it is
--                       not the job's fault), counted in stats as interrupted
-- ARGV[3] max_stalls  stalls a job may count before it goes dead
-- ARGV[4] cause       how its worker died, when the pool's master knows ('was
--                     killed by SIGSEGV'; '' if not known): a poison job's reason
--                     says it
-- ARGV[5] epoch       the worker's epoch, on its own call: one carrying an older
--                     one than recorded (a request it gave up on, landing late,
--                     which could hand back jobs it claimed again since) is
--                     refused with a STALE error and moves nothing; '' on a call
--                     for a worker by another (its master, a reaper): no check
-- ARGV[6..] ids       the ids to release, the first at the very front; none =
--                     every id the worker holds, in no particular order, after
--                     which the worker holds nothing and its lease is dropped
--
-- Only ids this worker still holds move. A job cancelled while held (no envelope,
-- a marker in cancelled) is dropped here rather than handed back: it leaves the
-- worker's hold (counted in moved) and goes nowhere, and no stall counts against
-- it; it is counted cancelled then, and leaves a 'cancelled' record. A poison job
-- buried here leaves a 'dead' record with the reason (lib/records.lua).
-- Returns {moved, buried_id1, reason1, ...}: the poison jobs this call sent to
-- the dead set, each with why.
-- allow-oom: handing jobs back frees a worker's hold; it must work over maxmemory.

local worker = arg_worker('release', 1)
local mode = ARGV[2]
local MODES = {unstarted = true, orphaned = true, stalled = true, expired = true, interrupted = true}
if not MODES[mode] then
    error('release: unknown mode ' .. tostring(mode))
end
local max_stalls = arg_int('release', 3, 'max_stalls', 0)
local cause = ARGV[4] or ''
local IDS_AT = 6
if (ARGV[5] or '') ~= '' then
    local refused = epoch_refused(KEYS[22], arg_int('release', 5, 'epoch', 0))
    if refused then
        return refused
    end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if mode == 'expired' then
    local deadline = redis.call('ZSCORE', KEYS[2], worker)
    if not deadline or tonumber(deadline) > now or #ARGV >= IDS_AT then
        return {0}
    end
end

local mine = {}
if #ARGV >= IDS_AT then
    local ids = {}
    for i = IDS_AT, #ARGV do
        ids[#ids + 1] = ARGV[i]
    end
    local held = call_many('SMISMEMBER', KEYS[3], ids)
    for k = 1, #ids do
        if held[k] == 1 then
            mine[#mine + 1] = ids[k]
        end
    end
    if #mine > 0 then
        call_many('SREM', KEYS[3], mine)
    end
else
    -- bounded by what one worker can prefetch
    local ids = redis.call('SMEMBERS', KEYS[3])
    for k = 1, #ids do
        if ids[k] ~= HELD_SENTINEL then
            mine[#mine + 1] = ids[k]
        end
    end
    redis.call('DEL', KEYS[3])
    redis.call('ZREM', KEYS[2], worker)
end
if #mine == 0 then
    return {0}
end

local out = {#mine}
local rk = {records = KEYS[16], old = KEYS[17]}
if redis.call('EXISTS', KEYS[10]) == 1 then
    local marks = call_many('ZMSCORE', KEYS[10], mine)
    local keep, dropped = {}, {}
    for i = 1, #mine do
        if marks[i] then
            dropped[#dropped + 1] = mine[i]
        else
            keep[#keep + 1] = mine[i]
        end
    end
    if #dropped > 0 then
        call_many('HDEL', KEYS[8], dropped)
        redis.call('HINCRBY', KEYS[4], 'cancelled', #dropped)
        keep_records(rk, records_limits(KEYS[15]), now, dropped, nil,
            record_text('cancelled', now, '', '', '', worker))
        end_batches({batched = KEYS[18], batches = KEYS[19], batches_due = KEYS[20]}, dropped,
            BATCH_CANCELLED)
        chain_drop({chained = KEYS[21]}, dropped)
        mine = keep
        if #mine == 0 then
            return out
        end
    end
end
-- a queue that has had a grouped job (its settings say so) reads the envelopes
-- handed back, to put each grouped one back at the front of its group
local gk = nil
if redis.call('HGET', KEYS[15], 'groups') == '1' then
    gk = {ready = KEYS[23], ring = KEYS[24], stats = KEYS[4]}
end
if mode == 'stalled' or mode == 'expired' then
    local k = {gk = gk, ready = KEYS[1], jobs = KEYS[6], dead = KEYS[7], stats = KEYS[4], stalls = KEYS[8],
        poison = KEYS[9], links = KEYS[11], tagged = KEYS[12], unique = KEYS[13],
        unique_exp = KEYS[14], batched = KEYS[18], batches = KEYS[19], batches_due = KEYS[20],
        chained = KEYS[21]}
    requeue_stalled(mine, now, max_stalls, k, out, cause)
    if #out > 1 then
        local ids, texts = {}, {}
        for i = 2, #out, 2 do
            ids[#ids + 1] = out[i]
            texts[#texts + 1] = record_text('dead', now, '', '', out[i + 1], worker)
        end
        keep_records(rk, records_limits(KEYS[15]), now, ids, texts)
    end
else
    local plain = gk and group_front(gk, KEYS[6], mine) or mine
    if #plain > 0 then
        push_front(KEYS[1], plain)
    end
    if mode == 'orphaned' or mode == 'interrupted' then
        redis.call('HINCRBY', KEYS[4], mode, #mine)
    end
end
if redis.call('LLEN', KEYS[5]) == 0 then
    redis.call('RPUSH', KEYS[5], 1)
end
return out
