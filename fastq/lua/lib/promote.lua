-- promote_due: move up to `limit` due jobs (those of every millisecond up to `now`)
-- out of `scheduled`, in due order, and jobs due in the same millisecond in the
-- order they were scheduled (enqueue gives each its slot of the millisecond):
--   a delayed job (a score with a fraction: see enqueue's slots) joins the back of
--     ready like a fresh job, or prio with the priority `sched_prio` holds for it.
--     Its envelope is never read: a campaign of 30,000 jobs due at once moves at
--     the cost of ZRANGE, ZREM and LPUSH, and a queue without priorities pays one
--     EXISTS for them;
--   a retry (a whole-number score, written by ack) goes back to the very front, or
--     into prio when its envelope carries a priority (decoded: retries are few).
-- Scores are written with %.17g: redis.call turns Lua numbers into text with
-- %.14g, which would round a slot's fraction or a large priority's seq away.
-- Returns how many moved.
local function promote_due(scheduled, jobs, ready, prio, stats, sched_prio, now, limit)
    if limit < 1 then
        return 0
    end
    local due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', '(' .. (now + 1), 'WITHSCORES',
        'LIMIT', 0, limit)
    local n = #due / 2
    if n == 0 then
        return 0
    end
    local ids = {}
    for i = 1, n do
        ids[i] = due[2 * i - 1]
    end
    redis.call('ZREM', scheduled, unpack(ids))
    local prios = nil
    if redis.call('EXISTS', sched_prio) == 1 then
        prios = redis.call('HMGET', sched_prio, unpack(ids))
    end
    local back, ranked, ranks, retries = {}, {}, {}, {}
    for i = 1, n do
        local score = tonumber(due[2 * i])
        if score == math.floor(score) then
            retries[#retries + 1] = ids[i]
        elseif prios and prios[i] then
            ranked[#ranked + 1] = ids[i]
            ranks[#ranks + 1] = tonumber(prios[i])
        else
            back[#back + 1] = ids[i]
        end
    end
    if #back > 0 then
        -- LPUSH in due order: the earliest ends up nearest the front
        redis.call('LPUSH', ready, unpack(back))
    end
    if #ranked > 0 then
        redis.call('HDEL', sched_prio, unpack(ranked))
        local last = redis.call('HINCRBY', stats, 'seq', #ranked)
        local args = {}
        for k = 1, #ranked do
            args[#args + 1] = string.format('%.17g', -ranks[k] * 2147483648 + (last - #ranked + k))
            args[#args + 1] = ranked[k]
        end
        redis.call('ZADD', prio, unpack(args))
    end
    if #retries > 0 then
        local envs = redis.call('HMGET', jobs, unpack(retries))
        -- walk backwards so the earliest due ends up at the very front
        for i = #retries, 1, -1 do
            local env = envs[i]
            if env then
                local priority = 0
                local ok, decoded = pcall(cjson.decode, env)
                if ok and type(decoded) == 'table' and tonumber(decoded['priority']) then
                    priority = math.floor(tonumber(decoded['priority']))
                end
                if priority ~= 0 then
                    local seq = redis.call('HINCRBY', stats, 'seq', 1)
                    redis.call('ZADD', prio, string.format('%.17g', -priority * 2147483648 + seq),
                        retries[i])
                else
                    redis.call('RPUSH', ready, retries[i])
                end
            end
        end
    end
    return n
end
