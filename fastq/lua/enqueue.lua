#!lua
-- enqueue: add a batch of jobs to one queue.
--
-- KEYS[1] jobs       hash   id -> envelope
-- KEYS[2] ready      list   ids; producers LPUSH, workers pop the right end (the front)
-- KEYS[3] prio       zset   ids with a non-zero priority; score = -priority * 2^31 + seq
-- KEYS[4] scheduled  zset   id -> due time (ms)
-- KEYS[5] stats      hash   counters (enqueued, seq, ...)
-- KEYS[6] wake       list   at most one token; idle workers BLPOP it
--
-- ARGV[1] priority   integer shared by the batch (0 = plain FIFO)
-- ARGV[2] delay_ms   0 = ready now, > 0 = scheduled that far after Redis' clock
-- ARGV[3..] pairs    id, envelope
--
-- An id that already exists is left alone (custom ids make enqueue idempotent).
-- Returns the number of jobs added.
-- No allow-oom flag: over maxmemory Redis refuses the whole call before it runs.

local priority = tonumber(ARGV[1])
local delay_ms = tonumber(ARGV[2])

local added = {}
for i = 3, #ARGV, 2 do
    if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
        added[#added + 1] = ARGV[i]
    end
end
local n = #added
if n == 0 then
    return 0
end

if delay_ms > 0 then
    local t = redis.call('TIME')
    local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + delay_ms
    local args = {}
    for k = 1, n do
        args[#args + 1] = due
        args[#args + 1] = added[k]
    end
    redis.call('ZADD', KEYS[4], unpack(args))
elseif priority ~= 0 then
    -- seq keeps FIFO order within one priority
    local last = redis.call('HINCRBY', KEYS[5], 'seq', n)
    local base = -priority * 2147483648 + (last - n)
    local args = {}
    for k = 1, n do
        args[#args + 1] = base + k
        args[#args + 1] = added[k]
    end
    redis.call('ZADD', KEYS[3], unpack(args))
else
    redis.call('LPUSH', KEYS[2], unpack(added))
end

redis.call('HINCRBY', KEYS[5], 'enqueued', n)
if delay_ms == 0 and redis.call('LLEN', KEYS[6]) == 0 then
    redis.call('RPUSH', KEYS[6], 1)
end
return n
