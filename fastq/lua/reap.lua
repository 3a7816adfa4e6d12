--! include promote
--! include requeue
--! include trim
-- reap: the reaper's periodic sweep of one queue. Safe with any number of
-- reapers at once: each expired lease is taken by exactly one call.
--
-- KEYS[1]  ready      list   the right end is the front
-- KEYS[2]  inflight   zset   id -> lease deadline (ms)
-- KEYS[3]  lease      hash   id -> worker id
-- KEYS[4]  jobs       hash   id -> envelope
-- KEYS[5]  dead       zset   id -> time of death (ms)
-- KEYS[6]  stats      hash   counters
-- KEYS[7]  stalls     hash   id -> times its holder died or hung running it
-- KEYS[8]  wake       list   wake-up token for idle workers
-- KEYS[9]  scheduled  zset   id -> due time (ms)
-- KEYS[10] prio       zset   ids with a priority
--
-- ARGV[1] max_stalls       a job stalled more often than this is dead (poison)
-- ARGV[2] limit            expired leases and due jobs handled at most per call
-- ARGV[3] dead_max_age_ms
-- ARGV[4] dead_max_len
--
-- Returns {expired, buried, promoted, next_deadline_ms or -1, next_due_ms or -1};
-- the last two tell the reaper how long it may sleep.

local max_stalls = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
local buried = 0
if #expired > 0 then
    redis.call('ZREM', KEYS[2], unpack(expired))
    redis.call('HDEL', KEYS[3], unpack(expired))
    local k = {ready = KEYS[1], jobs = KEYS[4], dead = KEYS[5], stats = KEYS[6], stalls = KEYS[7]}
    local _
    _, buried = requeue_stalled(expired, now, max_stalls, k)
end

local promoted = promote_due(KEYS[9], KEYS[4], KEYS[1], KEYS[10], KEYS[6], now, limit)
trim_dead(KEYS[5], KEYS[4], now, tonumber(ARGV[3]), tonumber(ARGV[4]))

if #expired - buried + promoted > 0 and redis.call('LLEN', KEYS[8]) == 0 then
    redis.call('RPUSH', KEYS[8], 1)
end

local next_deadline, next_due = -1, -1
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #first > 0 and first[2] ~= 'inf' then
    next_deadline = tonumber(first[2])
end
first = redis.call('ZRANGE', KEYS[9], 0, 0, 'WITHSCORES')
if #first > 0 then
    next_due = tonumber(first[2])
end
return {#expired, buried, promoted, next_deadline, next_due}
