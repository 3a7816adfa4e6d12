--! include front
--! include groups
--! include links
--! include batches
--! include chains
-- requeue_stalled: count a stall against each id (its holder died or its lease
-- expired); past max_stalls it is a poison job and goes to the dead set, with
-- the reason in k.poison (its envelope is left as it is; its tags and unique lock
-- go, and it counts dead in its batch), else back to the front (of its group, when
-- k.gk holds the queue's group keys: lib/groups.lua). k holds the key names. Appends each buried id and
-- the reason to `buried_out`. `cause`: how the worker died this time, if known
-- ('was killed by SIGSEGV'), said in the reason. Returns requeued, buried.
local function requeue_stalled(ids, now, max_stalls, k, buried_out, cause)
    local back, buried = {}, {}
    for i = 1, #ids do
        local id = ids[i]
        local stalls = redis.call('HINCRBY', k.stalls, id, 1)
        if stalls > max_stalls then
            local reason
            if cause and cause ~= '' then
                reason = 'stalled ' .. stalls .. ' times, the last: its worker ' .. cause
                    .. ' while running it (poison job?)'
            else
                reason = 'stalled ' .. stalls .. ' times: its worker died or hung'
                    .. ' while running it (poison job?)'
            end
            buried_out[#buried_out + 1] = id
            buried_out[#buried_out + 1] = reason
            redis.call('HSET', k.poison, id, reason)
            redis.call('ZADD', k.dead, now, id)
            redis.call('HDEL', k.stalls, id)
            buried[#buried + 1] = id
        else
            back[#back + 1] = id
        end
    end
    if #back > 0 and k.gk then
        back = group_front(k.gk, k.jobs, back)
    end
    if #back > 0 then
        push_front(k.ready, back)
    end
    redis.call('HINCRBY', k.stats, 'stalled', #ids)
    if #buried > 0 then
        redis.call('HINCRBY', k.stats, 'dead', #buried)
        end_links(k, buried)
        end_batches(k, buried, BATCH_DEAD, true)
        if k.chained then
            chain_drop(k, buried)
        end
    end
    return #back, #buried
end
