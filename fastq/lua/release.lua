--! include requeue
-- release: hand a worker's leased jobs back to the front of the queue.
--
-- KEYS[1] ready      list   the right end is the front
-- KEYS[2] inflight   zset   id -> lease deadline (ms)
-- KEYS[3] lease      hash   id -> worker id
-- KEYS[4] held       set    ids this worker holds
-- KEYS[5] stats      hash   counters
-- KEYS[6] wake       list   wake-up token for idle workers
-- KEYS[7] jobs       hash   id -> envelope
-- KEYS[8] dead       zset   id -> time of death (ms)
-- KEYS[9] stalls     hash   id -> times its worker died running it
--
-- ARGV[1] worker id
-- ARGV[2] mode        'unstarted': claimed but never run (a stopping worker's
--                       prefetch, leases behind a lost reply); nothing counted
--                     'orphaned': held by a worker that died, not the job it was
--                       running; may have run, counted in stats as orphaned
--                     'stalled': the job its worker died or hung running; a stall
--                       is counted against it, and past max_stalls it goes dead
-- ARGV[3] max_stalls
-- ARGV[4..] ids       the ids to release, the first at the very front; none =
--                     every id the worker holds, in no particular order
--
-- Only ids whose lease this worker still holds move. Returns how many moved.

local worker = ARGV[1]
local mode = ARGV[2]

local ids
if #ARGV > 3 then
    ids = {}
    for i = 4, #ARGV do
        ids[#ids + 1] = ARGV[i]
    end
else
    -- bounded by what one worker can prefetch
    ids = redis.call('SMEMBERS', KEYS[4])
end
if #ids == 0 then
    return 0
end

local owners = redis.call('HMGET', KEYS[3], unpack(ids))
local mine = {}
for k = 1, #ids do
    if owners[k] == worker then
        mine[#mine + 1] = ids[k]
    end
end
redis.call('SREM', KEYS[4], unpack(ids))
if #mine == 0 then
    return 0
end

redis.call('ZREM', KEYS[2], unpack(mine))
redis.call('HDEL', KEYS[3], unpack(mine))
if mode == 'stalled' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local k = {ready = KEYS[1], jobs = KEYS[7], dead = KEYS[8], stats = KEYS[5], stalls = KEYS[9]}
    requeue_stalled(mine, now, tonumber(ARGV[3]), k)
else
    push_front(KEYS[1], mine)
    if mode == 'orphaned' then
        redis.call('HINCRBY', KEYS[5], 'orphaned', #mine)
    end
end
if redis.call('LLEN', KEYS[6]) == 0 then
    redis.call('RPUSH', KEYS[6], 1)
end
return #mine
