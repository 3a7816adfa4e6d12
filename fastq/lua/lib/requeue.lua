-- push_front: put ids back at the front of ready, the first id at the very front.
local function push_front(ready, ids)
    local back = {}
    for k = #ids, 1, -1 do
        back[#back + 1] = ids[k]
    end
    redis.call('RPUSH', ready, unpack(back))
end

-- requeue_stalled: count a stall against each id (its holder died or its lease
-- expired); past max_stalls it is a poison job and goes to the dead set, else
-- back to the front. k holds the key names. Appends each buried id and the reason
-- to `buried_out`. Returns requeued, buried.
local function requeue_stalled(ids, now, max_stalls, k, buried_out)
    local back, buried = {}, 0
    for i = 1, #ids do
        local id = ids[i]
        local stalls = redis.call('HINCRBY', k.stalls, id, 1)
        if stalls > max_stalls then
            buried_out[#buried_out + 1] = id
            buried_out[#buried_out + 1] = 'stalled ' .. stalls .. ' times: its worker died or hung'
                .. ' while running it (poison job?)'
            local env = redis.call('HGET', k.jobs, id)
            if env and string.sub(env, -1) == '}' then
                -- appended, not re-encoded: cjson would turn [] into {}
                env = string.sub(env, 1, -2)
                    .. ',"stall_error":"stalled ' .. stalls .. ' times: its worker died or hung'
                    .. ' while running it (poison job?)","failed_at":' .. now .. '}'
                redis.call('HSET', k.jobs, id, env)
            end
            redis.call('ZADD', k.dead, now, id)
            redis.call('HDEL', k.stalls, id)
            buried = buried + 1
        else
            back[#back + 1] = id
        end
    end
    if #back > 0 then
        push_front(k.ready, back)
    end
    redis.call('HINCRBY', k.stats, 'stalled', #ids)
    if buried > 0 then
        redis.call('HINCRBY', k.stats, 'dead', buried)
    end
    return #back, buried
end
