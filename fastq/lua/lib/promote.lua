-- promote_due: move up to `limit` due scheduled jobs to the front of ready, or
-- into prio when their envelope carries a priority. Returns how many moved.
local function promote_due(scheduled, jobs, ready, prio, stats, now, limit)
    local due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now, 'LIMIT', 0, limit)
    if #due == 0 then
        return 0
    end
    redis.call('ZREM', scheduled, unpack(due))
    local envs = redis.call('HMGET', jobs, unpack(due))
    -- walk backwards so the earliest due ends up at the very front
    for i = #due, 1, -1 do
        local env = envs[i]
        if env then
            local priority = 0
            local ok, decoded = pcall(cjson.decode, env)
            if ok and type(decoded) == 'table' and tonumber(decoded['priority']) then
                priority = math.floor(tonumber(decoded['priority']))
            end
            if priority ~= 0 then
                local seq = redis.call('HINCRBY', stats, 'seq', 1)
                redis.call('ZADD', prio, -priority * 2147483648 + seq, due[i])
            else
                redis.call('RPUSH', ready, due[i])
            end
        end
    end
    return #due
end
