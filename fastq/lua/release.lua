-- release: hand a worker's leased jobs back to the front of the queue.
--
-- Used when a worker stops with jobs it prefetched but never started, after a
-- lost reply (the worker may hold leases it never saw), and by a master whose
-- child died holding jobs.
--
-- KEYS[1] ready      list   the right end is the front
-- KEYS[2] inflight   zset   id -> lease deadline (ms)
-- KEYS[3] lease      hash   id -> worker id
-- KEYS[4] attempts   hash   id -> number of claims
-- KEYS[5] held       set    ids this worker holds
-- KEYS[6] stats      hash   counters
-- KEYS[7] wake       list   wake-up token for idle workers
--
-- ARGV[1] worker id
-- ARGV[2] mode       'unstarted': never ran, so the claim's attempt is taken back;
--                    'stalled': may have run, counted in stats as stalled
-- ARGV[3..] ids      the ids to release; none = every id the worker holds
--
-- Only ids whose lease this worker still holds move. Returns how many moved.

local worker = ARGV[1]
local mode = ARGV[2]

local ids
if #ARGV > 2 then
    ids = {}
    for i = 3, #ARGV do
        ids[#ids + 1] = ARGV[i]
    end
else
    -- bounded by what one worker can prefetch
    ids = redis.call('SMEMBERS', KEYS[5])
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
redis.call('SREM', KEYS[5], unpack(ids))
if #mine == 0 then
    return 0
end

redis.call('ZREM', KEYS[2], unpack(mine))
redis.call('HDEL', KEYS[3], unpack(mine))
if mode == 'unstarted' then
    for k = 1, #mine do
        redis.call('HINCRBY', KEYS[4], mine[k], -1)
    end
else
    redis.call('HINCRBY', KEYS[6], 'stalled', #mine)
end
-- pushed in reverse so the first id given ends up at the very front
local back = {}
for k = #mine, 1, -1 do
    back[#back + 1] = mine[k]
end
redis.call('RPUSH', KEYS[1], unpack(back))
if redis.call('LLEN', KEYS[7]) == 0 then
    redis.call('RPUSH', KEYS[7], 1)
end
return #mine
