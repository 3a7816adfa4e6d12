#!lua flags=allow-oom
--! include many
--! include args
--! include epoch
--! include trim
--! include links
--! include records
--! include history
--! include batches
--! include chains
-- ack: settle the outcomes of a batch one worker ran.
--
-- KEYS[1] jobs       hash   id -> envelope
-- KEYS[2] stalls     hash   id -> times its worker died running it
-- KEYS[3] held       set    ids this worker holds leases on
-- KEYS[4] scheduled  zset   id -> due time (ms)
-- KEYS[5] dead       zset   id -> time of death (ms)
-- KEYS[6] broken     hash   id -> why it could not run (the raw payload stays in jobs)
-- KEYS[7] stats      hash   counters
-- KEYS[8] poison     hash   dead id -> why it died when no worker could say
-- KEYS[9] sched_prio hash   scheduled id -> where it goes when due; 'r' for a retry
--                           (back to the front), so promotion never reads scores
-- KEYS[10] cancelled  zset   cancelled id -> when (ms)
-- KEYS[11] links      hash   id -> its tags and unique lock (lib/unique.lua)
-- KEYS[12] tagged     zset   "<tag>\n<id>" of live tagged jobs
-- KEYS[13] unique     hash   unique key -> the id holding its lock
-- KEYS[14] unique_exp zset   unique key -> when its lock's window ends (ms)
-- KEYS[15] settings   hash   the queue's settings: records_max_age_ms, records_max_len
-- KEYS[16] records    hash   id -> the record of a job that ended (lib/records.lua)
-- KEYS[17] records_old hash  the previous generation of records (lib/records.lua)
-- KEYS[18] stale      zset   "<worker>\n<id>" of stale outcomes counted -> when (ms)
-- KEYS[19] epoch      string the worker's epoch on this queue (lib/epoch.lua)
-- KEYS[20] history    hash   jobs done and failed by 10-second slot (lib/history.lua)
-- KEYS[21] batched    hash   id -> its batch (lib/batches.lua)
-- KEYS[22] batches    hash   batch id -> this queue's share of it
-- KEYS[23] batches_due set   batch ids whose sealed share has ended
-- KEYS[24] chained    hash   id -> the rest of its chain (lib/chains.lua)
-- KEYS[25] chain_out  hash   id of a link done -> the rest of its chain, to forward
--
-- ARGV[1] dead_max_age_ms   dead jobs older than this are deleted
-- ARGV[2] dead_max_len      the dead set keeps at most this many
-- ARGV[3] n_failed          attempts in this batch that raised or failed (none
--                           counted when every record of the ack is stale)
-- ARGV[4] worker_id         the worker that ran them, for their records ('' unknown)
-- ARGV[5] epoch             the worker's epoch: an ack carrying an older one than
--                           recorded (a request it gave up on, landing late) is
--                           refused with a STALE error and settles nothing
-- ARGV[6] batches          the batches of the first done ids (lib/batches.lua,
--                           done_groups): '' none known, or 'n1 b1 n2 b2 ...', the
--                           first n1 of batch b1 (their envelopes' "b"), the next n2
--                           of b2...; these count for their batch with no lookup.
--                           The done ids after them (a worker that could not tell)
--                           are looked up in batched
-- ARGV[7..] sections        four sections, each a count followed by its records:
--   done    id                      -> deleted
--   retry   id, delay_ms, envelope  -> scheduled at now + delay (a whole ms: slot 0),
--                                      envelope updated, marked 'r' in sched_prio
--   dead    id, envelope            -> dead set, envelope updated with the error
--   broken  id, reason              -> broken set with the reason
-- and after the sections, optionally, runs: the done jobs' runs, for their records:
--   per done id, in order, 'run_ms' or 'run_ms:attempts' (whole ms; attempts only
--   when not the first), '' for 0 ms on a first attempt, joined by ',' ('' for a
--   batch of those only); absent: not known (their records count the attempts
--   their envelopes say, and no run time)
--
-- An outcome counts only while the job is in this worker's held set: a late ack
-- from a worker whose lease was taken back must not touch the job again.
-- Those are counted as stale_acks, once per job and worker: an ack sent again
-- (its reply was lost) counts none again (the stale zset remembers them for an
-- hour), nor does one whose job this worker already ended (its record names it).
-- Returns the number of outcomes applied; or, when the jobs it ended were the last
-- of a sealed batch's share here, or links of chains that go on,
-- {applied, batch id, ..., '', link id, ...}: those batches' shares ended
-- (lib/batches.lua), for the worker to tell each batch at once, and (after an empty
-- string, when there are any) the links done whose chain's rest it moved to
-- chain_out (lib/chains.lua), for the worker to forward at once.
-- A job cancelled while a worker held it (its envelope deleted, a marker in
-- cancelled) is not brought back by a retry, nor recorded dead or broken: those
-- records are dropped, and it is recorded and counted cancelled then. One that
-- completed after all is not cancelled: its marker goes (cancel counted only the
-- jobs it stopped, never those held), and it counts as processed.
-- A job that ends done or dead leaves a record (lib/records.lua): done ones with
-- the worker, their attempts and run time (logged: one field for the batch), dead
-- ones with the worker, their attempts and error (from the envelope).
-- A job that ends (done, dead, broken) loses its tag entries and unique lock.
-- allow-oom: an ack mostly frees memory; it must go on while Redis is over maxmemory.

local dead_max_age = arg_int('ack', 1, 'dead_max_age_ms', 0)
local dead_max_len = arg_int('ack', 2, 'dead_max_len', 0)
local failed = arg_int('ack', 3, 'n_failed', 0)
local worker = ARGV[4] or ''
local epoch = arg_int('ack', 5, 'epoch', 0)
-- where the sections start
local SECTIONS_AT = 7

-- the four sections, read through before the first write
local at = SECTIONS_AT
for s, width in ipairs({1, 3, 2, 2}) do
    local count = arg_int('ack', at, 'the count of section ' .. s, 0)
    if at + count * width > #ARGV then
        error('ack: section ' .. s .. ' holds ' .. count .. ' records, more than ARGV has')
    end
    if s == 2 then
        for k = 0, count - 1 do
            arg_int('ack', at + 1 + k * 3 + 1, 'delay_ms')
        end
    end
    at = at + 1 + count * width
end
local groups = done_groups('ack', 6, tonumber(ARGV[SECTIONS_AT]))
local runs = nil
if at == #ARGV then
    runs = ARGV[at]
elseif at ~= #ARGV + 1 then
    error('ack: the sections hold ' .. (at - 1) .. ' arguments, not ' .. #ARGV)
end

-- A request its worker gave up on settles nothing (lib/epoch.lua).
local refused = epoch_refused(KEYS[19], epoch)
if refused then
    return refused
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local applied, stale = 0, 0
local stale_ids = {}
local pos = SECTIONS_AT

-- Reads one section of `width` fields per record; returns the records this
-- worker holds, and drops them from its held set.
local function section(width)
    local count = tonumber(ARGV[pos])
    pos = pos + 1
    if count == 0 then
        return {}
    end
    local ids = {}
    for k = 0, count - 1 do
        ids[#ids + 1] = ARGV[pos + k * width]
    end
    local held = call_many('SMISMEMBER', KEYS[3], ids)
    local mine, starts = {}, {}
    for k = 1, count do
        if held[k] == 1 then
            mine[#mine + 1] = ids[k]
            starts[#starts + 1] = pos + (k - 1) * width
        end
    end
    pos = pos + count * width
    if #mine < count then
        for k = 1, count do
            if held[k] ~= 1 then
                stale_ids[#stale_ids + 1] = ids[k]
            end
        end
    end
    if #mine > 0 then
        call_many('SREM', KEYS[3], mine)
        applied = applied + #mine
    end
    return mine, starts
end

-- a job that once stalled has a stall count to forget when it leaves for good
local has_stalls = redis.call('EXISTS', KEYS[2]) == 1
local lk = {links = KEYS[11], tagged = KEYS[12], unique = KEYS[13], unique_exp = KEYS[14]}
local bk = {batched = KEYS[21], batches = KEYS[22], batches_due = KEYS[23]}
local ck = {chained = KEYS[24], chain_out = KEYS[25]}
local chains_moved = {}
local batches_ended = {}
local function count_ends(ids, slot, failed)
    local ended = end_batches(bk, ids, slot, failed)
    for i = 1, #ended do
        batches_ended[#batches_ended + 1] = ended[i]
    end
end

-- One EXISTS per ack that has records, a ZMSCORE only on a queue with cancelled jobs.
local has_cancelled = nil
local function cancel_marks(ids)
    if has_cancelled == nil then
        has_cancelled = redis.call('EXISTS', KEYS[10]) == 1
    end
    return has_cancelled and call_many('ZMSCORE', KEYS[10], ids)
end

-- The records of jobs not cancelled while they ran; the others are cancelled now.
local cancelled_now = {}
local function not_cancelled(ids, starts)
    if #ids == 0 then
        return ids, starts
    end
    local marks = cancel_marks(ids)
    if not marks then
        return ids, starts
    end
    local keep, kstarts, dropped = {}, {}, {}
    for i = 1, #ids do
        if marks[i] then
            dropped[#dropped + 1] = ids[i]
        else
            keep[#keep + 1] = ids[i]
            kstarts[#kstarts + 1] = starts[i]
        end
    end
    if #dropped > 0 and has_stalls then
        call_many('HDEL', KEYS[2], dropped)
    end
    for i = 1, #dropped do
        cancelled_now[#cancelled_now + 1] = dropped[i]
    end
    return keep, kstarts
end

local n_sent = tonumber(ARGV[SECTIONS_AT])
local done, done_at = section(1)
-- a worker that did not send its runs: their attempts are read from the envelopes
local done_envelopes = nil
if #done > 0 then
    if not runs then
        done_envelopes = call_many('HMGET', KEYS[1], done)
    end
    call_many('HDEL', KEYS[1], done)
    if has_stalls then
        call_many('HDEL', KEYS[2], done)
    end
    redis.call('HINCRBY', KEYS[7], 'processed', #done)
    end_links(lk, done)
    if #groups > 0 then  -- their batches told: counted by group, no lookup
        local rest, ended = end_grouped(bk, groups, done, n_sent, done_at, SECTIONS_AT)
        for i = 1, #ended do
            batches_ended[#batches_ended + 1] = ended[i]
        end
        count_ends(rest, BATCH_DONE)
    else
        count_ends(done, BATCH_DONE)
    end
    chains_moved = chain_done(ck, done, string.format('%d', now))
    local marks = cancel_marks(done)
    if marks then
        local ran = {}
        for i = 1, #done do
            if marks[i] then
                ran[#ran + 1] = done[i]
            end
        end
        if #ran > 0 then
            call_many('ZREM', KEYS[10], ran)
        end
    end
end

local retry, rstart = not_cancelled(section(3))
for k = 1, #retry do
    local p = rstart[k]
    redis.call('HSET', KEYS[1], retry[k], ARGV[p + 2])
    redis.call('ZADD', KEYS[4], now + tonumber(ARGV[p + 1]), retry[k])
end
if #retry > 0 then
    local marks = {}
    for k = 1, #retry do
        marks[#marks + 1] = retry[k]
        marks[#marks + 1] = 'r'
    end
    call_many('HSET', KEYS[9], marks)
    redis.call('HINCRBY', KEYS[7], 'retried', #retry)
    fail_batches(bk, first_failures(retry, rstart, 2))
end

local dead, dstart = not_cancelled(section(2))
for k = 1, #dead do
    redis.call('HSET', KEYS[1], dead[k], ARGV[dstart[k] + 1])
    redis.call('ZADD', KEYS[5], now, dead[k])
end
if #dead > 0 then
    if has_stalls then
        call_many('HDEL', KEYS[2], dead)
    end
    redis.call('HINCRBY', KEYS[7], 'dead', #dead)
    end_links(lk, dead)
    chain_drop(ck, dead)
    local ended = end_dead_batches(bk, dead, dstart, 1)
    for i = 1, #ended do
        batches_ended[#batches_ended + 1] = ended[i]
    end
end

local broken, bstart = not_cancelled(section(2))
for k = 1, #broken do
    redis.call('HSET', KEYS[6], broken[k], ARGV[bstart[k] + 1])
end
if #broken > 0 then
    if has_stalls then
        call_many('HDEL', KEYS[2], broken)
    end
    redis.call('HINCRBY', KEYS[7], 'broken', #broken)
    end_links(lk, broken)
    chain_drop(ck, broken)
    count_ends(broken, BATCH_DEAD, true)
end

-- an ack whose every record this worker no longer held (sent again, its reply lost):
-- the ack that settled them counted its failures (an at-most-once job's failure
-- comes with no record here: its ack_taken settles it)
if applied == 0 and #stale_ids > 0 then
    failed = 0
end
if failed > 0 then
    redis.call('HINCRBY', KEYS[7], 'failed', failed)
end
count_history(KEYS[20], now, #done, failed)
if #cancelled_now > 0 then
    redis.call('HINCRBY', KEYS[7], 'cancelled', #cancelled_now)
    count_ends(cancelled_now, BATCH_CANCELLED)
    chain_drop(ck, cancelled_now)
end

-- Records: done, dead, cancelled (lib/records.lua).
if #done + #dead + #cancelled_now > 0 then
    local lim = records_limits(KEYS[15])
    local rk = {records = KEYS[16], old = KEYS[17]}
    if #done < n_sent and runs then  -- some were stale: the runs of the others
        local picks = {}
        for k = 1, #done do
            picks[k] = done_at[k] - SECTIONS_AT
        end
        runs = runs_of(runs, picks)
    end
    if done_envelopes then
        runs = runs_of_envelopes(done_envelopes)
    end
    log_done(rk, lim, now, done, runs, worker)
    if #dead > 0 then
        local texts = {}
        for k = 1, #dead do
            texts[k] = dead_text(ARGV[dstart[k] + 1], now, worker)
        end
        keep_records(rk, lim, now, dead, texts)
    end
    keep_records(rk, lim, now, cancelled_now, nil,
        record_text('cancelled', now, '', '', '', worker))
end

-- Stale outcomes: counted once per job and worker. Only a stale ack pays for this.
if #stale_ids > 0 then
    local recs = look_records(KEYS[16], stale_ids)
    local members = {}
    for i = 1, #stale_ids do
        local r = recs[i]
        -- a record that names this worker: its ack went through, this is it again
        if not (r and worker ~= '' and string.sub(r, -#worker - 1) == '|' .. worker) then
            members[#members + 1] = now
            members[#members + 1] = worker .. '\n' .. stale_ids[i]
        end
    end
    if #members > 0 then
        stale = call_many('ZADD', KEYS[18], members, 'NX')
        if stale > 0 then
            redis.call('HINCRBY', KEYS[7], 'stale_acks', stale)
        end
        redis.call('ZREMRANGEBYSCORE', KEYS[18], '-inf', now - 3600000)
        redis.call('ZREMRANGEBYRANK', KEYS[18], 0, -100001)
    end
end

if #dead > 0 then
    trim_dead(KEYS[5], KEYS[1], KEYS[8], now, dead_max_age, dead_max_len)
end
if #batches_ended + #chains_moved > 0 then
    local out = {applied}
    for i = 1, #batches_ended do
        out[#out + 1] = batches_ended[i]
    end
    if #chains_moved > 0 then
        out[#out + 1] = ''
        for i = 1, #chains_moved do
            out[#out + 1] = chains_moved[i]
        end
    end
    return out
end
return applied
