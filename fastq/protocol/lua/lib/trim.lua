--! include many
-- trim_dead: delete dead jobs older than max_age_ms, then the oldest beyond
-- max_len; at most 100 of each per call so one call stays short. Their poison
-- records (why a stalled job died) go with them.
local function trim_dead(dead, jobs, poison, now, max_age_ms, max_len)
    local old = redis.call('ZRANGEBYSCORE', dead, '-inf', now - max_age_ms, 'LIMIT', 0, 100)
    if #old > 0 then
        call_many('ZREM', dead, old)
        call_many('HDEL', jobs, old)
        call_many('HDEL', poison, old)
    end
    local excess = redis.call('ZCARD', dead) - max_len
    if excess > 0 then
        local gone = redis.call('ZRANGE', dead, 0, math.min(excess, 100) - 1)
        call_many('ZREM', dead, gone)
        call_many('HDEL', jobs, gone)
        call_many('HDEL', poison, gone)
    end
end
