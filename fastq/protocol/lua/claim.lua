#!lua flags=allow-oom
--! include many
--! include args
--! include epoch
--! include gcra
--! include groups
--! include promote
--! include sentinel
--! include unique
-- claim: lease up to n jobs of one queue to one worker.
--
-- KEYS[1]  ready      list   ids; the right end is the front
-- KEYS[2]  prio       zset   ids with a priority; negative scores (priority > 0) run
--                            before ready, positive scores (priority < 0) after it
-- KEYS[3]  jobs       hash   id -> envelope
-- KEYS[4]  leases     zset   worker id -> deadline (ms) of every lease it holds
-- KEYS[5]  scheduled  zset   id -> due time (ms)
-- KEYS[6]  held       set    ids this worker holds leases on
-- KEYS[7]  stats      hash   counters
-- KEYS[8]  wake       list   wake-up token for idle workers
-- KEYS[9]  sched_prio hash   scheduled id -> priority, for those whose priority is not 0
-- KEYS[10] settings   hash   the queue's settings: paused = "1" while paused; a rate
--                            limit: rate jobs per rate_period_ms, rate_burst,
--                            rate_shards (the whole queue's limit, this shard's
--                            share a 1/rate_shards of it; absent: 1) and rate_tat_us
--                            (the GCRA state, written here); ustart = "1" once it
--                            had a unique job of mode 'start'; groups = "1" once
--                            it had a grouped job: it is then claimed round-robin
--                            across its groups (lib/groups.lua)
-- KEYS[11] broken     hash   id -> why it could not run: an id popped without an
--                            envelope, not cancelled, is recorded here ("no payload")
-- KEYS[12] cancelled  zset   id -> cancel time (ms): a popped id without an envelope
--                            found here was cancelled (and counted so) and is dropped
-- KEYS[13] links      hash   id -> its tags and unique lock (lib/unique.lua)
-- KEYS[14] unique     hash   unique key -> the id holding its lock
-- KEYS[15] unique_exp zset   unique key -> when its lock's window ends (ms)
-- KEYS[16] epoch      string the worker's epoch on this queue (lib/epoch.lua)
-- KEYS[17] group_ready zset  the ready jobs of the queue's groups (lib/groups.lua)
-- KEYS[18] group_ring list   the groups with ready jobs, in the order served
--
-- ARGV[1] worker_id
-- ARGV[2] n             jobs to claim at most
-- ARGV[3] lease_ms      lease length
-- ARGV[4] promote_max   due scheduled jobs to promote at most in this call; when
--                       that many were promoted, more may be due and the call claims
--                       nothing (see step 1)
-- ARGV[5] epoch         the worker's epoch: a claim carrying an older one than
--                       recorded (a request it gave up on, landing late) is
--                       refused with a STALE error and leases nothing
--
-- Returns {now_ms, next_due_ms or -1 (-2: the queue is paused), now_us, throttle,
-- id1, envelope1, id2, envelope2, ...};
-- now_us is the microseconds of Redis' clock within now_ms (0-999), so that a worker
-- sleeping until a due job wakes to within a fraction of a millisecond.
-- throttle: -1 the queue has no rate limit; 0 it has one, and it did not stop this
-- claim; > 0 the limit left no token: nothing was claimed, and the next token is due
-- at that time (ms, Redis' clock), also given as next_due_ms so that the worker
-- sleeps until then instead of taking the queue for empty.
-- Attempts are not counted here: the envelope records the failed ones, and a
-- separate stall count those whose worker died running them.
-- next_due_ms is the earliest scheduled due time, so an idle worker can sleep
-- exactly until then. A paused queue claims nothing, promotes nothing and
-- replies next_due_ms = -2, so the worker sleeps until a wake-up (resume pushes
-- one) instead of taking the queue for empty; jobs in hand are acked as usual.
--
-- A lease belongs to the worker, not to each job: the worker's held set says what
-- it holds, and one deadline in leases covers all of it. A live worker extends
-- that deadline; when it lapses, a reaper takes the whole held set back. Two
-- small writes per job (SADD here, SREM at the ack) instead of a deadline, an
-- owner and a membership each.
--
-- A rate limit is a GCRA (lib/gcra.lua): one job start every rate_period_ms / rate,
-- up to rate_burst at once after a quiet spell, its state one time (rate_tat_us).
-- A claim takes one token per job, so no window of length W ever sees more than
-- burst + W * rate / period claimed jobs, across every worker of every host (of a
-- sharded queue's K shards together: K * ceil(burst / K) + W * rate / period).
--
-- A queue that has had a grouped job is claimed round-robin across its groups
-- (lib/groups.lua): one job of each group with ready jobs in turn, the jobs of no
-- group being one group of their own; a queue that never had one reads the flag
-- with its settings and pays nothing more.
--
-- allow-oom: a claim only moves jobs and bookkeeps, so a queue over maxmemory can
-- still drain its way out.

local worker = arg_worker('claim', 1)
local n = arg_int('claim', 2, 'n', 1)
local lease_ms = arg_int('claim', 3, 'lease_ms', 1)
local promote_max = arg_int('claim', 4, 'promote_max', 0)
local epoch = arg_int('claim', 5, 'epoch', 0)

-- 0. A request its worker gave up on leases nothing (lib/epoch.lua).
local refused = epoch_refused(KEYS[16], epoch)
if refused then
    return refused
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- 0. Settings: one HMGET, on a key that does not exist for a queue without any.
local settings = redis.call('HMGET', KEYS[10], 'paused', 'rate', 'rate_period_ms',
    'rate_burst', 'rate_tat_us', 'ustart', 'rate_shards', 'groups', 'paused_groups')
local gk = settings[8] == '1' and {ready = KEYS[17], ring = KEYS[18], stats = KEYS[7]} or nil
local throttle = -1
local interval_us, tat_us, tokens
if settings[2] then
    throttle = 0
end
if settings[1] == '1' then
    return {now, -2, tonumber(t[2]) % 1000, throttle}
end
if throttle == 0 then
    -- the rate limit: how many jobs this claim may take (tokens), at most n. Each
    -- of a sharded queue's K shards (on other nodes, with no state in common) takes
    -- a K-th: tokens K times further apart, a K-th of the burst rounded up (a burst
    -- rounded down to 1 loses the time of every late wake-up: 4% at 100/s on 4
    -- shards, bench/rate_limit.py --shards 4).
    local shards = tonumber(settings[7]) or 1
    interval_us = tonumber(settings[3]) * 1000 * shards / tonumber(settings[2])
    local burst = math.ceil(tonumber(settings[4]) / shards)
    local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    tokens, tat_us = gcra_open(tonumber(settings[5]), now_us, interval_us, burst)
    if tokens < 1 then
        -- throttled: no write, no wake-up token (siblings would only be throttled too)
        local due = gcra_due_ms(tat_us, interval_us, burst)
        return {now, due, tonumber(t[2]) % 1000, due}
    end
    if tokens < n then
        n = tokens
    end
end

-- 1. Promote due scheduled jobs (retries in backoff to the front, delayed jobs to
-- the back or by priority). A full promotion means more may be due: then nothing is
-- popped until every due job is promoted, so that a campaign of many jobs due at
-- once comes out by priority, FIFO within one, however many calls (each bounded by
-- promote_max) its promotion takes. The reply says "due now", and a token makes
-- this worker, or an idle sibling, claim again at once.
local promoted = promote_due(KEYS[5], KEYS[3], KEYS[1], KEYS[2], KEYS[7], KEYS[9], now, promote_max,
    gk)
if promote_max > 0 and promoted >= promote_max then
    if redis.call('LLEN', KEYS[8]) == 0 then
        redis.call('RPUSH', KEYS[8], 1)
    end
    return {now, now, tonumber(t[2]) % 1000, throttle}
end

-- 2. Pop ids: high priority, then ready, then low priority; of a grouped queue,
-- round-robin across its groups, those of no group popped so when their turn comes.
local has_prio = redis.call('ZCARD', KEYS[2]) > 0
local function pop_plain(count)
    local out = {}
    local function take(list)
        for i = 1, #list do
            out[#out + 1] = list[i]
        end
    end
    if count < 1 then
        return out
    end
    if has_prio then
        local hi = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(0', 'LIMIT', 0, count)
        if #hi > 0 then
            call_many('ZREM', KEYS[2], hi)
            take(hi)
        end
    end
    if #out < count then
        local popped = redis.call('RPOP', KEYS[1], count - #out)
        if popped then
            take(popped)
        end
    end
    if has_prio and #out < count then
        local lo = redis.call('ZRANGE', KEYS[2], 0, count - #out - 1)
        if #lo > 0 then
            call_many('ZREM', KEYS[2], lo)
            take(lo)
        end
    end
    return out
end
local ids
if gk then
    ids = claim_grouped(gk, n, function()
        return redis.call('LLEN', KEYS[1]) + (has_prio and redis.call('ZCARD', KEYS[2]) or 0)
    end, pop_plain, paused_set(settings[9]))
else
    ids = pop_plain(n)
end

if throttle == 0 and #ids > 0 then
    -- the tokens taken: one per id popped
    redis.call('HSET', KEYS[10], 'rate_tat_us', gcra_state(tat_us, interval_us, #ids))
    tokens = tokens - #ids
end

local next_due = -1
if #ids < n then
    local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
    if #first > 0 then
        next_due = tonumber(first[2])
    end
end

local out = {now, next_due, tonumber(t[2]) % 1000, throttle}
if #ids == 0 then
    return out
end

-- 3. Lease what still has an envelope. An id without one was cancelled (its
-- cancel counted it: dropped) or lost its payload (written by hand, or by a
-- producer that crashed between its writes): quarantined as broken, counted, never
-- dropped in silence. Only such ids pay for the lookups.
local envs = call_many('HMGET', KEYS[3], ids)
local leased = {HELD_SENTINEL}
local no_payload = 0
for i = 1, #ids do
    local env = envs[i]
    if env then
        leased[#leased + 1] = ids[i]
        out[#out + 1] = ids[i]
        out[#out + 1] = env
    elseif not redis.call('ZSCORE', KEYS[12], ids[i]) then
        redis.call('HSET', KEYS[11], ids[i], 'no payload')
        no_payload = no_payload + 1
    end
end
if no_payload > 0 then
    redis.call('HINCRBY', KEYS[7], 'broken', no_payload)
end
if #leased > 1 then
    if settings[6] == '1' then  -- unique_until="start" locks end as their jobs start
        release_started(KEYS[13], KEYS[14], KEYS[15], ids)
    end
    call_many('SADD', KEYS[6], leased)
    -- GT: never shorten a deadline an extension pushed further
    redis.call('ZADD', KEYS[4], 'GT', now + lease_ms, worker)
else
    -- every id popped was dropped (cancelled): the queue is not empty for all that,
    -- so the reply says "due now" and the worker claims again at once
    out[2] = now
end

-- 4. More work waiting, and a rate limit that lets more start now: leave a token so
-- an idle sibling wakes up too.
if (throttle == -1 or tokens > 0)
        and (redis.call('LLEN', KEYS[1]) > 0 or (has_prio and redis.call('ZCARD', KEYS[2]) > 0)
            or (gk and redis.call('EXISTS', KEYS[17]) == 1))
        and redis.call('LLEN', KEYS[8]) == 0 then
    redis.call('RPUSH', KEYS[8], 1)
end
return out
