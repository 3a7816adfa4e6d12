--! include many
--! include groups
-- promote_due: move up to `limit` due jobs (those of every millisecond up to `now`)
-- out of `scheduled`, in due order, and jobs due in the same millisecond in the
-- order they were scheduled (enqueue gives each its slot of the millisecond).
-- Where each goes is read from `sched_prio`, never from an envelope:
--   no entry (a delayed job of priority 0): the back of ready, like a fresh job;
--   a priority: into prio, behind the jobs of that priority already there;
--   'r' (a retry, written by ack): back to the very front, or into prio when its
--     envelope carries a priority (decoded: retries are few).
-- A campaign of 30,000 jobs due at once thus moves at the cost of ZRANGEBYSCORE,
-- ZREMRANGEBYRANK and LPUSH (no WITHSCORES: Redis 7.0 formats every score with
-- %.17g, 1.5 us a job), and a queue with no priorities or retries scheduled pays
-- one EXISTS. Prio scores are written with %.17g: redis.call would write a Lua
-- number with %.14g, rounding a large priority's seq away.
-- Of a queue that has had a grouped job (gk: its group keys, lib/groups.lua, else
-- nil), a grouped delayed job ('g<priority>\n<group>' in sched_prio) goes to the
-- back of its group, and a grouped retry to the front of its group.
-- Returns how many moved.
local function promote_due(scheduled, jobs, ready, prio, stats, sched_prio, now, limit, gk)
    if limit < 1 then
        return 0
    end
    local ids = redis.call('ZRANGEBYSCORE', scheduled, '-inf', '(' .. (now + 1), 'LIMIT', 0, limit)
    local n = #ids
    if n == 0 then
        return 0
    end
    -- the first n by rank are the ones just read: no lookup by member
    redis.call('ZREMRANGEBYRANK', scheduled, 0, n - 1)
    if redis.call('EXISTS', sched_prio) == 0 then
        call_many('LPUSH', ready, ids)  -- in due order: the earliest nearest the front
        return n
    end
    local places = call_many('HMGET', sched_prio, ids)
    local back, ranked, ranks, retries, marked = {}, {}, {}, {}, {}
    for i = 1, n do
        local place = places[i]
        if not place then
            back[#back + 1] = ids[i]
        else
            marked[#marked + 1] = ids[i]
            if place == 'r' then
                retries[#retries + 1] = ids[i]
            elseif string.byte(place, 1) == 103 then  -- 'g': a grouped delayed job
                local p, g = string.match(place, '^g(-?%d+)\n(.+)$')
                if gk and g then
                    group_push_back(gk, g, tonumber(p), {ids[i]})
                else  -- no group keys given: run it, as a job of no group
                    back[#back + 1] = ids[i]
                end
            else
                ranked[#ranked + 1] = ids[i]
                ranks[#ranks + 1] = tonumber(place)
            end
        end
    end
    if #marked > 0 then
        call_many('HDEL', sched_prio, marked)
    end
    if #back > 0 then
        call_many('LPUSH', ready, back)
    end
    if #ranked > 0 then
        local last = redis.call('HINCRBY', stats, 'seq', #ranked)
        local args = {}
        for k = 1, #ranked do
            args[#args + 1] = string.format('%.17g', -ranks[k] * 2147483648 + (last - #ranked + k))
            args[#args + 1] = ranked[k]
        end
        call_many('ZADD', prio, args)
    end
    if #retries > 0 and gk then
        retries = group_front(gk, jobs, retries)
    end
    if #retries > 0 then
        local envs = call_many('HMGET', jobs, retries)
        -- walk backwards so the earliest due ends up at the very front
        for i = #retries, 1, -1 do
            local env = envs[i]
            if env then
                local priority = 0
                local ok, decoded = pcall(cjson.decode, env)
                if ok and type(decoded) == 'table' then
                    -- [name, args, t, {fields}]: 'p' in the fields, absent when 0; the
                    -- object of the format before: 'priority'
                    local fields = decoded[1] == nil and decoded or decoded[4]
                    local p = type(fields) == 'table' and tonumber(fields['p'] or fields['priority'])
                    if p then
                        priority = math.floor(p)
                    end
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
